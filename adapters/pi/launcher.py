"""``reef-pi``: pi routed through reef, and reef's commands for the person at the terminal.

The verbs (``evolve``, ``versions``, ``update``, ``report``, ``learn``, ``doctor``) are the shared
launcher core's (:mod:`adapters.launcher`); this module keeps what is pi's own: starting pi with
its agent dir (``PI_CODING_AGENT_DIR``), the scenario and the run tag in the environment (the
installed ``models.json`` reads those variables, and a request fails when one is unset, so they
are always set), and pi's offline switches.

The installed ``reef-pi`` file (written by :mod:`adapters.pi.install`) bakes in the daemon's URL
and the scenario and calls :func:`main`.  ``REEF_PI`` names the pi to run; ``REEF_PI_ONLINE=1``
(or ``reef-pi --online …``) leaves pi's startup network calls on.
"""

from __future__ import annotations

from adapters import launcher as core
from adapters.launcher import COMMANDS, Context, Layout, versions_table

__all__ = ["COMMANDS", "PI", "PI_MIN_VERSION", "Layout", "main", "versions_table"]

PI_MIN_VERSION = "0.73.1"
_OFFLINE = {"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}


def _run_pi(ctx: Context, args: list[str]) -> int:
    online = ctx.env.get("REEF_PI_ONLINE", "").lower() in ("1", "true", "yes")
    if args[:1] == ["--online"]:
        online, args = True, args[1:]
    tag, installed = core.run_tag(ctx, args)
    pi = core.find_binary(ctx, installed)
    run_env = dict(ctx.env)
    if not online:
        for key, value in _OFFLINE.items():
            run_env.setdefault(key, value)
    run_env.update(
        {
            "PATH": core.path_with(pi, ctx.env.get("PATH")),  # an npm-installed node sits next to pi
            "PI_CODING_AGENT_DIR": str(ctx.layout.config),
            "REEF_URL": ctx.url,
            "REEF_SCENARIO": ctx.scenario,
            "REEF_API_KEY": ctx.token or ctx.env.get("REEF_API_KEY") or "reef-local",
            "REEF_RUN_TAG": tag,
        }
    )
    if ctx.launcher:
        run_env["REEF_PI_LAUNCHER"] = ctx.launcher
    return core.exec_harness(ctx, pi, args, run_env)


PI = core.Harness(
    adapter="pi",
    command="reef-pi",
    binary="pi",
    label="pi",
    config_dir="agent",
    binary_env="REEF_PI",
    min_version=PI_MIN_VERSION,
    run=_run_pi,
    run_flags="[--online]",
)


main = core.entry(PI)
