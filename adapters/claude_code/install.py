"""The Claude Code installer: one release, rendered for Claude Code, as a ``curl … | sh`` script.

The script is the shared installer core's (:mod:`adapters.installer`, where its rules are
written down); this module says what is Claude Code's: the config dir (``CLAUDE_CONFIG_DIR``,
``harnesses/claude_code/<scenario>/config``), the ``reef-claude`` launcher, and which claude is
accepted (:data:`~adapters.claude_code.launcher.CLAUDE_MIN_VERSION` or newer) and installed (the
pinned one, with npm's install scripts on: Claude Code's copies its native binary into place).
A tree's pi extensions have no Claude Code form: the script says which it left out.
"""

from __future__ import annotations

from adapters import installer
from adapters.claude_code.launcher import CLAUDE
from adapters.claude_code.render import ClaudeCodeRenderer
from reef_core.harness.render import Renderer

__all__ = ["CLAUDE_PACKAGE", "CLAUDE_VERSION", "SPEC", "ClaudeCodeInstaller"]

CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
CLAUDE_VERSION = "2.1.332"

SPEC = installer.Spec(
    harness=CLAUDE,
    launcher_module="adapters.claude_code.launcher",
    early="adapters.hook_gate:early",
    package=CLAUDE_PACKAGE,
    version=CLAUDE_VERSION,
    npm_scripts=True,
    try_line='  try: reef-claude -p "hello"   in a session: /versions, /evolve ..., /good, /bad, /feedback',
)


class ClaudeCodeInstaller(installer.AdapterInstaller):
    """Writes the ``curl … | sh`` script that installs one release for Claude Code."""

    adapter = "claude_code"
    spec = SPEC
    api = "anthropic"
    env_tags = False

    def renderer(self) -> Renderer:
        return ClaudeCodeRenderer()
