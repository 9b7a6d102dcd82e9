"""The daemon and its scenarios' git remotes (``reef_core.store.sync``).

* **Publishing**: a scenario that has a remote publishes through it (``RemotePublisher``, the
  first remote its repository lists): each release is pushed with its tag under a lease on
  the remote's chain before the local chain moves; a lost lease adopts the other node's
  release, and the step is rebuilt on it or recorded as a conflict; an unreachable remote
  leaves the release local, pushed by a later sync.
* **Syncing**: every ``storage.sync-interval`` seconds (off by default) each open scenario with
  remotes syncs with each of them, one scenario at a time, in a worker thread; and on demand,
  ``POST /reef/scenarios/{s}/sync`` (``reef sync`` when a daemon holds the scenario).
* **Serving what a fetch brought**: a release adopted from a remote is delivered at once
  (weights swapped by the recipe); the harness manifest and the inference routes read the
  chain's tip on each request, so they follow by themselves.  Every sync and publish vets what
  it adopts (``reef_core.release.adoption.admit``): a release that fails the screens or the
  tree's validation is refused, one whose code nobody this node trusts approved waits as
  pending.
* **Adding a remote**: ``trusted`` marks it trusted; ``create`` makes a bare repository only
  under the state directory (anywhere else is refused: an HTTP request never makes a
  repository where the daemon's user keeps other things; ``reef remote add --create`` makes
  one where the person says, as the person).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from reef_core.daemon.context import Daemon, daemon_of
from reef_core.daemon.parsing import json_body, known_fields
from reef_core.errors import InvalidInput, NotFound
from reef_core.release.adoption import admit
from reef_core.store import Scenario
from reef_core.store.releases import Release
from reef_core.store.remotes import Remote, add_remote, list_remotes, remove_remote, validate_url
from reef_core.store.repo import init_bare
from reef_core.store.sync import ReleasePush, RemotePublisher, SyncReport, sync

__all__ = ["Syncing", "routes"]

log = logging.getLogger(__name__)

routes = web.RouteTableDef()


class Syncing:
    """Remotes of the daemon's open scenarios: the publisher each gets, the interval loop."""

    def __init__(self, daemon: Daemon, on_report: Callable[[SyncReport], None] | None = None) -> None:
        self.daemon = daemon
        self.on_report = on_report  # told of every sync of one remote (``/metrics``)
        self._locks: dict[str, asyncio.Lock] = {}
        self._task: asyncio.Task[None] | None = None
        self._last_ok: dict[str, float] = {}  # scenario -> wall time its last sync ended ok

    def lag(self) -> float:
        """Seconds since the open scenario that synced ``ok`` longest ago did (0: none yet)."""
        now = time.time()
        open_names = set(self.daemon.scenarios.open_names)
        ages = [now - at for name, at in self._last_ok.items() if name in open_names]
        return max(ages, default=0.0)

    @property
    def timeout(self) -> float:
        return self.daemon.settings.storage.sync_timeout_s

    def attach(self, scenario: Scenario) -> None:
        """Publish through the scenario's first remote (called as it opens): the remotes are read
        at each publish, so one added or removed while the daemon runs counts from the next."""
        scenario.releases.publisher = _FirstRemote(
            scenario, self.timeout, lambda name: self._serve(scenario, name)
        )

    def _serve(self, scenario: Scenario, name: str) -> None:
        """Deliver a release adopted from a remote (in the thread that adopted it)."""
        log.info("%s: serving %s, adopted from a remote", scenario.name, name)
        self.daemon.learners.deliver(scenario.name, scenario.releases.get(name))

    async def sync(self, name: str, remote: str | None = None) -> list[SyncReport]:
        """Sync scenario ``name`` with ``remote`` (by default each of its remotes)."""
        async with self.daemon.scenarios.use(name, create=False) as scenario:
            names = [r.name for r in list_remotes(scenario.path)]
            if remote is not None:
                if remote not in names:
                    raise NotFound(f"scenario {name} has no remote {remote!r}", field="remote")
                names = [remote]
            reports = []
            async with self._locks.setdefault(name, asyncio.Lock()):
                for each in names:
                    report = await asyncio.to_thread(sync, scenario, each, timeout=self.timeout, admit=admit)
                    if report.adopted:
                        await asyncio.to_thread(self._serve, scenario, report.adopted)
                    if report.error:
                        log.warning("%s: sync with %s: %s", name, each, report.error)
                    reports.append(report)
                    if report.outcome == "ok":
                        self._last_ok[name] = time.time()
                    if self.on_report is not None:
                        self.on_report(report)
            return reports

    def start(self) -> None:
        interval = self.daemon.settings.storage.sync_interval
        if interval > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(interval))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            for name in list(self.daemon.scenarios.open_names):
                scenario = self.daemon.scenarios.peek(name)
                if scenario is None or not list_remotes(scenario.path):
                    continue
                try:
                    await self.sync(name)
                except Exception:  # the loop must outlive any one scenario's trouble
                    log.exception("syncing %s failed", name)


