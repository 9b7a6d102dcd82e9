"""The pi installer: one release, rendered for pi, as a self-contained ``curl … | sh`` script.

The script is the shared installer core's (:mod:`adapters.installer`, where its rules are
written down); this module says what is pi's: the agent dir (``PI_CODING_AGENT_DIR``), the
``reef-pi`` launcher, and which pi is accepted (0.73.1 or newer, under either npm name:
``@mariozechner/pi-coding-agent`` up to 0.73.x, ``@earendil-works/pi-coding-agent`` after) and
installed (the pinned 1.x, with a node 22 from npm next to it when the machine's node is older
than pi 1.x needs).

The provider's headers are read from environment variables on every request (``!printenv
NAME``, which every supported pi runs; a request fails when one is unset, which is why ``reef-pi``
always exports them): ``x-reef-scenario`` from ``REEF_SCENARIO`` and ``x-reef-tag-run`` from
``REEF_RUN_TAG``, a fresh id per run, so the records of one run can be found again for
``reef-pi report``, and ``x-reef-tag-release`` from ``REEF_RELEASE_TAG``, the tree the run has
(the installed release, or the canary the launcher gave this session).
"""

from __future__ import annotations

from adapters import installer
from adapters.installer import (
    RELEASE_TAG_ENV,
    RELEASE_TAG_HEADER,
    RUN_TAG_ENV,
    RUN_TAG_HEADER,
    plain_http_beyond_loopback,
)
from adapters.pi.launcher import PI, PI_MIN_VERSION
from adapters.pi.render import PiRenderer
from reef_core.harness.render import Renderer

__all__ = [
    "PI_MIN_VERSION",
    "PI_PACKAGE",
    "PI_VERSION",
    "RELEASE_TAG_ENV",
    "RELEASE_TAG_HEADER",
    "RUN_TAG_ENV",
    "RUN_TAG_HEADER",
    "SPEC",
    "PiInstaller",
    "plain_http_beyond_loopback",
]

#: the pi the installer puts on a machine that has none new enough
PI_PACKAGE = "@earendil-works/pi-coding-agent"
PI_VERSION = "1.6.0"
PI_NODE = "22.19"  # pi 1.x's engines.node
PI_NODE_PACKAGE = "node@22.23.5"  # the npm build of node installed next to it when needed

SPEC = installer.Spec(
    harness=PI,
    launcher_module="adapters.pi.launcher",
    package=PI_PACKAGE,
    version=PI_VERSION,
    node_min=PI_NODE,
    node_package=PI_NODE_PACKAGE,
    try_line='  try: reef-pi -p "hello"   ask for changes: reef-pi evolve "..."   releases: reef-pi versions',
)


class PiInstaller(installer.AdapterInstaller):
    """Writes the ``curl … | sh`` script that installs one release for pi."""

    adapter = "pi"
    spec = SPEC

    def renderer(self) -> Renderer:
        return PiRenderer()
