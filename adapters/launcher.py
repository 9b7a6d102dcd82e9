"""The launcher core shared by ``reef-pi`` and ``reef-claude``: what one adapter's launcher is
(:class:`Harness`), where its install lives (:class:`Layout`), the command line, and starting the
harness.

| command | what |
|---|---|
| ``reef-X [harness args]`` | the harness, routed through reef (each adapter's :attr:`Harness.run`) |
| ``reef-X evolve "text" [--wait] [--timeout S]`` | file an ask on the installed release, follow it |
| ``reef-X versions [NAME]`` | the releases table; with a name, its page |
| ``reef-X update [--release vN]`` | fetch the installer for the current (or named) release and run it |
| ``reef-X report --score S [--feedback T]`` | feedback on the receipts of the last run |
| ``reef-X learn [--wait] [--timeout S]`` | a usage step now (reefine learns from the scored sessions) |
| ``reef-X doctor`` | one line per prerequisite; exit 0 only when all are met |

The verbs live in :mod:`adapters.verbs` and the doctor in :mod:`adapters.doctor`; this module
keeps what every start needs.  An adapter describes what differs in one :class:`Harness`: its
name, the binary it runs (which names its launcher, ``reef-<binary>``, and the variable that
picks another, ``REEF_<BINARY>``) and the oldest version of it reef accepts, the folder its config
lives in and the variable that points the harness there, and the function that starts it (pi:
environment variables and ``exec``; Claude Code: a ``--settings`` file and a seeded
``.claude.json``, then ``exec``).  Everything else lives in the launcher modules, once.

Environment: ``REEF_URL`` and ``REEF_SCENARIO`` override the values the installer baked in;
``REEF_TOKEN`` is sent when set; ``REEF_HOME`` (default ``~/.reef``) holds the installs under
``harnesses/<adapter>/<scenario>/``; ``REEF_SESSION`` names the run's session instead of a fresh id.

"The last run": each run gets a fresh id (or ``REEF_SESSION``) that the harness sends as the
``x-reef-tag-run`` header, so every record of the run carries the tag ``run=<id>``.  The launcher
notes the id and start time in ``last-run.json`` before it hands the process to the harness;
``report`` asks the daemon for the records with that tag written since then and reports on them.

Exit codes: 0 done, 1 failed, 2 usage.

Starting the harness is the path every run takes, so it imports only the standard library and
reef's small modules (ids, errors, :mod:`adapters.binaries`): the verbs load when one is called,
reef's HTTP client and the release listing, which bring httpx and pygit2 (about 150 ms), load
in the verbs that use them, and the check that the daemon answers is one ``http.client`` request.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.client import HTTPConnection, HTTPSConnection
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO
from urllib.parse import quote, urlsplit

from adapters.binaries import find_binary, path_with
from adapters.canary import SessionTree, session_tree
from reef_core.errors import ReefError, Unauthorized
from reef_core.ids import validate_scenario_name

if TYPE_CHECKING:  # the client (httpx) loads only in the verbs
    from reef_core.client import ReefClient

__all__ = [
    "COMMANDS",
    "Context",
    "Harness",
    "Layout",
    "Usage",
    "daemon_answers",
    "entry",
    "exec_harness",
    "installed_release",
    "main",
    "parse",
    "prepare_run",
    "read_sidecar",
    "usage_text",
    "write_json",
]

COMMANDS = ("evolve", "versions", "update", "report", "learn", "doctor", "help")
HEALTH_TIMEOUT_S = 3.0  # a daemon on this machine answers /healthz in milliseconds
_SESSION = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class Usage(ReefError):
    """The command line is wrong (exit code 2)."""

    code = "usage"


@dataclass(frozen=True)
class Harness:
    """What one adapter's launcher does differently (see the module docstring)."""

    adapter: str  # "pi", "claude_code": the installer's ?adapter= and the folder under harnesses/
    binary: str  # the program it runs: "pi"; also the sidecar key naming the one installed
    label: str  # for people: "pi", "Claude Code"
    config_dir: str  # the harness's config folder inside the install: "agent", "config"
    config_env: str  # the variable that points the harness at it: "PI_CODING_AGENT_DIR"
    min_version: str  # the oldest version reef works with
    #: starts the harness (replacing the process); returns an exit code only when it cannot
    run: Callable[[Context, list[str]], int]
    #: what starts reef's in-session commands (Codex's TUI refuses a ``/`` it does not know)
    command_prefix: str = "/"
    #: in-session words for "install this release", for the people reading ``evolve``'s outcome
    in_session_install: str = "/versions {name} install"
    #: the harness's own flags that answer without a model call (no daemon needed)
    info_only: frozenset[str] = frozenset({"-h", "--help", "-v", "--version"})
    #: the launcher's own flags before the harness's, for the usage text
    run_flags: str = ""
    #: verbs only this adapter has (Claude Code's ``hook``)
    extra: Mapping[str, Callable[[Context, list[str]], int]] = field(default_factory=dict)

    @property
    def command(self) -> str:
        """The launcher's name: ``reef-pi``."""
        return f"reef-{self.binary}"

    @property
    def binary_env(self) -> str:
        """The variable that names the binary to run: ``REEF_PI``."""
        return f"REEF_{self.binary.upper()}"

    @property
    def launcher_env(self) -> str:
        """The variable that tells the harness (its in-session commands) which launcher started
        it: ``REEF_PI_LAUNCHER``."""
        return f"{self.binary_env}_LAUNCHER"