class _FirstRemote:
    """``ReleaseChain.publisher`` of a daemon's scenario: publish through its first remote as
    configured *now* (``reef remote add`` and ``remove`` write the repository's config, which
    is read again at each publish: publishes are rare, a config read is cheap), with no remote
    a local publish.  ``last``: what the latest push through a remote came to."""

    def __init__(self, scenario: Scenario, timeout: float, on_adopt: Callable[[str], None]) -> None:
        self.scenario = scenario
        self.timeout = timeout
        self.on_adopt = on_adopt
        self._publisher: RemotePublisher | None = None

    @property
    def last(self) -> ReleasePush | None:
        return self._publisher.last if self._publisher else None

    def __call__(self, release: Release, tag: str, expected: str | None) -> None:
        remotes = list_remotes(self.scenario.path)
        if not remotes:
            self._publisher = None
            return
        first = remotes[0]
        if self._publisher is None or self._publisher.remote != first:
            self._publisher = RemotePublisher(
                self.scenario, first.name, timeout=self.timeout, on_adopt=self.on_adopt, admit=admit
            )
        self._publisher(release, tag, expected)


SYNCING = web.AppKey("reef.syncing", Syncing)


@routes.post("/reef/scenarios/{name}/sync")
async def sync_route(request: web.Request) -> web.Response:
    """Sync now: ``{"remote"?}`` → ``{"scenario", "remotes": [what each sync did]}``."""
    daemon = daemon_of(request)
    name = request.match_info["name"]
    daemon.scenarios.reader(name)  # an unknown scenario is a 404 before anything else
    body: dict[str, Any] = {}
    if request.can_read_body:
        _, body = await json_body(request)
    remote = known_fields(body, {"remote"}, "a sync request").get("remote")
    reports = await request.app[SYNCING].sync(name, remote)
    return web.json_response({"scenario": name, "remotes": [r.as_dict() for r in reports]})


@routes.post("/reef/scenarios/{name}/remotes")
async def add_remote_route(request: web.Request) -> web.Response:
    """Add a remote to a scenario this daemon holds, and sync with it at once: ``{"name",
    "url", "create"?, "trusted"?}`` → ``{"scenario", "name", "url", "trusted", "sync": what the
    first sync did}`` (``url`` redacted).  ``create``: make a bare repository at ``url`` first,
    a path under the state directory (else refused); ``trusted``: serve its releases without a
    person's approval here.  From the next publish on, the scenario publishes through its first
    remote (``reef remote add`` comes here when a daemon holds the scenario)."""
    daemon = daemon_of(request)
    name = request.match_info["name"]
    daemon.scenarios.reader(name)  # an unknown scenario is a 404 before anything else
    _, body = await json_body(request)
    fields = known_fields(body, {"name", "url", "create", "trusted"}, "a remote")
    remote, url = fields.get("name"), fields.get("url")
    if not isinstance(remote, str) or not isinstance(url, str):
        raise InvalidInput(
            "a remote needs a name and a url (strings)",
            field="name" if not isinstance(remote, str) else "url",
        )
    create, trusted = fields.get("create", False), fields.get("trusted", False)
    for key, value in (("create", create), ("trusted", trusted)):
        if not isinstance(value, bool):
            raise InvalidInput(f"{key} must be true or false", field=key)
    kept = validate_url(url)
    where = _created_at(daemon.settings.storage.state_dir, kept) if create else None
    async with daemon.scenarios.use(name, create=False) as scenario:

        def add() -> Remote:
            if where is not None:
                init_bare(where)
            return add_remote(scenario.path, remote, kept, trusted=trusted)

        added = await asyncio.to_thread(add)
    [report] = await request.app[SYNCING].sync(name, added.name)
    return web.json_response(
        {
            "scenario": name,
            "name": added.name,
            "url": added.shown_url,
            "trusted": added.trusted,
            "sync": report.as_dict(),
        }
    )


def _created_at(state_dir: Path, url: str) -> Path:
    """Where ``create`` may make a bare repository for ``url``: a local path under the state
    directory (links resolved), else refused naming both."""
    root = state_dir.expanduser().resolve()
    if not url.startswith("/"):
        raise InvalidInput(
            f"create makes a repository only at a local path under the state directory {root}, "
            "not at a URL: make it there first, then add it without create",
            field="create",
        )
    path = Path(url).resolve()
    if path == root or not path.is_relative_to(root):
        raise InvalidInput(
            f"create makes a repository only under the state directory {root}, not at {path}: "
            f"make it yourself (git init --bare {path}, or reef remote add --create, which runs as you), "
            "then add it without create",
            field="create",
        )
    for kept in ("scenarios", "archive"):
        if path.is_relative_to(root / kept):
            raise InvalidInput(
                f"create makes a repository under the state directory, but not in its {kept}/ "
                f"({path} would read as a scenario there): pick {root / 'remotes'}/NAME.git",
                field="create",
            )
    return path


@routes.delete("/reef/scenarios/{name}/remotes/{remote}")
async def remove_remote_route(request: web.Request) -> web.Response:
    """Forget a remote of a scenario this daemon holds (nothing on the remote changes); the next
    publish goes through the next remote, or stays local."""
    daemon = daemon_of(request)
    name, remote = request.match_info["name"], request.match_info["remote"]
    daemon.scenarios.reader(name)
    async with daemon.scenarios.use(name, create=False) as scenario:
        await asyncio.to_thread(remove_remote, scenario.path, remote)
    return web.json_response({"scenario": name, "removed": remote})
