"""``reef-pi``: pi routed through reef, and reef's commands for the person at the terminal.

The verbs (``evolve``, ``versions``, ``update``, ``report``, ``learn``, ``doctor``) are the shared
launcher's (:mod:`adapters.verbs`, :mod:`adapters.doctor`), and so is the environment every run
gets (:func:`adapters.launcher.prepare_run`: the agent dir in ``PI_CODING_AGENT_DIR``, the daemon,
the scenario and the run tag; the installed ``models.json`` reads those variables, and a request
fails when one is unset, so they are always set).  This module keeps what is pi's own: the key it
presents (``REEF_API_KEY``) and pi's offline switches.

The installed ``reef-pi`` file (written by :mod:`adapters.pi.install`) bakes in the daemon's URL
and the scenario and calls :func:`main`.  ``REEF_PI`` names the pi to run; ``REEF_PI_ONLINE=1``
(or ``reef-pi --online …``) leaves pi's startup network calls on.
"""

from __future__ import annotations

from adapters import launcher as core
from adapters.launcher import Context

__all__ = ["PI", "PI_MIN_VERSION", "main"]

PI_MIN_VERSION = "0.73.1"
_OFFLINE = {"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}


def _run_pi(ctx: Context, args: list[str]) -> int:
    online = ctx.env.get("REEF_PI_ONLINE", "").lower() in ("1", "true", "yes")
    if args[:1] == ["--online"]:
        online, args = True, args[1:]
    base = dict(ctx.env) if online else {**_OFFLINE, **ctx.env}
    _, pi, run_env = core.prepare_run(ctx, args, base)
    run_env["REEF_API_KEY"] = ctx.token or ctx.env.get("REEF_API_KEY") or "reef-local"
    return core.exec_harness(ctx, pi, args, run_env)


PI = core.Harness(
    adapter="pi",
    binary="pi",
    label="pi",
    config_dir="agent",
    config_env="PI_CODING_AGENT_DIR",
    min_version=PI_MIN_VERSION,
    run=_run_pi,
    run_flags="[--online]",
)


main = core.entry(PI)