@dataclass(frozen=True)
class Layout:
    """Where one scenario's install for one adapter lives: ``<home>/harnesses/<adapter>/<scenario>/``."""

    home: Path
    scenario: str
    adapter: str = "pi"
    config_dir: str = "agent"

    @classmethod
    def of(cls, env: Mapping[str, str], scenario: str, harness: Harness) -> Layout:
        home = env.get("REEF_HOME") or str(Path(env.get("HOME") or Path.home()) / ".reef")
        name = validate_scenario_name(scenario, field="REEF_SCENARIO")
        return cls(Path(home), name, harness.adapter, harness.config_dir)

    @property
    def base(self) -> Path:
        return self.home / "harnesses" / self.adapter / self.scenario

    @property
    def config(self) -> Path:
        """The harness's config folder (pi's agent dir, Claude Code's ``CLAUDE_CONFIG_DIR``)."""
        return self.base / self.config_dir

    @property
    def sidecar(self) -> Path:
        return self.base / "installed.json"

    @property
    def last_run(self) -> Path:
        return self.base / "last-run.json"


@dataclass(frozen=True)
class Context:
    harness: Harness
    url: str
    scenario: str
    token: str | None
    layout: Layout
    env: Mapping[str, str]
    launcher: str | None
    out: TextIO
    err: TextIO

    def client(self, timeout: float = 30.0) -> ReefClient:
        from reef_core.client import ReefClient

        return ReefClient(self.url, self.token, timeout=timeout)

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def installer_url(self) -> str:
        return (
            f"{self.url}/reef/harness/install?adapter={self.harness.adapter}&scenario={quote(self.scenario)}"
        )

    def installed(self) -> dict[str, Any]:
        """The sidecar; a missing or unreadable one is an error saying how to install."""
        try:
            data = json.loads(self.layout.sidecar.read_text())
        except FileNotFoundError:
            raise ReefError(
                f"{self.harness.label} is not installed for scenario {self.scenario} "
                f"(no {self.layout.sidecar}): install it with\n  curl -fsSL '{self.installer_url()}' | sh"
            ) from None
        except (OSError, ValueError) as exc:
            raise ReefError(
                f"{self.layout.sidecar} cannot be read ({exc}): run {self.harness.command} update"
            ) from exc
        if not isinstance(data, dict):
            raise ReefError(f"{self.layout.sidecar} is not a reef sidecar: run {self.harness.command} update")
        return data


