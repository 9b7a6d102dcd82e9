"""reef's own routes: health, reports, scenarios, audit reads, sessions, status.

Releases and their operations live in ``release_routes``; asks and pages in ``harness_routes``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from reef_core import __version__
from reef_core.daemon.context import Daemon, daemon_of
from reef_core.daemon.install_routes import NOTED
from reef_core.daemon.parsing import json_body, scenario_header
from reef_core.daemon.reports import parse_report
from reef_core.errors import InvalidInput, NotFound
from reef_core.hosts import is_loopback
from reef_core.ids import KINDS, parse_item_id, validate_scenario_name
from reef_core.release.listing import scenario_summary
from reef_core.sessions import conversation, group_sessions, page_sessions, session_of
from reef_core.store import Item, Scenario, ScenarioReader

__all__ = ["routes"]

routes = web.RouteTableDef()

_MAX_LIMIT = 1000
_SESSION_KINDS = ["record", "report"]


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """200 while the daemon answers; ``degraded`` (still 200) while it cannot store writes."""
    full = daemon_of(request).scenarios.store.space.describe()
    if full is None:
        return web.json_response({"ok": True, "status": "ok", "version": __version__})
    reason = f"no space left under the state directory {full['state_dir']}: writes get 507"
    return web.json_response({"ok": True, "status": "degraded", "reason": reason, "version": __version__})


@routes.post("/reef/report")
async def report(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    name = scenario_header(request)
    _, body = await json_body(request)
    parse_report(body if not _original_ids(body) else {**body, "references": []})  # bad input: 400 first
    if not daemon.scenarios.store.exists(name):
        raise NotFound(f"no scenario {name!r}", field="x-reef-scenario")
    async with daemon.scenarios.use(name, create=False) as scenario:
        if _original_ids(body):
            body = {**body, "references": await _translated(daemon, scenario, body["references"])}
        report_id, created = await daemon.reports.submit(scenario, parse_report(body))
    if created:
        daemon.learners.notify(name)
    return web.json_response(
        {"agent_record_id": report_id, "scenario": name, "request_type": "report", "created": created}
    )


def _original_ids(body: dict[str, Any]) -> bool:
    """Whether a report quotes ids that are not reef receipts (a record imported under the
    client's own id, :mod:`reef_core.daemon.records_routes`, or migrated from the original Reef)."""
    refs = body.get("references")
    return isinstance(refs, list) and any(isinstance(r, str) and not r.startswith("rec_") for r in refs)


async def _translated(daemon: Daemon, scenario: Scenario, references: list[Any]) -> list[Any]:
    keys = await daemon.records.keys(scenario)
    out = []
    for i, ref in enumerate(references):
        if isinstance(ref, str) and not ref.startswith("rec_"):
            if ref not in keys:
                raise InvalidInput(
                    f"references[{i}]: {ref!r} is neither a receipt nor the agent_record_id of a record "
                    f"imported into scenario {scenario.name}",
                    field=f"references[{i}]",
                )
            ref = keys[ref]
        out.append(ref)
    return out


def _reader(request: web.Request, name: str) -> ScenarioReader:
    return daemon_of(request).scenarios.reader(name)


@routes.get("/reef/scenarios")
async def list_scenarios(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    names = daemon.scenarios.store.names()
    rows = await asyncio.to_thread(lambda: [scenario_summary(_reader(request, n)) for n in names])
    return web.json_response({"scenarios": rows})


@routes.post("/reef/scenarios")
async def create_scenario(request: web.Request) -> web.Response:
    _, body = await json_body(request)
    name = validate_scenario_name(body.get("name"), field="name")
    created = await daemon_of(request).scenarios.create(name)
    return web.json_response({"name": name, "created": created}, status=201 if created else 200)


@routes.delete("/reef/scenarios/{name}")
async def archive_scenario(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    daemon = daemon_of(request)
    target = await daemon.scenarios.archive(name, before_close=daemon.learners.detach)
    # a scenario made again under this name starts with no install noted (install_routes)
    request.app[NOTED].difference_update({pair for pair in request.app[NOTED] if pair[0] == name})
    return web.json_response({"name": name, "archived_to": str(target)})


def _limit(request: web.Request) -> int:
    raw = request.query.get("limit", "50")
    if not raw.isdigit() or not 1 <= int(raw) <= _MAX_LIMIT:
        raise InvalidInput(f"limit must be a whole number from 1 to {_MAX_LIMIT}", field="limit")
    return int(raw)


def _tags(request: web.Request) -> dict[str, str]:
    """``?tag=name:value`` (repeatable; all must match): a record's ``x-reef-tag-<name>`` tags."""
    wanted: dict[str, str] = {}
    for raw in request.query.getall("tag", []):
        name, sep, value = raw.partition(":")
        if not sep or not name or not value:
            raise InvalidInput(f"tag {raw!r} must be name:value, such as run:0f3a", field="tag")
        wanted[name.lower()] = value
    return wanted


@routes.get("/reef/scenarios/{name}/records")
async def list_records(request: web.Request) -> web.Response:
    reader = _reader(request, request.match_info["name"])
    limit = _limit(request)
    after = _after(request)
    tags = _tags(request)

    def read() -> list[dict[str, Any]]:
        if not tags:
            return [item.data for item in reader.data.iter_items(["record"], after=after, limit=limit)]
        # a scan from the cursor on: callers bound it with ``after`` (ids are time-ordered)
        found = []
        for item in reader.data.iter_items(["record"], after=after):
            record_tags = item.data.get("tags") or {}
            if all(record_tags.get(k) == v for k, v in tags.items()):
                found.append(item.data)
                if len(found) == limit:
                    break
        return found

    return _page("records", await asyncio.to_thread(read), limit)


@routes.get("/reef/scenarios/{name}/items")
async def list_items(request: web.Request) -> web.Response:
    """Records, reports and asks in the order they were written: ``?kind=report,ask&after=&limit=``."""
    reader = _reader(request, request.match_info["name"])
    limit = _limit(request)
    kinds = [k for k in request.query.get("kind", "").split(",") if k] or list(KINDS)
    for kind in kinds:
        if kind not in KINDS:
            raise InvalidInput(f"kind {kind!r} is not one of {', '.join(KINDS)}", field="kind")
    after = _after(request)

    def read() -> list[dict[str, Any]]:
        return [item.data for item in reader.data.iter_items(kinds, after=after, limit=limit)]

    return _page("items", await asyncio.to_thread(read), limit)


@routes.get("/reef/scenarios/{name}/records/{id}")
async def get_record(request: web.Request) -> web.Response:
    reader = _reader(request, request.match_info["name"])
    item_id = parse_item_id(request.match_info["id"], field="id")
    if item_id.kind != "record":
        raise InvalidInput(f"{item_id} is a {item_id.kind}, not a record", field="id")
    item = await asyncio.to_thread(reader.data.get, item_id)
    return web.json_response(item.data, dumps=_dumps)


def _after(request: web.Request) -> str | None:
    """``?after=``: an item id (checked), or None."""
    after = request.query.get("after") or None
    if after is not None:
        parse_item_id(after, field="after")
    return after


def _page(key: str, found: list[dict[str, Any]], limit: int) -> web.Response:
    """``found`` under ``key``, and ``next``: the cursor of the next page (null after a short one)."""
    next_cursor = found[-1]["id"] if len(found) == limit else None
    return web.json_response({key: found, "next": next_cursor}, dumps=_dumps)


@routes.get("/reef/scenarios/{name}/sessions")
async def list_sessions(request: web.Request) -> web.Response:
    """Records grouped by session tag, with the reports on them: ``?after=&limit=`` (sessions).

    Sessions come oldest first (by their first record after ``after``); each holds its records
    after ``after`` only, and one that began before is marked ``continues``.  ``next`` starts the
    next page with the first session left out, whole; a session of this page that goes on past
    it appears there again, marked ``continues``.  The scan runs from ``after`` to the tip.
    """
    reader = _reader(request, request.match_info["name"])
    limit = _limit(request)
    after = _after(request)

    def read() -> dict[str, Any]:
        sessions, next_cursor = page_sessions(reader.data.iter_items(_SESSION_KINDS, after=after), limit)
        return {"sessions": [s.to_json() for s in sessions], "next": next_cursor}

    return web.json_response(await asyncio.to_thread(read), dumps=_dumps)


@routes.get("/reef/scenarios/{name}/sessions/{session}")
async def get_session(request: web.Request) -> web.Response:
    """One session in full (its records after ``?after=``, if given), with the transcript of its
    last record: every message with its ``source`` (user, assistant, tool, system)."""
    reader = _reader(request, request.match_info["name"])
    name = request.match_info["session"]
    after = _after(request)

    def read() -> dict[str, Any] | None:
        last: dict[str, Any] | None = None

        def its_items() -> Iterator[Item]:
            nonlocal last
            for item in reader.data.iter_items(_SESSION_KINDS, after=after):
                if item.kind == "record":
                    if session_of(item.data) != name:
                        continue
                    last = item.data
                yield item

        found = group_sessions(its_items())
        if not found or last is None:
            return None
        return {**found[0].to_json(), "transcript": [m.to_json() for m in conversation(last)]}

    body = await asyncio.to_thread(read)
    if body is None:
        where = f" after {after}" if after else ""
        raise NotFound(f"no record{where} carries the session {name!r}", field="session")
    return web.json_response(body, dumps=_dumps)


@routes.get("/reef/status")
async def status(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    names = daemon.scenarios.store.names()
    rows = await asyncio.to_thread(lambda: [scenario_summary(_reader(request, n)) for n in names])
    settings = daemon.settings
    return web.json_response(
        {
            "version": __version__,
            "recipe": settings.recipe.name,
            "upstream": {"url": daemon.upstream.base_url, "api": daemon.upstream_format},
            "state_dir": str(settings.storage.state_dir),
            "disk_full": daemon.scenarios.store.space.describe(),
            "open_scenarios": {
                "open": len(daemon.scenarios.open_names),
                "limit": daemon.scenarios.max_open,
                "idle_close_s": daemon.scenarios.idle_close_s,
                "files": daemon.scenarios.files.describe(),
            },
            "auth": {
                "required": bool(settings.reef.tokens),
                "listening": settings.reef.host,
                "loopback": is_loopback(settings.reef.host),
            },
            "scenarios": [{**row, "learning": daemon.learners.describe(row["name"])} for row in rows],
        }
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
