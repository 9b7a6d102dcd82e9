"""The health-check template both adapters implement: validate, find, sandbox, run, judge.

:class:`HarnessHealth` implements :class:`reef_core.harness.health.HealthCheck` once; an adapter
(``adapters/pi/health.py``, ``adapters/claude_code/health.py``) subclasses it with its names and
the few steps that differ.  One run:

1. **Validate** the files (:func:`validate_files`): relative paths inside the config dir, bytes,
   no file also a directory; a task; a positive timeout.  A mistake is :class:`InvalidInput`.
2. **Find** the binary (:meth:`HarnessHealth.search`, on :func:`adapters.binaries.candidates`):
   ``$REEF_<X>`` alone when set (a wrong one there is a misconfiguration, not a reason to pick
   another), else the project's ``.cache/tools`` install, else PATH; each probed once for its
   ``--version`` and accepted at the adapter's oldest supported version or newer.  With none, the
   run fails saying what was rejected and why.
3. **Sandbox**: a fresh temporary folder holding the config dir (the files byte for byte), a
   fresh ``HOME`` and a fresh cwd, so the person's own config stays out; the adapter adds what
   its harness needs there (:meth:`HarnessHealth.prepare`).  Removed afterwards.  With a
   ``confinement`` (:class:`reef_core.sandbox.Confinement`: what a caller passes for a candidate
   whose executable content no person approved yet) the harness also runs inside the OS sandbox:
   it sees the system directories, its own install and its runtime read-only, the config dir,
   ``HOME`` and cwd writable, a private ``/tmp``, nothing of the person's home, the state dir or
   ``/run``, and no network but the confinement's bridge to the daemon's inference routes; the
   caller routes it to :attr:`~reef_core.sandbox.Confinement.inside_url` with the confinement's
   own credential, never the daemon's token.  Without one it runs on the host, with the caller's
   routing: only for trees whose code a person approved.
4. **Run** the harness in print mode on the task (:func:`reef_core.procs.run_captured`: stdin on
   /dev/null, its own process group, killed at the timeout and after it exits; its output goes
   to files outside what the sandbox can write), with a minimal PATH (the binary's folder first:
   an npm install puts the node it needs there), the adapter's quiet switches, the caller's
   routing, and ``HOME`` and the config dir always the sandbox's.
5. **Judge**: killed at the timeout, or what the adapter reads as a failure in the output
   (:meth:`HarnessHealth.problem`), or no answer on stdout, fails; else it passes.  Quotes of the
   harness's lines lose the sandbox's prefix (``extensions/bad.ts``, not a temporary path that no
   longer exists) and are cut to 300 characters.

Limits: a harness reads its rules file (``AGENTS.md``, ``CLAUDE.md``) from every ancestor of its
cwd, so one in the system temp dir would reach the prompt; on the host, a child that an extension
or a hook moves into a new session escapes the process-group kill (in the OS sandbox it cannot:
the sandbox is a pid namespace of its own, which dies with it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from adapters.binaries import candidates, minimal_path, probed_version, version_at_least
from reef_core.errors import InvalidInput
from reef_core.harness.health import HEALTH_TASK, HarnessBinary, HealthResult
from reef_core.procs import ProcessRun, last_line, quote, run_captured
from reef_core.sandbox import Confinement

__all__ = ["HarnessHealth", "Sandbox", "env_routing", "indented_after", "validate_files"]

_ANSWER_PREVIEW = 80
_STDERR_TAIL = 4000
_PROJECT_ROOT = Path(__file__).resolve().parents[1]
#: the credential a routed run sends when the daemon has no tokens (then any is accepted)
_PLACEHOLDER_KEY = "reef-local"


def env_routing(scenario: str, token: str | None, *, tagged: bool) -> dict[str, str]:
    """:meth:`HarnessHealth.routing` for a harness whose rendered provider reads reef's headers
    from the environment (pi, Codex, opencode; the URL is in the rendered config): the scenario,
    the credential, capture off, and for a provider that sends them (``tagged``) the run and
    release tags, both ``health``."""
    env = {"REEF_SCENARIO": scenario, "REEF_API_KEY": token or _PLACEHOLDER_KEY, "REEF_CAPTURE": "false"}
    if tagged:
        env |= {"REEF_RUN_TAG": "health", "REEF_RELEASE_TAG": "health"}
    return env


@dataclass(frozen=True)
class Sandbox:
    """One health run: the binary, the candidate's files, and the sandbox they run in: ``root``
    (temporary) holds ``config`` (the files), ``home`` and ``cwd``; ``env`` is the harness's
    environment (:meth:`HarnessHealth.environment`); ``confinement`` the OS sandbox it runs in,
    or None (on the host)."""

    binary: HarnessBinary
    files: Mapping[str, bytes]
    root: Path
    config: Path
    home: Path
    cwd: Path
    env: Mapping[str, str] = field(default_factory=dict)
    confinement: Confinement | None = None

    def quote(self, text: str) -> str:
        """One line of the harness's output, the sandbox's paths made relative (the config dir's first)."""
        return quote(text, self.config, self.root)


class HarnessHealth(ABC):
    """The health check of one harness (see the module docstring); a subclass sets the names
    and implements the abstract steps (routing, sandbox preparation, argv, judging, messages)."""

    adapter: str  # "pi"
    label: str  # "pi", "Claude Code"
    min_version: str
    metric: str  # "health_seconds"
    capture_env: str | None = None
    binary: str  # the program: "pi"
    binary_env: str  # the variable naming it: "REEF_PI"
    project: Path  # the project's install (scripts/setup.sh --dev), relative to the project root
    folder: str  # the config dir's name in the sandbox and in messages: "agent"
    config_env: str  # the variable naming the config dir: "PI_CODING_AGENT_DIR"
    prefix: str  # the sandbox's temporary folder's name starts with it: "reef-health-"
    no_version: str = "did not report a version"  # said of a candidate whose --version says none
    quiet: Mapping[str, str] = {}  # the environment's defaults: offline switches and the like
    probe_env: Mapping[str, str] = {}  # what --version runs with besides PATH and fresh homes
    dropped: tuple[str, ...] = ()  # variables a caller's env may not pass on

    # -- finding the binary -------------------------------------------------------------------------

    def find(self, env: Mapping[str, str] | None = None) -> HarnessBinary | None:
        """The binary :meth:`search` picks (``env`` defaults to the process environment), or None."""
        found, _ = self.search(os.environ if env is None else env)
        return found

    def search(self, env: Mapping[str, str]) -> tuple[HarnessBinary | None, list[str]]:
        """The binary to use, and for each candidate that was rejected a note saying why."""
        notes = []
        known = [("project", _PROJECT_ROOT / self.project)]
        for origin, path in candidates(env, self.binary, self.binary_env, known):
            if path is None:
                notes.append(f"no {self.binary} on PATH")
                continue
            if not path.is_file():
                notes.append(f"{origin}: no {path}")
                continue
            if not os.access(path, os.X_OK):
                notes.append(f"{origin}: {path} is not executable")
                continue
            version = self._version_of(path, env)
            if version is not None and version_at_least(version, self.min_version):
                return HarnessBinary(path.absolute(), version), notes
            said = f"is {self.label} {version}" if version else self.no_version
            notes.append(f"{origin}: {path} {said}, reef needs {self.min_version} or newer")
        return None, notes

    def probe(self, path: Path, env: Mapping[str, str] | None = None) -> HarnessBinary | None:
        """The binary at ``path`` with the version its ``--version`` reports, whatever that is;
        None when it is not an executable file or reports no version."""
        if not path.is_file() or not os.access(path, os.X_OK):
            return None
        version = self._version_of(path, os.environ if env is None else env)
        return HarnessBinary(path.absolute(), version) if version else None

    def _version_of(self, path: Path, env: Mapping[str, str]) -> str | None:
        return probed_version(
            str(path.resolve()),
            path.stat().st_mtime_ns,
            minimal_path(env, path),
            ("HOME", self.config_env),
            tuple(self.probe_env.items()),
        )

    @abstractmethod
    def not_found(self, notes: list[str]) -> str:
        """A run's detail when :meth:`search` found no binary (``notes``: why each was rejected)."""

    @abstractmethod
    def missing(self, env: Mapping[str, str] | None = None) -> str:
        """A check's detail when :meth:`find` finds no binary: what is missing, how to install it."""

    # -- running it ---------------------------------------------------------------------------------

    @abstractmethod
    def routing(self, reef_url: str, scenario: str, token: str | None = None) -> dict[str, str]:
        """The environment that routes a run to reef for ``scenario``, unrecorded."""

    def environment(
        self, *, home: Path, config: Path, env: Mapping[str, str], binary: HarnessBinary | None = None
    ) -> dict[str, str]:
        """A minimal PATH (``binary``'s folder first), :attr:`quiet`, ``env``, then ``home`` and
        ``config`` whatever ``env`` says; :attr:`dropped` taken out."""
        if binary is None:
            binary = self.find({**os.environ, **env})
        full = {"PATH": minimal_path(os.environ, binary.path if binary else None), **self.quiet, **env}
        # isolation is the point of the check: the caller cannot point the harness back at a real home
        full["HOME"] = str(home)
        full[self.config_env] = str(config)
        for name in self.dropped:
            full.pop(name, None)
        return full

    def validate(self, files: Mapping[str, bytes], task: str, timeout: float) -> None:
        """:func:`validate_files` with this harness's config dir name."""
        validate_files(files, task, timeout, folder=self.folder)

    @abstractmethod
    def prepare(self, box: Sandbox) -> None:
        """Put what the harness needs besides the files into the sandbox (before it runs)."""

    @abstractmethod
    def argv(self, task: str) -> list[str]:
        """The arguments that run the harness once on ``task`` in print mode."""

    def run(
        self,
        files: Mapping[str, bytes],
        *,
        env: Mapping[str, str],
        task: str = HEALTH_TASK,
        timeout: float = 60.0,
        binary: HarnessBinary | None = None,
        workdir: Path | None = None,
        confinement: Confinement | None = None,
    ) -> HealthResult:
        """The run of the module docstring; see :meth:`reef_core.harness.health.HealthCheck.run`."""
        self.validate(files, task, timeout)
        if binary is None:
            binary, notes = self.search({**os.environ, **env})
            if binary is None:
                return HealthResult(False, self.not_found(notes), 0.0, "", "")
        with tempfile.TemporaryDirectory(prefix=self.prefix, dir=workdir, ignore_cleanup_errors=True) as tmp:
            root = Path(tmp)
            box = Sandbox(
                binary, files, root, root / self.folder, root / "home", root / "cwd", confinement=confinement
            )
            for directory in (box.config, box.home, box.cwd):
                directory.mkdir()
            for name, content in files.items():
                target = box.config / PurePosixPath(name)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            self.prepare(box)
            box = replace(box, env=self.environment(home=box.home, config=box.config, env=env, binary=binary))
            try:
                run = self.start(box, self.argv(task), timeout)
            except OSError as exc:
                return HealthResult(False, f"{self.binary} could not be started: {exc}", 0.0, "", "")
            answer = run.stdout.strip()
            tail = run.stderr[-_STDERR_TAIL:]
            if run.returncode is None:
                last = box.quote(self.last_words(run))
                detail = f"{self.binary} did not finish within {timeout:g}s and was killed" + (
                    f": {last}" if last else ""
                )
            elif problem := self.problem(run, box):
                detail = problem
            elif not answer:
                detail = f"{self.binary} exited 0 but printed no answer"
            else:
                preview = " ".join(answer.split())[:_ANSWER_PREVIEW]
                detail = f"{self.label} {binary.version} answered in {run.seconds:.1f}s: {preview!r}"
                return HealthResult(True, detail, run.seconds, answer, tail)
            return HealthResult(False, detail, run.seconds, answer, tail)

    def start(self, box: Sandbox, args: list[str], timeout: float) -> ProcessRun:
        """Run the harness with ``args`` in ``box`` (its cwd; output through files in its root),
        inside its confinement when it has one."""
        argv = [str(box.binary.path), *args]
        if box.confinement is None:
            return run_captured(argv, cwd=box.cwd, env=box.env, timeout=timeout, scratch=box.root)
        node = shutil.which("node", path=box.env.get("PATH", ""))
        boxed = box.confinement.command(
            argv,
            env=box.env,
            writable=(box.config, box.home, box.cwd),
            programs=[box.binary.path, *([node] if node else [])],
            chdir=box.cwd,
        )
        return run_captured(boxed, cwd=box.cwd, env={}, timeout=timeout, scratch=box.root)

    def last_words(self, run: ProcessRun) -> str:
        """What a run killed at the timeout said last (quoted in the detail)."""
        return last_line(run.stderr)

    @abstractmethod
    def problem(self, run: ProcessRun, box: Sandbox) -> str | None:
        """Why a finished run failed, as the check's detail, or None when its exit and output say
        nothing is wrong (an empty answer is judged after this)."""


def validate_files(files: Mapping[str, bytes], task: str, timeout: float, *, folder: str = "agent") -> None:
    """What a health run is given, checked: ``files`` relative paths inside the ``folder`` dir
    (bytes, no file also a directory), a task, a positive timeout; else :class:`InvalidInput`."""
    for name, content in files.items():
        path = PurePosixPath(name)
        if not name or path.is_absolute() or ".." in path.parts or "\\" in name or name.endswith("/"):
            raise InvalidInput(
                f"{folder} file path {name!r} must be relative, inside the {folder} dir", field=name
            )
        if not isinstance(content, bytes):
            raise InvalidInput(
                f"{folder} file {name!r} must be bytes, not {type(content).__name__}", field=name
            )
    names = set(files)
    for name in names:
        for parent in PurePosixPath(name).parents:
            if str(parent) in names:
                raise InvalidInput(
                    f"{folder} file {parent} is also a directory (of {name})", field=str(parent)
                )
    if not task.strip():
        raise InvalidInput("the health task is empty", field="task")
    if not timeout > 0:
        raise InvalidInput(f"timeout must be positive, not {timeout!r}", field="timeout")


def indented_after(lines: list[str]) -> list[str]:
    """The indented lines at the start of ``lines`` (a report's continuation lines)."""
    taken = []
    for line in lines:
        if not line.strip() or not line[0].isspace():
            break
        taken.append(line)
    return taken
