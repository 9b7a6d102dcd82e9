"""A scenario's canary over HTTP (:mod:`reef_core.learning.canary`).

| route | what |
|---|---|
| ``GET /reef/scenarios/{s}/canary`` | the canary (running, or the last that ended), the test's state |
| ``POST /reef/scenarios/{s}/canary/stop`` | end it now, unpublished (``{"by": "who"}`` optional) |
| ``POST /reef/scenarios/{s}/canary/promote`` | publish it now as the next ``vN``, by compare-and-swap |
| ``GET /reef/harness/canary?adapter=&session=`` | which tree a new harness session gets (and its files) |

The last is what ``reef-pi`` and ``reef-claude`` ask before a session starts: the answer names
the arm and the release (``vN``, or the canary's ``cN``), and for the canary arm carries the
config folder the adapter's installer would write for the canary's tree (base64, path → bytes),
so the launcher lays it out beside the installed one and points the harness at it.
"""

from __future__ import annotations

import asyncio
import base64
import re
import sys
from typing import Any

from aiohttp import web

from reef_core.daemon.context import Daemon, daemon_of
from reef_core.daemon.install_routes import installer_of
from reef_core.daemon.parsing import json_body, scenario_of_read
from reef_core.errors import InvalidInput, NotFound, ReefError
from reef_core.harness.render import InstallPlan, Target
from reef_core.harness.tree import HarnessTree
from reef_core.ids import validate_scenario_name
from reef_core.learning.canary import CanaryWatch

__all__ = ["routes"]

routes = web.RouteTableDef()

_SESSION = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_WORKER_WAIT_S = 10.0  # a scenario just opened: its worker reads the canary as it starts


async def _watch(daemon: Daemon, name: str) -> CanaryWatch:
    """The canary watch of scenario ``name``'s worker, once the worker has started."""
    if not daemon.learners.learns:
        raise InvalidInput("this daemon's recipe does not learn, so it runs no canary", field="recipe")
    deadline = asyncio.get_running_loop().time() + _WORKER_WAIT_S
    while True:
        watch = daemon.learners.canary(name)
        if watch is not None:
            return watch
        if asyncio.get_running_loop().time() > deadline:
            raise ReefError(f"the learning worker of {name!r} has not started")
        await asyncio.sleep(0.02)


def _existing(daemon: Daemon, name: str) -> str:
    validate_scenario_name(name)
    if not daemon.scenarios.store.exists(name):
        raise NotFound(f"no scenario {name!r}", field="name")
    return name


@routes.get("/reef/scenarios/{name}/canary")
async def status(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    name = _existing(daemon, request.match_info["name"])
    async with daemon.scenarios.use(name, create=False):
        watch = await _watch(daemon, name)
        return web.json_response({"scenario": name, **await asyncio.to_thread(watch.status)})


async def _who(request: web.Request) -> str:
    if not request.can_read_body:
        return "an unnamed client"
    _, body = await json_body(request)
    who = body.get("by", "an unnamed client")
    if not isinstance(who, str) or not who.strip() or len(who) > 200:
        raise InvalidInput("by must name who acts, in at most 200 characters", field="by")
    return " ".join(who.split())


@routes.post("/reef/scenarios/{name}/canary/{action:stop|promote}")
async def act(request: web.Request) -> web.Response:
    """A person ends the running canary: ``stop`` (unpublished) or ``promote`` (published now)."""
    daemon = daemon_of(request)
    name = _existing(daemon, request.match_info["name"])
    who = await _who(request)
    async with daemon.scenarios.use(name, create=False):
        watch = await _watch(daemon, name)
        operation = watch.stop if request.match_info["action"] == "stop" else watch.promote
        state = await asyncio.to_thread(operation, who)
    return web.json_response({"scenario": name, "canary": state})


@routes.get("/reef/harness/canary")
async def session_tree(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    installer = installer_of(request)
    session = request.query.get("session", "")
    if not _SESSION.fullmatch(session):
        raise InvalidInput("session must be 1-128 letters, digits, '.', '_', ':' or '-'", field="session")
    name = scenario_of_read(request)
    if not daemon.scenarios.store.exists(name) or not daemon.learners.learns:
        return web.json_response({"scenario": name, "canary": None, "arm": None, "release": None})
    async with daemon.scenarios.use(name, create=False) as scenario:
        watch = await _watch(daemon, name)
        tip = scenario.releases.tip()
        state = watch.running
        answer: dict[str, Any] = {
            "scenario": name,
            "canary": None,
            "arm": None,
            "release": tip.name if tip else None,
        }
        if state is None or state.get("kind") != "harness":
            return web.json_response(answer)
        arm, release = watch.arm(session, opens=True) or ("control", state["base"])
        answer.update(
            canary=state["name"], arm=arm, release=release, base=state["base"], share=state["share"]
        )
        if arm == "canary":
            target = Target(
                reef_url=str(request.url.origin()),
                scenario=name,
                model=daemon.settings.inference.upstream_model or "default",
                release=state["name"],
            )

            def render() -> dict[str, bytes]:
                tree = HarnessTree.from_files(scenario.releases.tree_files(state["tree"]))
                plan = InstallPlan(
                    tree=tree,
                    target=target,
                    commit=scenario.releases.candidate(int(state["step"])).commit,
                    python=sys.executable,
                    token_required=bool(daemon.settings.reef.tokens),
                )
                return installer.files(plan)

            files = await asyncio.to_thread(render)
            answer["files"] = {path: base64.b64encode(data).decode() for path, data in sorted(files.items())}
        return web.json_response(answer)
