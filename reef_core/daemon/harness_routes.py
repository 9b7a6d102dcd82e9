"""The harness routes: asks in, their progress, the served tree's manifest, step pages.

| route | what |
|---|---|
| ``POST /reef/train`` | store a screened ask; the recipe's worker takes it from there |
| ``GET /reef/harness/requests/{id}/progress`` | queued, proposing, checking, settled + result |
| ``GET /reef/harness/requests/{id}/page`` | the step page once settled (a redirect), else a waiting page |
| ``GET /reef/harness?release=`` | files (path → text), release, requires of the served (or named) tree |
| ``GET /reef/harness/versions`` | releases oldest first, with their gate metrics (also ``/releases``) |
| ``GET /reef/harness/releases/{n}/page`` | the HTML page of step ``n`` (or of release ``vN``) |
| ``POST /reef/scenarios/{s}/learn`` | a usage step now (reefine), on whatever sessions are ready |
| ``GET /reef/scenarios/{s}/learn/{ticket}`` | where that step stands: like an ask's progress |

Pages are opened from a browser, so they take the scenario as ``?scenario=`` and, when reef
has tokens, a page key (``?key=``) in place of the token.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from reef_core.daemon.asks import parse_ask
from reef_core.daemon.context import Daemon, daemon_of
from reef_core.daemon.parsing import json_body, scenario_header, scenario_of_read
from reef_core.errors import ConfigError, ConflictError, InvalidInput, NotFound
from reef_core.ids import parse_item_id
from reef_core.learning.recipe import Recipe
from reef_core.release.adoption import tree_problems
from reef_core.release.evidence import step_evidence
from reef_core.release.listing import release_listing
from reef_core.release.pages import StepView, page_path, render_step_page, request_page_path
from reef_core.store import Candidate, Release, ScenarioReader

__all__ = ["ask_progress", "release_versions", "routes"]

routes = web.RouteTableDef()

MANIFEST_PATH = "reef-release.json"


@routes.post("/reef/train")
async def train(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    name = scenario_header(request)
    _, body = await json_body(request)
    ask = parse_ask(body)
    if "ask" not in daemon.learners.recipe.consumes:
        raise ConfigError(
            f"this reef runs the {daemon.learners.recipe.name} recipe, which does not learn from asks: "
            "start it with --recipe reefine",
            field="recipe",
        )
    async with daemon.scenarios.use(name) as scenario:
        ask_id, created = await daemon.asks.append(
            scenario, ask.content(), key=ask.key, summary=ask.summary()
        )
    if created:
        daemon.learners.notify(name)
    tokens = daemon.settings.reef.tokens
    return web.json_response(
        {
            "agent_record_id": ask_id,
            "scenario": name,
            "request_type": "ask",
            "created": created,
            "page_path": request_page_path(name, ask_id, tokens),
            "progress_path": f"/reef/harness/requests/{ask_id}/progress",
        }
    )


def ask_progress(daemon: Daemon, name: str, ask_id: str) -> dict[str, Any]:
    """Where an ask stands; settled steps are read back from their candidates after a restart."""
    reader = daemon.scenarios.reader(name)
    ask = reader.data.get(ask_id)  # NotFound names it
    live = daemon.learners.progress(name, ask_id)
    tokens = daemon.settings.reef.tokens
    imported = ask.data.get("imported") or {}
    if live is not None:
        state, result = live["state"], live["result"]
    elif imported.get("settled"):  # migrated: the original Reef acted on it
        state = "settled"
        result = {"verdict": f"settled by {imported.get('from', 'the original Reef')} before the migration"}
    else:
        state, result = "queued", None
        for candidate in reversed(reader.releases.candidates()):
            if ask_id in candidate.record.get("batch", {}).get("items", []):
                state, result = "settled", _result_of(reader, candidate)
                break
    if result is not None and result.get("step") is not None:
        result = {**result, "page_path": page_path(name, result["step"], tokens)}
    return {"id": ask_id, "scenario": name, "text": ask.data.get("text"), "state": state, "result": result}


@routes.post("/reef/scenarios/{name}/learn")
async def learn(request: web.Request) -> web.Response:
    """Run a usage step now; 202 with a ticket to follow (``reef learn``)."""
    daemon = daemon_of(request)
    name = request.match_info["name"]
    daemon.scenarios.reader(name)  # an unknown scenario is a 404 before anything else
    recipe = daemon.learners.recipe
    if recipe.learn_now is Recipe.learn_now:
        raise InvalidInput(
            f"scenario {name} is served by the {recipe.name} recipe, which does not learn from usage: "
            "start reef with --recipe.name reefine",
            field="recipe",
        )
    async with daemon.scenarios.use(name):
        ticket = daemon.learners.learn_now(name)
    daemon.learners.notify(name)
    return web.json_response(
        {
            "scenario": name,
            "ticket": ticket,
            "progress_path": f"/reef/scenarios/{name}/learn/{ticket}",
        },
        status=202,
    )


def learn_progress(daemon: Daemon, name: str, ticket: str) -> dict[str, Any]:
    """Where a ``reef learn`` step stands; read back from its candidate after a restart."""
    reader = daemon.scenarios.reader(name)
    live = daemon.learners.progress(name, ticket)
    if live is not None:
        state, result = live["state"], live["result"]
    else:
        found = next(
            (
                c
                for c in reversed(reader.releases.candidates())
                if ticket in c.record.get("batch", {}).get("items", [])
            ),
            None,
        )
        if found is None:
            if not daemon.learners.knows_ticket(name, ticket):
                raise NotFound(f"no learn request {ticket} in scenario {name}", field="ticket")
            state, result = "queued", None
        else:
            state, result = "settled", _result_of(reader, found)
    if result is not None and result.get("step") is not None:
        result = {**result, "page_path": page_path(name, result["step"], daemon.settings.reef.tokens)}
    return {"id": ticket, "scenario": name, "state": state, "result": result}


@routes.get("/reef/scenarios/{name}/learn/{ticket}")
async def learn_state(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    name, ticket = request.match_info["name"], request.match_info["ticket"]
    return web.json_response(await asyncio.to_thread(learn_progress, daemon, name, ticket))


def _result_of(reader: ScenarioReader, candidate: Candidate) -> dict[str, Any]:
    release = next((r for r in reader.releases if r.source == f"candidate {candidate.step}"), None)
    return {
        "verdict": candidate.verdict,
        "release": release.name if release else None,
        "step": candidate.step,
        "checks": [
            {"name": c.get("name"), "passed": c.get("passed"), "detail": c.get("detail")}
            for c in candidate.record.get("checks", [])
        ],
    }


def _ask_id(request: web.Request) -> str:
    parsed = parse_item_id(request.match_info["id"], field="id")
    if parsed.kind != "ask":
        raise InvalidInput(f"{parsed} is a {parsed.kind}, not an ask", field="id")
    return str(parsed)


@routes.get("/reef/harness/requests/{id}/progress")
async def progress(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    name, ask_id = scenario_of_read(request), _ask_id(request)
    return web.json_response(await asyncio.to_thread(ask_progress, daemon, name, ask_id))


@routes.get("/reef/harness/requests/{id}/page")
async def request_page(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    name, ask_id = scenario_of_read(request), _ask_id(request)
    state = await asyncio.to_thread(ask_progress, daemon, name, ask_id)
    result = state["result"]
    if state["state"] == "settled" and result and result.get("page_path"):
        raise web.HTTPSeeOther(result["page_path"])
    text = state["text"] or ""
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="3">'
        f'<title>reef: {state["state"]}</title></head><body style="font:15px system-ui;margin:2rem">'
        f"<h1>Your ask is {state['state']}</h1><blockquote>{html.escape(text)}</blockquote>"
        "<p>This page refreshes by itself and shows the result when the step settles.</p></body></html>"
    )
    return web.Response(text=body, content_type="text/html")


#: the query names a release may be asked for by: reef's, and the original Reef client's
_RELEASE_PARAMS = ("release", "version", "release_id")


def _wanted_release(request: web.Request) -> str | None:
    given = {name: request.query[name] for name in _RELEASE_PARAMS if request.query.get(name)}
    if len(set(given.values())) > 1:
        raise InvalidInput(
            "name one release: " + ", ".join(f"{k}={v}" for k, v in given.items()) + " disagree",
            field="release",
        )
    return next(iter(given.values()), None)


@routes.get("/reef/harness")
async def harness(request: web.Request) -> web.Response:
    """The served tree (or ``?release=vN``; ``?version=`` and ``?release_id=`` are the
    original Reef client's names for it): its files as a map of path → text, which the
    original client's ``harness_pull`` writes out as they are, with reef's own fields.  Only
    a tree :class:`~reef_core.harness.tree.HarnessTree` validates is served; any other is a
    409 naming its problems."""
    daemon = daemon_of(request)
    name = scenario_of_read(request)
    wanted = _wanted_release(request)

    def read() -> dict[str, Any]:
        reader = daemon.scenarios.reader(name)
        release = reader.releases.get(wanted) if wanted else reader.releases.tip()
        if release is None:
            raise NotFound(f"scenario {name!r} has no release yet", field="release")
        files = reader.releases.files(release)
        problems = tree_problems(files)
        if problems:  # never served raw: a harness writes out what it is given
            more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
            raise ConflictError(
                f"{release.name} of {name} is not a valid harness tree, so it is not served: "
                f"{'; '.join(problems[:3])}{more}",
                field="release",
            )
        try:
            manifest = json.loads(files.get(MANIFEST_PATH, b"{}"))
        except ValueError:
            manifest = {}
        texts: dict[str, str] = {}
        binary: list[str] = []
        entries = []
        for path, data in sorted(files.items()):
            entries.append({"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
            try:
                texts[path] = data.decode("utf-8")
            except UnicodeDecodeError:
                binary.append(path)  # a map of text cannot carry it: listed, fetched otherwise
        parent = f"v{release.number - 1}" if release.number > 1 else None
        return {
            "scenario": name,
            "release": release.name,
            "artifact_version": release.name,
            "release_id": release.name,
            "parent_artifact_version": parent,
            "parent_release_id": parent,
            "commit": release.commit,
            "content_id": release.tree,
            "operation": release.operation,
            "ask": release.ask,
            "requires": manifest.get("requires", {}) if isinstance(manifest, dict) else {},
            "manifest": manifest,
            "files": texts,
            "binary": binary,
            "entries": entries,
        }

    body = await asyncio.to_thread(read)
    return web.json_response(body, headers={"x-reef-artifact-version": body["release"]})


def release_versions(reader: ScenarioReader, tokens: Sequence[str]) -> list[dict[str, Any]]:
    """The chain oldest first, each release with the gate metrics of the step that made it:
    the rows of :func:`release_listing`, under the original Reef's names too."""
    rows = []
    for row in reversed(release_listing(reader, tokens)["releases"]):
        parent = f"v{row['number'] - 1}" if row["number"] > 1 else None
        rows.append(
            {
                "artifact_version": row["release"],
                "release_id": row["release"],
                "parent_artifact_version": parent,
                "parent_release_id": parent,
                "recorded_at": row["created_at"],
                "pending": False,
                **row,
            }
        )
    return rows


@routes.get("/reef/harness/versions")
@routes.get("/reef/harness/releases")
async def versions(request: web.Request) -> web.Response:
    """``{"versions": [...]}``, oldest first: what the original Reef client's
    ``harness_versions`` reads; ``/releases`` answers the same rows as ``releases``, the name
    the original Reef's newer releases use."""
    daemon = daemon_of(request)
    name = scenario_of_read(request)
    tokens = daemon.settings.reef.tokens
    rows = await asyncio.to_thread(lambda: release_versions(daemon.scenarios.reader(name), tokens))
    return web.json_response({"scenario": name, request.path.rsplit("/", 1)[1]: rows})


@routes.get("/reef/harness/releases/{n}/page")
async def step_page(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    name = scenario_of_read(request)
    raw = request.match_info["n"]
    html_text = await asyncio.to_thread(_render_page, daemon.scenarios.reader(name), raw)
    return web.Response(text=html_text, content_type="text/html")


def _render_page(reader: ScenarioReader, raw: str) -> str:
    chain = reader.releases
    releases = list(chain)
    if raw.startswith("v"):
        release = chain.get(raw)
        source = release.source or ""
        if not source.startswith("candidate ") or not source[10:].isdigit():
            return _release_only_page(reader, release, releases)
        step = int(source[10:])
    elif raw.lstrip("c").isdigit():
        step = int(raw.lstrip("c"))
    else:
        raise InvalidInput(f"{raw!r} is neither a step number nor a release such as v2", field="n")
    candidate = chain.candidate(step)
    by_commit = {r.commit: r for r in releases}
    base = by_commit.get(candidate.base) if candidate.base else None
    published = next((r for r in releases if r.source == f"candidate {step}"), None)
    if published is not None:
        status = "selected"
    elif step in chain.pending():
        status = "pending"
    elif step in chain.rejected():
        status = "rejected by a person"
    else:
        status = candidate.verdict.split(":")[0] or "rejected"
    view = StepView(
        scenario=reader.name,
        step=step,
        status=status,
        verdict=candidate.verdict,
        ask=candidate.ask,
        record=candidate.record,
        base_name=base.name if base else None,
        release_name=published.name if published else None,
        base_files=chain.files(base) if base else {},
        files=chain.tree_files(candidate.tree),
        evidence=step_evidence(reader, published.name if published else None, step),
    )
    return render_step_page(view)


def _release_only_page(reader: ScenarioReader, release: Release, releases: list[Release]) -> str:
    """A release that no step made (creation, rollback): its diff against the one before."""
    older = next((r for r in releases if r.number == release.number - 1), None)
    view = StepView(
        scenario=reader.name,
        step=0,
        status="selected",
        verdict=release.verdict or release.operation,
        ask=release.ask,
        record={"design": f"{release.operation} ({release.source or 'no step'})"},
        base_name=older.name if older else None,
        release_name=release.name,
        base_files=reader.releases.files(older) if older else {},
        files=reader.releases.files(release),
        evidence=step_evidence(reader, release.name, None),
    )
    return render_step_page(view)
