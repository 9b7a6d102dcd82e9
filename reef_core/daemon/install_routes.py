"""The installer route: ``GET /reef/harness/install?adapter=pi[&release=vN]`` → a POSIX sh script.

``curl -fsSL '<reef>/reef/harness/install?adapter=pi&scenario=dev' | sh`` installs the scenario's
current release (or ``release``) for the adapter's harness on the caller's machine.  The scenario
comes from the ``x-reef-scenario`` header or ``?scenario=``.  Before a scenario's first release
the script installs the empty tree, so the harness is routed through reef from the start.

The script is the adapter's (found by dotted reference, :func:`installer_for`; reef_core imports
no adapter).  This route decides what it installs: the release's tree, the daemon's URL as the
caller reached it, the model reef serves, and the interpreter this daemon runs on (reef is local:
the launcher runs on the same machine).  The daemon's token is never put in the script.

Serving the script changes nothing (no GET does: an ``<img src>`` on any web page can send one).
That the scenario is installed for the adapter (``Store.note_install``: a key in the scenario
repository's git config, no commit; reefine checks each candidate with every harness the
scenario is installed for) is noted by

* ``POST /reef/harness/installed`` ``{"adapter"}`` (scenario as for the script), which
  ``reef install`` and the launchers' ``install``/``update`` send once the script ran; it creates
  a scenario that does not exist yet when implicit creation is on, as its first request would;
* the first recorded request a known harness sends for the scenario (:func:`note_use`: its
  ``x-reef-harness`` header or its own marks, ``headers.harness_of``), which covers
  ``curl … | sh`` installs: their launcher's first session notes them.
"""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web

from reef_core.daemon.context import Daemon, daemon_of
from reef_core.daemon.headers import HARNESSES
from reef_core.daemon.parsing import json_body, known_fields, scenario_of_read
from reef_core.errors import InvalidInput, NotFound
from reef_core.harness.render import Installer, InstallPlan, Target, installer_for
from reef_core.harness.tree import HarnessTree

__all__ = ["NOTED", "installer_of", "note_use", "routes"]

routes = web.RouteTableDef()

#: the (scenario, adapter) pairs this process has seen noted, so a harness's every request is not
#: a read of the repository's config
NOTED = web.AppKey("reef.installs_noted", set)


def _release_tree(
    daemon: Daemon, name: str, wanted: str | None
) -> tuple[HarnessTree, str | None, str | None]:
    """The tree to install, its release name and commit; the empty tree before the first release."""
    store = daemon.scenarios.store
    if not store.exists(name):
        if wanted:
            raise NotFound(f"no scenario {name!r}, so no release {wanted}", field="release")
        return HarnessTree.empty(), None, None
    reader = daemon.scenarios.peek(name) or store.reader(name)
    release = reader.releases.get(wanted) if wanted else reader.releases.tip()
    if release is None:
        return HarnessTree.empty(), None, None
    return HarnessTree.from_files(reader.releases.files(release)), release.name, release.commit


def _note_install(daemon: Daemon, name: str, adapter: str) -> bool:
    """Note ``adapter`` for scenario ``name``, creating it when implicit creation is on; False when
    the scenario does not exist and may not be created (nothing noted)."""
    store = daemon.scenarios.store
    if not store.exists(name):
        if not daemon.scenarios.implicit:
            return False
        store.create(name)
    if adapter not in store.reader(name).installed_adapters():
        store.note_install(name, adapter)
    return True


async def note_use(request: web.Request, name: str, harness: str) -> None:
    """A recorded request from ``harness`` for scenario ``name`` (which exists): note the install
    the first time this process sees the pair (nothing for an ``unknown`` harness)."""
    if harness not in HARNESSES:
        return
    noted = request.app[NOTED]
    if (name, harness) not in noted:
        await asyncio.to_thread(_note_install, daemon_of(request), name, harness)
        noted.add((name, harness))


def installer_of(request: web.Request) -> Installer:
    """The installer of the harness ``?adapter=`` names (a 400 naming the problem otherwise)."""
    adapter = request.query.get("adapter")
    if not adapter:
        raise InvalidInput("name the harness: ?adapter=pi", field="adapter")
    return installer_for(adapter)


@routes.get("/reef/harness/install")
async def install(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    installer = installer_of(request)
    name = scenario_of_read(request)
    wanted = request.query.get("release") or None
    if wanted is not None and not (wanted[:1] == "v" and wanted[1:].isdigit()):
        raise InvalidInput(
            f"release {wanted!r} must name a published release such as v2 (a pending cN is installed "
            "after it is promoted)",
            field="release",
        )
    tree, release, commit = await asyncio.to_thread(_release_tree, daemon, name, wanted)
    settings = daemon.settings
    target = Target(
        reef_url=str(request.url.origin()),
        scenario=name,
        model=settings.inference.upstream_model or "default",
        release=release,
    )
    plan = InstallPlan(
        tree=tree,
        target=target,
        commit=commit,
        python=sys.executable,
        token_required=bool(settings.reef.tokens),
    )
    script = await asyncio.to_thread(installer.script, plan)
    headers = {"x-reef-release-id": release} if release else {}
    return web.Response(text=script, content_type="text/x-shellscript", headers=headers)


@routes.post("/reef/harness/installed")
async def installed(request: web.Request) -> web.Response:
    """``{"adapter"}``: the install script for ``adapter`` ran for the scenario; noted (see the
    module's docstring) → ``{"scenario", "adapter", "noted"}`` (``noted`` false: the scenario does
    not exist and implicit creation is off)."""
    daemon = daemon_of(request)
    name = scenario_of_read(request)
    _, body = await json_body(request)
    adapter = known_fields(body, {"adapter"}, "an install note").get("adapter")
    if adapter not in HARNESSES:
        raise InvalidInput(f"adapter must be one of {', '.join(HARNESSES)}, got {adapter!r}", field="adapter")
    noted = await asyncio.to_thread(_note_install, daemon, name, adapter)
    if noted:
        request.app[NOTED].add((name, adapter))
    return web.json_response({"scenario": name, "adapter": adapter, "noted": noted})
