"""Shared fixtures: hermetic git, real bare repositories in temporary directories."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import httpx._transports.default
import pytest

from reef_core.store import Store, StoreOptions
from tests.reefine.pi import PI_NEXT, TESTED_PIS

# One thread a process for torch's (OpenMP's) kernels, in the workers and the daemons they start
# (they inherit it): the suite runs several workers a core, and SmolLM2's small matrices gain
# nothing from a second thread there, while threads that spin waiting for each other take the
# core another worker's test needs.  A developer's own setting is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Tests never see the developer's or the machine's git configuration.
os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
os.environ.pop("REEF_TOKEN", None)
# The pi a test gets when it names none (the health check of every reefine daemon, the pi
# machines' reef-pi): the newest tested pi, 1.6.0, which is what ``reef-pi``'s installer puts on
# a machine that has no pi.  The oldest supported, 0.73.1, runs in every test marked
# ``both_pis``.  It is also the cheaper to start: 1.1 s of CPU a print-mode run against 2.4 s for
# 0.73.1 on node 20, in a suite that starts pi about a hundred times.  A developer's REEF_PI is
# kept.
if "REEF_PI" not in os.environ and TESTED_PIS[PI_NEXT][1].exists():
    os.environ["REEF_PI"] = str(TESTED_PIS[PI_NEXT][1])

# One TLS context for every httpx client the tests make.  httpx builds a new one for each
# Client, and ``httpx.get``/``post`` make a Client a call: certifi's bundle read and parsed, 37 ms
# of CPU each, for tests that speak plain HTTP on loopback thousands of times (polls included).
# The workers spent minutes of the suite's CPU on it.  Any other verify or cert is built as asked.
_build_ssl_context = httpx._transports.default.create_ssl_context
_DEFAULT_SSL_CONTEXT = _build_ssl_context()


def _shared_ssl_context(verify: object = True, cert: object = None, trust_env: bool = True) -> object:
    if verify is True and cert is None and trust_env:
        return _DEFAULT_SSL_CONTEXT
    return _build_ssl_context(verify=verify, cert=cert, trust_env=trust_env)


httpx._transports.default.create_ssl_context = _shared_ssl_context

LFS_CONFIG = [
    "-c",
    "filter.lfs.clean=git-lfs clean -- %f",
    "-c",
    "filter.lfs.smudge=git-lfs smudge -- %f",
    "-c",
    "filter.lfs.process=git-lfs filter-process",
    "-c",
    "filter.lfs.required=true",
]


def git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real git CLI; fails the test with git's own words when ``check`` and it fails."""
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        pytest.fail(f"git {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
    return result


def wait_for(condition: Callable[[], object], timeout: float = 20.0) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` seconds pass (its last answer):
    every 10 ms at first, backing off to every 100 ms, so a long wait on a daemon's route does
    not keep a core busy with polls the daemon must answer."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(pause)
        pause = min(0.1, pause * 1.5)
    return bool(condition())


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with a slow test run first, each kept in order: run on several workers
    (``scripts/check.sh``), the minute-long tests then start at once instead of ending the run on
    one worker while the others are idle.  The tests of a module with a module-scoped fixture (a
    model loaded once, a daemon started once) stay on one worker (``--dist loadgroup``), so the
    fixture is still made once; every other test goes to whichever worker is free."""
    slow = {item.module for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module not in slow)
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info else ()
        if any(chain[-1].scope in ("module", "class", "package") for chain in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def must_isolate() -> bool:
    """Whether this host must run the OS sandbox, so a test that needs it fails rather than skips:
    in CI (``CI`` set; setup.sh --dev installs bubblewrap), or with ``REEF_TEST_BWRAP=required``."""
    return os.environ.get("REEF_TEST_BWRAP") == "required" or bool(os.environ.get("CI"))


@pytest.fixture
def sandbox() -> None:
    """The OS sandbox (``reef_core.sandbox``) runs here, or the test is skipped saying why; where
    it must (:func:`must_isolate`) it fails instead, so a security test never passes by a skip."""
    from reef_core.sandbox import bwrap_problem

    problem = bwrap_problem()
    if problem is None:
        return
    if must_isolate():
        pytest.fail(f"this host must isolate, and cannot: {problem}", pytrace=False)
    pytest.skip(f"this host cannot isolate: {problem}")


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A fresh folder outside ``/tmp`` (which any sandbox replaces with its own): ``/var/tmp``'s,
    else the project's ``.cache``; removed afterwards."""
    parent = Path("/var/tmp")
    if not (parent.is_dir() and os.access(parent, os.W_OK)):
        parent = Path(__file__).resolve().parents[1] / ".cache"
        parent.mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="reef-test-", dir=parent))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "state", StoreOptions(pack_every=0))


@pytest.fixture
def scenario(store: Store):
    opened = store.open("demo", create=True)
    yield opened
    opened.close()


class SmallDisk:
    """A tmpfs of its own, and a filler file that takes what is free on it (a full disk)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"

    def free(self) -> int:
        return os.statvfs(self.path).f_bavail * os.statvfs(self.path).f_frsize

    def fill(self, leave: int = 0) -> None:
        """Take all the free space but ``leave`` bytes (rounded down to whole pages)."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for size in (1 << 20, 65536, 4096, 512, 1):
                chunk = b"\0" * size
                while self.free() - size >= leave:
                    try:
                        os.write(fd, chunk)
                    except OSError:
                        break
        finally:
            os.close(fd)

    def make_room(self) -> None:
        self.filler.unlink(missing_ok=True)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 32 MB tmpfs mounted for the test (root can mount one; CI runs as root)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield SmallDisk(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
