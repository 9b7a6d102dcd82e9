"""The health-check seam: the real harness started on a candidate's rendered files, and judged.

A release check (reefine's ``health``) and the agent proposer's ``try_harness`` tool both need
the real harness to start with a candidate, answer a task through reef, and say what went wrong
when it does not.  How to find that harness, how to start it in a sandbox of its own and how to
read its output are the adapter's knowledge: ``adapters/<name>/health.py`` implements
:class:`HealthCheck`, and reef_core finds it by dotted reference in :data:`HEALTH_CHECKS`
(:func:`health_check_for`), as it finds renderers and installers, so no recipe imports an
adapter.

Pure: the protocol and its values only.  Starting programs is the adapter's
(``adapters/health.py``, on :mod:`reef_core.procs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from reef_core.harness.render import load_reference

if TYPE_CHECKING:
    from reef_core.sandbox import Confinement

__all__ = [
    "HEALTH_CHECKS",
    "HEALTH_TASK",
    "HarnessBinary",
    "HealthCheck",
    "HealthResult",
    "health_check_for",
    "health_headers",
]

#: adapter name -> ``package.module:Class`` of its health check
HEALTH_CHECKS: dict[str, str] = {
    "pi": "adapters.pi.health:PiHealth",
    "claude_code": "adapters.claude_code.health:ClaudeCodeHealth",
    "codex": "adapters.codex.health:CodexHealth",
    "opencode": "adapters.opencode.health:OpencodeHealth",
}
#: the task a health run gives the harness unless told otherwise
HEALTH_TASK = "Reply with the single word READY."


@dataclass(frozen=True)
class HarnessBinary:
    """A harness executable whose ``--version`` said ``version``."""

    path: Path
    version: str


@dataclass(frozen=True)
class HealthResult:
    """The outcome of one health run.

    ``detail`` is one line for people: the answer's start, or why it failed (quoting the
    harness).  ``seconds`` is how long the harness ran; ``output`` what it printed on stdout;
    ``stderr_tail`` the end of what it printed on stderr.
    """

    passed: bool
    detail: str
    seconds: float
    output: str
    stderr_tail: str


@runtime_checkable
class HealthCheck(Protocol):
    """What an adapter provides to start its real harness on rendered files."""

    #: the adapter's name, a key of :data:`HEALTH_CHECKS`
    adapter: str
    #: the harness, for people: "pi", "Claude Code"
    label: str
    #: the oldest harness version reef accepts
    min_version: str
    #: the name of the metric a health run's seconds are reported as (``health_seconds``)
    metric: str
    #: the environment variable the rendered files read ``x-reef-capture`` from (render the
    #: files for a health run with that header), or None when :meth:`routing` sets the header
    capture_env: str | None

    def find(self, env: Mapping[str, str] | None = None) -> HarnessBinary | None:
        """The harness binary to run (``env`` defaults to the process environment), or None."""
        ...

    def missing(self, env: Mapping[str, str] | None = None) -> str:
        """Why :meth:`find` found none, and how to install one: a check's detail."""
        ...

    def routing(self, reef_url: str, scenario: str, token: str | None = None) -> dict[str, str]:
        """The environment that sends a health run's requests to reef at ``reef_url`` for
        ``scenario``, unrecorded, with ``token`` (or a placeholder) as the credential."""
        ...

    def environment(
        self, *, home: Path, config: Path, env: Mapping[str, str], binary: HarnessBinary | None = None
    ) -> dict[str, str]:
        """The harness's environment with ``home`` as ``HOME`` and ``config`` as its config dir,
        ``env`` laid over its quiet defaults; ``binary`` (default: :meth:`find`'s) names the
        folder that comes first on PATH."""
        ...

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
        """Run the harness once on ``task`` with ``files`` as its config dir, in a sandbox of its
        own under ``workdir`` (default: the system temp dir), and judge the outcome.  ``env``
        carries the routing (:meth:`routing`); ``binary`` defaults to :meth:`find`'s.  With a
        ``confinement`` the harness runs inside that OS sandbox (files rendered for, and ``env``
        routed to, its :attr:`~reef_core.sandbox.Confinement.inside_url` with its credential):
        how a tree whose code no person approved yet is run.  Raises
        :class:`~reef_core.errors.InvalidInput` for a file path outside the config dir, an empty
        task or a timeout that is not positive."""
        ...


def health_check_for(adapter: str) -> HealthCheck:
    """The health check of ``adapter``; an adapter without one raises :class:`InvalidInput`
    listing those that have one."""
    check = load_reference(HEALTH_CHECKS, adapter, "no health check for adapter")
    if not isinstance(check, HealthCheck):
        raise TypeError(f"{HEALTH_CHECKS[adapter]} does not implement the HealthCheck protocol")
    return check


def health_headers(check: HealthCheck) -> dict[str, str]:
    """The render target's headers for a health run of ``check``'s harness: ``x-reef-capture``
    read from :attr:`HealthCheck.capture_env`, when the harness reads it from the environment."""
    return {"x-reef-capture": check.capture_env} if check.capture_env else {}
