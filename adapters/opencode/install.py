"""The opencode installer: one release, rendered for opencode, as a ``curl … | sh`` script.

The script is the shared installer core's (:mod:`adapters.installer`, where its rules are
written down); this module says what is opencode's: the config dir (``OPENCODE_CONFIG_DIR``,
``harnesses/opencode/<scenario>/config``), the ``reef-opencode`` launcher, which opencode is
accepted (:data:`~adapters.opencode.launcher.OPENCODE_MIN_VERSION` or newer) and installed (the
pinned ``opencode-ai``, with npm's install scripts on: they put the binary for this machine in
place).  The person's own ``~/.config/opencode`` is never written.  The provider reads the run
and release headers from ``REEF_RUN_TAG`` and ``REEF_RELEASE_TAG``, which ``reef-opencode``
always exports.
"""

from __future__ import annotations

from adapters import installer
from adapters.opencode.launcher import OPENCODE
from adapters.opencode.render import OPENCODE_VERSION, OpencodeRenderer
from reef_core.harness.render import Renderer

__all__ = ["OPENCODE_PACKAGE", "OPENCODE_VERSION", "SPEC", "OpencodeInstaller"]

OPENCODE_PACKAGE = "opencode-ai"

SPEC = installer.Spec(
    harness=OPENCODE,
    launcher_module="adapters.opencode.launcher",
    package=OPENCODE_PACKAGE,
    version=OPENCODE_VERSION,
    npm_scripts=True,
    try_line=(
        '  try: reef-opencode run "hello"   in a session: /versions, /evolve ..., /good, /bad, /feedback'
    ),
)


class OpencodeInstaller(installer.AdapterInstaller):
    """Writes the ``curl … | sh`` script that installs one release for opencode."""

    adapter = "opencode"
    spec = SPEC
    api = "openai"

    def renderer(self) -> Renderer:
        return OpencodeRenderer()
