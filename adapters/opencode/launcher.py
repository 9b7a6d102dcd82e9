"""``reef-opencode``: opencode routed through reef, and reef's commands for the person at the terminal.

The verbs (``evolve``, ``versions``, ``update``, ``report``, ``learn``, ``doctor``) are the shared
launcher's (:mod:`adapters.verbs`, :mod:`adapters.doctor`), and so is the environment every run
gets (:func:`adapters.launcher.prepare_run`: ``OPENCODE_CONFIG_DIR`` = the installed config dir,
the daemon, the scenario, the run tag and the release).  What is opencode's own:

- **The key.**  ``REEF_API_KEY``, which the rendered provider reads with ``{env:REEF_API_KEY}``:
  reef's token, else a placeholder.
- **Traffic off.**  The models catalogue (``models.opencode.ai``), autoupdate and sharing are
  switched off with opencode's own variables: the ``reef`` provider is the only one enabled, so
  the catalogue has nothing to add.
- **What stays the person's.**  opencode still reads the person's own global config
  (``~/.config/opencode``) and the project's, under reef's: opencode merges per key and reads
  ``OPENCODE_CONFIG_DIR`` last, so the provider, the model and the enabled providers are reef's
  whatever those say; a person's own plugins and MCP servers there run as they would in their own
  opencode.  The XDG folders are left alone: the model's shell commands inherit them.

In a session, ``/versions``, ``/evolve <text>``, ``/good``, ``/bad`` and ``/feedback <text>`` are
answered by reef's plugin (``plugins/reef.js``) through ``reef-opencode hook prompt``, without a
model call; the update notice is shown when a session is created.  ``REEF_OPENCODE`` names the
opencode to run.
"""

from __future__ import annotations

import time

from adapters import launcher as core
from adapters.launcher import Context

__all__ = ["OPENCODE", "OPENCODE_MIN_VERSION", "TRAFFIC_SWITCHES", "main"]

#: the oldest opencode reef accepts (the plugin hooks, x-session-id and {env:} as verified)
OPENCODE_MIN_VERSION = "1.18.33"
_PLACEHOLDER_KEY = "reef-local"
#: opencode's switches for the traffic that is not the model's (verified with strace, 1.18.33)
TRAFFIC_SWITCHES = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_SHARE": "1",
}


def _run_opencode(ctx: Context, args: list[str]) -> int:
    _, opencode, run_env = core.prepare_run(ctx, args, dict(ctx.env))
    run_env.update(TRAFFIC_SWITCHES)
    run_env["REEF_API_KEY"] = ctx.token or ctx.env.get("REEF_API_KEY") or _PLACEHOLDER_KEY
    run_env["REEF_RUN_STARTED_MS"] = str(int(time.time() * 1000))
    return core.exec_harness(ctx, opencode, args, run_env)


OPENCODE = core.Harness(
    adapter="opencode",
    binary="opencode",
    label="opencode",
    config_dir="config",
    config_env="OPENCODE_CONFIG_DIR",
    min_version=OPENCODE_MIN_VERSION,
    run=_run_opencode,
    extra={"hook": core.hook_verb},
)


main = core.entry(OPENCODE)
