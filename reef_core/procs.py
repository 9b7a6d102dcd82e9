"""Child processes reef starts and waits for: a short probe, or a bounded run with captured output.

Owns: :func:`run_brief` (a program that answers at once: a ``--version``, a capability probe),
:func:`run_captured` (a program that may hang or leave children behind: a harness in print
mode), its :class:`ProcessRun`, and the helpers that turn a program's output into one line for
people (:func:`first_line`, :func:`last_line`, :func:`quote`, :func:`strip_ansi`).

:func:`run_captured` starts the program with stdin on /dev/null in a process group of its own,
and kills the whole group at the timeout and again after the program exits: a child the program
left behind (a harness extension's, a hook's) dies with it.  Its stdout and stderr go to files,
not pipes: such a child may hold them open, and reading pipes to EOF would then wait for it
rather than for the program.  Limit: a child that moves into a new session of its own escapes
the kill.

No harness knowledge here: which program, with which arguments and environment, and what its
output means belong to the adapters (``adapters/<name>/health.py``) and their callers.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessRun", "first_line", "last_line", "quote", "run_brief", "run_captured", "strip_ansi"]

_QUOTE_LIMIT = 300
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (colours, cursor movement)."""
    return _ANSI.sub("", text)


def run_brief(
    argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a program that answers at once, stdin on /dev/null, its output captured as text (bytes
    that are not UTF-8 replaced); ``env`` defaults to this process's.  Raises :class:`OSError`
    when it cannot start and :class:`subprocess.TimeoutExpired` past ``timeout``."""
    return subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        env=None if env is None else dict(env),
        timeout=timeout,
    )


@dataclass(frozen=True)
class ProcessRun:
    """One finished run of :func:`run_captured`: its output with ANSI escapes removed."""

    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float


def run_captured(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float, scratch: Path
) -> ProcessRun:
    """Run ``argv`` with stdin on /dev/null in a process group of its own, killed at ``timeout``
    and after the program exits; its stdout and stderr pass through files in ``scratch``.
    Raises :class:`OSError` when it cannot start."""
    out_path, err_path = scratch / "run.stdout", scratch / "run.stderr"
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
    """SIGKILL what is left of the process group (it outlives its leader while it has members)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # nothing left


def _read(path: Path) -> str:
    return strip_ansi(path.read_bytes().decode("utf-8", errors="replace"))


def first_line(text: str) -> str:
    """The first line of ``text`` that is not blank, stripped."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def last_line(text: str) -> str:
    """The last line of ``text`` that is not blank, stripped."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def quote(text: str, *folders: Path) -> str:
    """One line of a program's output: paths inside ``folders`` (a sandbox's) made relative, the
    first folder's first, whitespace folded, at most 300 characters."""
    for folder in folders:
        for prefix in {str(folder), str(folder.resolve())}:
            text = text.replace(prefix + os.sep, "")
    text = " ".join(text.split())
    return text if len(text) <= _QUOTE_LIMIT else text[: _QUOTE_LIMIT - 1] + "…"