# ------------------------------------------------------------------------------------ entry


def main(
    harness: Harness,
    argv: list[str],
    *,
    url: str,
    scenario: str,
    launcher: str | None = None,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run ``reef-X argv``; returns the exit code (a harness run replaces the process instead)."""
    env = os.environ if env is None else env
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        name = env.get("REEF_SCENARIO") or scenario
        ctx = Context(
            harness=harness,
            url=(env.get("REEF_URL") or url).rstrip("/"),
            scenario=validate_scenario_name(name, field="REEF_SCENARIO"),
            token=env.get("REEF_TOKEN") or None,
            layout=Layout.of(env, name, harness),
            env=env,
            launcher=launcher,
            out=out,
            err=err,
        )
        if argv and argv[0] in harness.extra:
            return harness.extra[argv[0]](ctx, argv[1:])
        if argv and argv[0] in COMMANDS:
            return _verb(argv[0])(ctx, argv[1:])
        return harness.run(ctx, argv)
    except Usage as exc:
        print(f"{harness.command}: {exc.message}\n{usage_text(harness)}", file=err)
        return 2
    except Unauthorized as exc:
        hint = "check REEF_TOKEN" if env.get("REEF_TOKEN") else "export REEF_TOKEN with this reef's token"
        print(f"{harness.command}: {exc.message} ({hint})", file=err)
        return 1
    except ReefError as exc:
        print(f"{harness.command}: {exc.message}", file=err)
        return 1
    except KeyboardInterrupt:
        print(f"{harness.command}: interrupted", file=err)
        return 130


def hook_verb(ctx: Context, args: list[str]) -> int:
    """The ``hook`` verb of the harnesses whose hooks call their launcher (Claude Code, Codex,
    opencode): ``adapters.hooks``, imported when a hook runs, since it imports this module."""
    from adapters import hooks

    return hooks.run(ctx, args)


def entry(harness: Harness) -> Callable[..., int]:
    """The ``main`` of one adapter's launcher: :func:`main` with ``harness`` given."""
    return functools.partial(main, harness)


def usage_text(harness: Harness) -> str:
    c = harness.command
    flags = f"{harness.run_flags} " if harness.run_flags else ""
    return (
        f"usage: {c} {flags}[{harness.binary} args]          {harness.label}, routed through reef\n"
        f'       {c} evolve "text" [--wait] [--timeout S]\n'
        f"       {c} versions [vN|cN]\n"
        f"       {c} update [--release vN]\n"
        f"       {c} report --score S [--feedback T]\n"
        f"       {c} learn [--wait] [--timeout S]\n"
        f"       {c} doctor"
    )


def _verb(name: str) -> Callable[[Context, list[str]], int]:
    from adapters.verbs import VERBS  # the verbs load when one is called: a run needs none of them

    return VERBS[name]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Usage(f"{self.prog}: {message}")


def parse(prog: str, args: list[str], build: Callable[[_Parser], None]) -> argparse.Namespace:
    """Parse a verb's arguments; a mistake raises :class:`Usage` (exit 2 with the usage text)."""
    parser = _Parser(prog=prog, add_help=False)
    build(parser)
    return parser.parse_args(args)


def _parse(ctx: Context, verb: str, args: list[str], build: Callable[[_Parser], None]) -> argparse.Namespace:
    return parse(f"{ctx.harness.command} {verb}", args, build)


def daemon_answers(url: str, timeout: float = HEALTH_TIMEOUT_S) -> None:
    """``GET /healthz`` with the standard library (the run path's check, see the module
    docstring; no proxy from the environment, as reef's client); raises :class:`ReefError`
    saying how to start a daemon when none answers."""
    parts = urlsplit(url)
    kind = HTTPSConnection if parts.scheme == "https" else HTTPConnection
    try:
        connection = kind(parts.hostname or "", parts.port, timeout=timeout)
        try:
            connection.request("GET", f"{parts.path.rstrip('/')}/healthz")
            answered = connection.getresponse().status
        finally:
            connection.close()
    except (OSError, ValueError) as exc:
        raise ReefError(f"no reef daemon answers at {url} ({exc}): start it with `reef serve`") from exc
    if answered != 200:
        raise ReefError(f"{url} answers /healthz with {answered}: is it a reef daemon? (`reef serve`)")


def prepare_run(ctx: Context, args: list[str], base: Mapping[str, str]) -> tuple[str, str, dict[str, str]]:
    """Before a run: the daemon answers (unless the harness only prints its version or help),
    the install is there; the run's tag is chosen and noted in ``last-run.json``.

    Returns the tag, the binary to run (:func:`~adapters.binaries.find_binary`) and ``base`` with
    what every harness run is given: the binary's own folder first on PATH (an npm-installed node
    sits next to it), its config folder (the installed one, or a canary's:
    :mod:`adapters.canary`), the daemon, the scenario, the tag, the tree and the launcher."""
    harness = ctx.harness
    if not harness.info_only.intersection(args):
        # the harness would fail on its first model call with a bare connection error: say why first
        daemon_answers(ctx.url)
    installed = ctx.installed()
    tag = ctx.env.get("REEF_SESSION") or uuid.uuid4().hex
    if not _SESSION.fullmatch(tag):
        raise ReefError(f"REEF_SESSION {tag[:80]!r} must be 1-128 letters, digits, '.', '_', ':' or '-'")
    release = installed.get("release") if isinstance(installed.get("release"), str) else None
    tree = SessionTree(ctx.layout.config, release)
    if not harness.info_only.intersection(args):
        tree = session_tree(ctx, tag, release)
        if tree.notice:
            print(tree.notice, file=ctx.err)
    started = time.time()
    write_json(
        ctx.layout.last_run,
        {
            "tag": tag,
            "started_at": _iso(started),
            "started_ms": int(started * 1000),
            "release": tree.release,
            "cwd": os.getcwd(),
            "args": args,
        },
    )
    binary = find_binary(ctx, installed)
    env = {
        **base,
        "PATH": path_with(binary, ctx.env.get("PATH")),
        harness.config_env: str(tree.config),
        "REEF_URL": ctx.url,
        "REEF_SCENARIO": ctx.scenario,
        "REEF_RUN_TAG": tag,
        # pi fails a request whose header command prints nothing: "none" before a first install
        "REEF_RELEASE_TAG": tree.release or "none",
    }
    if ctx.launcher:
        env[harness.launcher_env] = ctx.launcher
    return tag, binary, env


def exec_harness(ctx: Context, binary: str, args: list[str], env: Mapping[str, str]) -> int:
    """Replace this process with the harness."""
    if any(a in ("-h", "--help") for a in args):
        print(
            f"{ctx.harness.command}: {ctx.harness.label} routed through reef (scenario {ctx.scenario}); "
            f"`{ctx.harness.command} help` for reef's commands",
            file=ctx.err,
        )
    try:
        os.execve(binary, [binary, *args], dict(env))
    except OSError as exc:
        raise ReefError(f"could not start {ctx.harness.label} at {binary}: {exc.strerror or exc}") from exc
    return 1  # not reached: execve replaced the process


def read_sidecar(layout: Layout) -> dict[str, Any] | None:
    try:
        data = json.loads(layout.sidecar.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def installed_release(layout: Layout) -> str | None:
    release = (read_sidecar(layout) or {}).get("release")
    return release if isinstance(release, str) else None


def write_json(path: Path, value: Any, mode: int | None = None) -> None:
    """Write ``value`` to ``path`` atomically (``mode``: the file's permissions, before it appears)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(value, indent=2) + "\n")
    tmp.replace(path)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
