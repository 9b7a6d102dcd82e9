"""The "health" release check: the real pi starts with a candidate's agent files and answers.

Owns: finding a pi binary, 0.73.1 or newer (:func:`find_pi`), and one sandboxed print-mode run
of it (:func:`run_health`).  pi runs with its own folder first on PATH: an npm install puts the
node a newer pi needs (pi 1.x wants node >= 22.19) next to it.  The candidate's files
(``models.json``, ``settings.json``, ``AGENTS.md``, ``skills/``, ``prompts/``, ``extensions/``)
are written byte for byte into a fresh agent dir (``PI_CODING_AGENT_DIR``) next to a fresh
``HOME`` and a fresh cwd, so the user's ``~/.pi`` and project files stay out.  pi runs as
``pi --offline -p --no-session <task>`` with stdin on /dev/null, in its own process group, which
is killed on timeout and after pi exits (leftover children of extensions).  A check passes
when pi exits 0, prints an answer on stdout, and reports no extension or settings failure on
stderr.

Agent-level retries are switched off through a project ``.pi/settings.json`` in the fresh cwd
(``{"retry": {"enabled": false}}``): pi deep-merges project settings over the agent dir's, so the
candidate's own ``settings.json`` is neither parsed nor rewritten and means what it says.  The
SDK's own retries stay on: a refused connection fails in about 2 s instead of about 20 s.

What pi 0.73.1 does with a broken tree in print mode (found by experiment; exit code, stderr):

- (a) an extension ``.ts`` with a syntax error: exit 1 before any request, ``Error: Failed to
  load extension "<path>": Failed to load extension: ParseError: Unexpected token`` followed by
  an indented `` <path>:<line>:<col>`` line.
- (b) an extension that throws while loading (top level or in its factory, sync or async):
  exit 1, ``Error: Failed to load extension "<path>": Failed to load extension: <message>``;
  a file without a default-exported factory: ``… Extension does not export a valid factory
  function: <path>``.  One that throws later, in an event handler such as ``session_start``,
  does not stop pi: exit 0, the answer on stdout and ``Extension error (<path>): <message>`` on
  stderr.  This check fails that too.
- (c) a skill without a ``description``: exit 0, nothing on stderr; pi silently leaves the skill
  out of the system prompt (print mode never prints skill diagnostics).  Not detectable from
  pi's output, so this check passes it.
- (d) ``models.json`` that is not valid JSON (or breaks the schema): pi ignores the whole file,
  falls back to its built-in default model and exits 1 with ``No API key found for the selected
  model.``; the real cause appears only in ``pi --list-models`` (``Warning: errors loading
  models.json:`` then ``Failed to parse models.json: <message>``).  After a failed run, this
  check asks ``pi --offline --list-models`` in the same sandbox and quotes that line.
- ``settings.json`` that is not valid JSON: pi ignores it, warns ``Warning: (runtime creation,
  global settings) <message>`` and still exits 0 with whatever model it picked; this check
  fails it.

Quotes of pi's lines lose the sandbox's agent-dir prefix (``extensions/bad.ts``, not a temporary
path that no longer exists) and are cut to 300 characters.  Limits: pi also reads ``AGENTS.md``
from every ancestor of its cwd, so one in the system temp dir (or above ``workdir``) would reach
the prompt; a child that an extension moves into a new session escapes the process-group kill.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from adapters.launcher import probe_version, version_at_least
from reef_core.errors import InvalidInput

__all__ = [
    "HEALTH_TASK",
    "PI_MIN_VERSION",
    "PI_PACKAGE",
    "PI_VERSION",
    "HealthResult",
    "PiBinary",
    "ProcessRun",
    "find_pi",
    "first_line",
    "indented_after",
    "last_line",
    "minimal_path",
    "pi_environment",
    "probe_pi",
    "probed_version",
    "quote",
    "run_captured",
    "run_health",
    "validate_files",
]

PI_PACKAGE = "@mariozechner/pi-coding-agent"  # the tested default's npm package
PI_VERSION = "0.73.1"  # the tested default (scripts/setup.sh installs it in .cache/tools)
PI_MIN_VERSION = "0.73.1"  # the oldest pi reef works with; any newer one is accepted
HEALTH_TASK = "Reply with the single word READY."

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_PROJECT_PI = _PROJECT_ROOT / ".cache" / "tools" / "node_modules" / ".bin" / "pi"
_SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
_VERSION_PROBE_TIMEOUT = 20.0
_MODELS_PROBE_TIMEOUT = 10.0
_QUOTE_LIMIT = 300
_ANSWER_PREVIEW = 80
_STDERR_TAIL = 4000

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Lines by which pi reports a candidate it could not (fully) load; see the module docstring.
_LOAD_FAILURE = re.compile(
    r"^(Error: Failed to load extension |Extension error \(|Warning: \([^)]*settings\) )"
)
_MODELS_ERROR = "errors loading models.json:"


@dataclass(frozen=True)
class PiBinary:
    """A pi executable whose ``--version`` said ``version``."""

    path: Path
    version: str


@dataclass(frozen=True)
class HealthResult:
    """The outcome of one health run.

    ``detail`` is one line for people: the answer's start, or why it failed (quoting pi).
    ``seconds`` is how long pi ran; ``output`` what it printed on stdout; ``stderr_tail`` the end
    of what it printed on stderr.
    """

    passed: bool
    detail: str
    seconds: float
    output: str
    stderr_tail: str


# ------------------------------------------------------------------------------------ finding pi


def find_pi(*, env: Mapping[str, str] | None = None) -> PiBinary | None:
    """A pi 0.73.1 or newer: ``$REEF_PI``, else the project's ``.cache/tools`` install, else
    ``pi`` on PATH.

    ``env`` defaults to the process environment.  An explicit ``REEF_PI`` is the only candidate
    when set: a wrong version there is a misconfiguration, not a reason to pick another pi.
    """
    found, _ = _search(os.environ if env is None else env)
    return found


def probe_pi(path: Path, *, env: Mapping[str, str] | None = None) -> PiBinary | None:
    """The pi at ``path`` with the version its ``--version`` reports, whatever that is; None when
    it is not an executable file or reports no version."""
    env = os.environ if env is None else env
    if not path.is_file() or not os.access(path, os.X_OK):
        return None
    version = probed_version(str(path.resolve()), path.stat().st_mtime_ns, minimal_path(env, path))
    return PiBinary(path.absolute(), version) if version else None


def _search(env: Mapping[str, str]) -> tuple[PiBinary | None, list[str]]:
    """The pi to use, and for each candidate that was rejected a note saying why."""
    explicit = env.get("REEF_PI")
    candidates: list[tuple[str, Path]]
    if explicit:
        candidates = [("REEF_PI", Path(explicit).expanduser())]
    else:
        candidates = [("project", _PROJECT_PI)]
        on_path = shutil.which("pi", path=env.get("PATH", os.defpath))
        candidates.append(("PATH", Path(on_path) if on_path else Path("pi")))
    notes = []
    for origin, path in candidates:
        if not path.is_file():
            notes.append(f"{origin}: no {path}" if origin != "PATH" else "no pi on PATH")
            continue
        if not os.access(path, os.X_OK):
            notes.append(f"{origin}: {path} is not executable")
            continue
        version = probed_version(str(path.resolve()), path.stat().st_mtime_ns, minimal_path(env, path))
        if version is not None and version_at_least(version, PI_MIN_VERSION):
            return PiBinary(path.absolute(), version), notes
        said = f"is pi {version}" if version else "did not report a version (does its node start?)"
        notes.append(f"{origin}: {path} {said}, reef needs {PI_MIN_VERSION} or newer")
    return None, notes


@functools.lru_cache(maxsize=32)
def probed_version(
    resolved: str,
    mtime_ns: int,
    search_path: str,
    homes: tuple[str, ...] = ("HOME", "PI_CODING_AGENT_DIR"),
    extra: tuple[tuple[str, str], ...] = (("PI_OFFLINE", "1"),),
) -> str | None:
    """What ``<resolved> --version`` says (pi's and Claude Code's), probed once per binary (a new
    install changes the mtime) with ``search_path`` as PATH, each of ``homes`` pointing at a
    fresh empty folder, and ``extra`` in the environment."""
    del mtime_ns  # part of the cache key only
    with tempfile.TemporaryDirectory(prefix="reef-version-") as home:
        env = {"PATH": search_path, **dict.fromkeys(homes, home), **dict(extra)}
        return probe_version([resolved, "--version"], env, timeout=_VERSION_PROBE_TIMEOUT)


def minimal_path(env: Mapping[str, str], pi: Path | None = None) -> str:
    """The system directories plus the one holding ``node`` (pi's ``#!/usr/bin/env node``), after
    ``pi``'s own folder (not the resolved one) when given: the node an npm install put next to a pi
    that needs a newer one than the system's comes first."""
    dirs = [str(pi.absolute().parent)] if pi is not None else []
    node = shutil.which("node", path=env.get("PATH", os.defpath))
    if node and str(Path(node).parent) not in dirs:
        dirs.append(str(Path(node).parent))
    dirs += [d for d in _SYSTEM_PATH if d not in dirs]
    return os.pathsep.join(dirs)


# ------------------------------------------------------------------------------------ running pi


@dataclass(frozen=True)
class _Sandbox:
    agent: Path
    home: Path
    cwd: Path


@dataclass(frozen=True)
class ProcessRun:
    """One finished run of :func:`run_captured`: its output with ANSI escapes removed."""

    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float


def run_health(
    agent_files: Mapping[str, bytes],
    *,
    env: Mapping[str, str],
    task: str = HEALTH_TASK,
    timeout: float = 60.0,
    pi: PiBinary | None = None,
    workdir: Path | None = None,
) -> HealthResult:
    """Run pi once on ``task`` with ``agent_files`` as its agent dir and judge the outcome.

    ``agent_files`` maps relative paths (``models.json``, ``skills/x/SKILL.md``) to contents.
    ``env`` is laid over a minimal environment (PATH, the offline switches) and carries what the
    files refer to (``REEF_API_KEY``, ``REEF_SCENARIO``); ``HOME`` and ``PI_CODING_AGENT_DIR`` are
    always the sandbox's.  ``pi`` defaults to :func:`find_pi` (with ``env`` over the process
    environment).  The sandbox lives in a temporary directory under ``workdir`` (default: the
    system temp dir) and is removed afterwards.
    """
    validate_files(agent_files, task, timeout)
    if pi is None:
        pi, notes = _search({**os.environ, **env})
        if pi is None:
            why = "; ".join(notes)
            detail = f"pi {PI_MIN_VERSION} or newer not found ({why}): run scripts/setup.sh"
            return HealthResult(False, detail, 0.0, "", "")
    with tempfile.TemporaryDirectory(prefix="reef-health-", dir=workdir, ignore_cleanup_errors=True) as tmp:
        box = _make_sandbox(Path(tmp), agent_files)
        full_env = pi_environment(home=box.home, agent=box.agent, env=env, pi=pi.path)
        try:
            run = _run_pi(pi, ["--offline", "-p", "--no-session", task], box, full_env, timeout, Path(tmp))
        except OSError as exc:
            return HealthResult(False, f"pi could not be started: {exc}", 0.0, "", "")
        answer = run.stdout.strip()
        tail = run.stderr[-_STDERR_TAIL:]
        problem = _load_failure(run.stderr, box.agent)
        if run.returncode is None:
            last = quote(last_line(run.stderr), box.agent)
            detail = f"pi did not finish within {timeout:g}s and was killed" + (f": {last}" if last else "")
        elif problem:
            detail = f"pi could not load the candidate: {problem}"
        elif run.returncode != 0:
            said = quote(first_line(run.stderr), box.agent) or "no message"
            cause = None
            if "models.json" in agent_files:
                cause = _models_error(pi, box, full_env, Path(tmp))
            said = f"{cause} (print mode said: {said})" if cause else said
            detail = f"pi exited {run.returncode}: {said}"
        elif not answer:
            detail = "pi exited 0 but printed no answer"
        else:
            preview = " ".join(answer.split())[:_ANSWER_PREVIEW]
            detail = f"pi {pi.version} answered in {run.seconds:.1f}s: {preview!r}"
            return HealthResult(True, detail, run.seconds, answer, tail)
        return HealthResult(False, detail, run.seconds, answer, tail)


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


def _make_sandbox(root: Path, agent_files: Mapping[str, bytes]) -> _Sandbox:
    box = _Sandbox(agent=root / "agent", home=root / "home", cwd=root / "cwd")
    for directory in (box.agent, box.home, box.cwd / ".pi"):
        directory.mkdir(parents=True)
    for name, content in agent_files.items():
        target = box.agent / PurePosixPath(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    # deep-merged over the candidate's settings.json; see the module docstring
    (box.cwd / ".pi" / "settings.json").write_text('{"retry": {"enabled": false}}\n')
    return box


def pi_environment(
    *, home: Path, agent: Path, env: Mapping[str, str], pi: Path | None = None
) -> dict[str, str]:
    """pi's environment: a minimal PATH, the offline switches, ``env`` over them, then ``home`` as
    ``HOME`` and ``agent`` as ``PI_CODING_AGENT_DIR`` whatever ``env`` says.

    The PATH starts with the folder of ``pi`` (default: :func:`find_pi`'s, with ``env`` over the
    process environment), where an npm install puts the node that pi needs."""
    if pi is None:
        found = find_pi(env={**os.environ, **env})
        pi = found.path if found else None
    full = {
        "PATH": minimal_path(os.environ, pi),
        "PI_OFFLINE": "1",
        "PI_SKIP_VERSION_CHECK": "1",
        "PI_TELEMETRY": "0",
        **env,
    }
    # isolation is the point of the check: the caller cannot point pi back at a real home
    full["HOME"] = str(home)
    full["PI_CODING_AGENT_DIR"] = str(agent)
    return full


def _run_pi(
    pi: PiBinary, args: list[str], box: _Sandbox, env: dict[str, str], timeout: float, scratch: Path
) -> ProcessRun:
    return run_captured([str(pi.path), *args], cwd=box.cwd, env=env, timeout=timeout, scratch=scratch)


def run_captured(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float, scratch: Path
) -> ProcessRun:
    """Run ``argv`` with stdin on /dev/null in a process group of its own, killed at ``timeout``
    and after the program exits; its stdout and stderr pass through files in ``scratch``."""
    # Output goes to files, not pipes: a child an extension left behind may hold them open, and
    # reading pipes to EOF would then wait for it rather than for pi.
    out_path, err_path = scratch / "pi.stdout", scratch / "pi.stderr"
    started = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            returncode: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill_group(proc.pid)
            proc.wait()
    seconds = time.monotonic() - started
    return ProcessRun(returncode, _read(out_path), _read(err_path), seconds)


def _kill_group(pgid: int) -> None:
    """SIGKILL what is left of pi's process group (the group outlives its leader while it has members)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # nothing left


def _read(path: Path) -> str:
    return _ANSI.sub("", path.read_bytes().decode("utf-8", errors="replace"))


def _load_failure(stderr: str, agent: Path) -> str | None:
    """pi's first report of a part it could not load, with its continuation lines, quoted."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if _LOAD_FAILURE.match(line):
            block = [line]
            # a ParseError names the file and position on the next, indented line
            block += indented_after(lines[i + 1 :])
            return quote(" ".join(block), agent)
    return None


def indented_after(lines: list[str]) -> list[str]:
    """The indented lines at the start of ``lines`` (a report's continuation lines)."""
    taken = []
    for line in lines:
        if not line.strip() or not line[0].isspace():
            break
        taken.append(line)
    return taken


def _models_error(pi: PiBinary, box: _Sandbox, env: dict[str, str], scratch: Path) -> str | None:
    """Why pi rejected models.json, which print mode never says but ``--list-models`` does."""
    run = _run_pi(pi, ["--offline", "--list-models"], box, env, _MODELS_PROBE_TIMEOUT, scratch)
    lines = run.stderr.splitlines()
    for i, line in enumerate(lines):
        if _MODELS_ERROR in line:
            reason = []
            for follow in lines[i + 1 :]:
                if not follow.strip() or follow.startswith("File: "):
                    break
                reason.append(follow.strip())
            return quote(" ".join(reason), box.agent) or None
    return None


def first_line(text: str) -> str:
    """The first line of ``text`` that is not blank, stripped."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def last_line(text: str) -> str:
    """The last line of ``text`` that is not blank, stripped."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def quote(text: str, *folders: Path) -> str:
    """One line of a harness's output: paths inside ``folders`` (the sandbox's) made relative,
    the first folder's first, whitespace folded, at most 300 characters."""
    for folder in folders:
        for prefix in {str(folder), str(folder.resolve())}:
            text = text.replace(prefix + os.sep, "")
    text = " ".join(text.split())
    return text if len(text) <= _QUOTE_LIMIT else text[: _QUOTE_LIMIT - 1] + "…"
