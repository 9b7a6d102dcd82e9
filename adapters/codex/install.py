"""The Codex installer: one release, rendered for Codex, as a ``curl … | sh`` script.

The script is the shared installer core's (:mod:`adapters.installer`, where its rules are
written down); this module says what is Codex's: the home (``CODEX_HOME``,
``harnesses/codex/<scenario>/home``), the ``reef-codex`` launcher, which codex is accepted
(:data:`~adapters.codex.launcher.CODEX_MIN_VERSION` or newer) and installed (the pinned one, with
npm's install scripts on: the package puts the native binary for this machine in place).  The
person's own ``~/.codex`` is never read or written: every reef-codex run points ``CODEX_HOME``
at the install.  The provider reads the run and release headers from ``REEF_RUN_TAG`` and
``REEF_RELEASE_TAG``, which ``reef-codex`` always exports.
"""

from __future__ import annotations

from adapters import installer
from adapters.codex.launcher import CODEX
from adapters.codex.render import CodexRenderer
from reef_core.harness.render import Renderer

__all__ = ["CODEX_PACKAGE", "CODEX_VERSION", "SPEC", "CodexInstaller"]

CODEX_PACKAGE = "@openai/codex"
CODEX_VERSION = "0.171.0"

SPEC = installer.Spec(
    harness=CODEX,
    launcher_module="adapters.codex.launcher",
    early="adapters.hook_gate:early",
    package=CODEX_PACKAGE,
    version=CODEX_VERSION,
    npm_scripts=True,
    try_line='  try: reef-codex exec "hello"   in a session: :versions, :evolve ..., :good, :bad, :feedback',
)


class CodexInstaller(installer.AdapterInstaller):
    """Writes the ``curl … | sh`` script that installs one release for Codex."""

    adapter = "codex"
    spec = SPEC
    api = "openai"

    def renderer(self) -> Renderer:
        return CodexRenderer()
