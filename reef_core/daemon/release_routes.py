"""The release chain of a scenario, and what a person does to it: roll back, promote, reject.

Every operation publishes by compare-and-swap under the scenario's publish lock (learning
steps take the same lock), so a lost race is a 409 naming what moved, never an overwrite.
Pending candidates have no release number until promoted; they are named by their step,
``c5`` (or plain ``5``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from reef_core.daemon.context import Daemon, daemon_of
from reef_core.daemon.parsing import json_body
from reef_core.errors import ConflictError, InvalidInput, NotFound
from reef_core.ids import validate_scenario_name
from reef_core.release.listing import release_listing, step_of_source
from reef_core.store import Candidate, Release, Scenario, ScenarioReader

__all__ = ["UNNAMED_APPROVER", "parse_step", "routes"]

routes = web.RouteTableDef()

#: a rollback the client did not pin to a tip is tried again on a tip another node moved
_ROLLBACK_ATTEMPTS = 3

#: who a promote is recorded as approved by when the request does not say
UNNAMED_APPROVER = "an unnamed client"


@contextlib.asynccontextmanager
async def _opened(daemon: Daemon, name: str) -> AsyncIterator[Scenario]:
    """Scenario ``name``, open for writing while the block runs."""
    validate_scenario_name(name)
    if not daemon.scenarios.store.exists(name):
        raise NotFound(f"no scenario {name!r}", field="name")
    async with daemon.scenarios.use(name, create=False) as scenario:
        yield scenario


def parse_step(value: object) -> int:
    """``c5``, ``"5"`` or ``5`` → 5; a published ``vN`` is refused with what to use instead."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str):
        text = value.strip()
        digits = text[1:] if text[:1] in ("c", "C") else text
        if digits.isdigit() and int(digits) >= 1:
            return int(digits)
        if text[:1] == "v" and text[1:].isdigit():
            raise InvalidInput(
                f"{text} is a published release; a pending candidate is named by its step, such as c5 "
                "(see the releases listing)",
                field="release",
            )
    raise InvalidInput("release must name a pending candidate by its step, such as c5", field="release")


@routes.get("/reef/scenarios/{name}/releases")
async def list_releases(request: web.Request) -> web.Response:
    """The chain, newest first, with each release's step record; then every step."""
    daemon = daemon_of(request)
    reader = daemon.scenarios.reader(request.match_info["name"])
    listing = await asyncio.to_thread(release_listing, reader, daemon.settings.reef.tokens)
    return web.json_response(listing, dumps=_dumps)


async def _publish(daemon: Daemon, name: str, publish: Callable[[], Release]) -> web.Response:
    """Run ``publish`` off the loop, hand the release to the recipe's delivery, answer with it."""
    release = await asyncio.to_thread(publish)
    await asyncio.to_thread(daemon.learners.deliver, name, release)
    return web.json_response({"release": release.name, "commit": release.commit, "source": release.source})


async def _candidate_request(request: web.Request) -> tuple[Daemon, str, int, dict[str, Any]]:
    """What promote and reject read: the scenario's name, the candidate's step, the body."""
    daemon = daemon_of(request)
    name = request.match_info["name"]
    _, body = await json_body(request)
    step = parse_step(body.get("release", body.get("step")))
    return daemon, name, step, body


@routes.post("/reef/scenarios/{name}/rollback")
async def rollback(request: web.Request) -> web.Response:
    """Publish an earlier release's content again, as a new release, and serve it."""
    daemon = daemon_of(request)
    name = request.match_info["name"]
    _, body = await json_body(request)
    target = body.get("release")
    if not isinstance(target, (str, int)) or isinstance(target, bool):
        raise InvalidInput("release must name a release, such as v2", field="release")
    expected = body.get("expected")
    if expected is not None and not isinstance(expected, str):
        raise InvalidInput("expected must be a release commit id", field="expected")
    async with _opened(daemon, name) as scenario:

        def publish() -> Release:
            attempts = 0
            while True:
                with scenario.publish_lock:
                    tip = scenario.releases.tip()
                    base = expected or (tip.commit if tip else None)
                    try:
                        return scenario.releases.rollback(target, expected=base)
                    except ConflictError:
                        # another node published first (its release is adopted by now): the
                        # same rollback on the new tip, unless the client pinned the tip it meant
                        attempts += 1
                        if expected or attempts >= _ROLLBACK_ATTEMPTS or scenario.releases.tip() == tip:
                            raise

        return await _publish(daemon, name, publish)


@routes.post("/reef/scenarios/{name}/promote")
async def promote(request: web.Request) -> web.Response:
    """Publish a pending candidate (rebuilt on the current release if the chain moved since).

    ``approved_by`` names who approved it (``alice via reef review``); the release keeps it and
    the moment in its trailers and tag.
    """
    daemon, name, step, body = await _candidate_request(request)
    approved_by = body.get("approved_by", UNNAMED_APPROVER)
    if not isinstance(approved_by, str):
        raise InvalidInput("approved_by must be a string naming who approved", field="approved_by")
    async with _opened(daemon, name) as scenario:

        def publish() -> Release:
            chain = scenario.releases
            with scenario.publish_lock:
                candidate = _pending(scenario, step)
                tip = chain.tip()
                tree = None
                adopted = "adopted" in candidate.record  # another node's release: moved to as it is
                if (tip.commit if tip else None) != candidate.base and tip is not None and not adopted:
                    try:
                        tree = daemon.learners.rebase(name, candidate.record, tip)
                    except ConflictError as exc:
                        raise ConflictError(
                            f"c{step} was made on an older release and cannot be rebuilt on {tip.name}: "
                            f"{exc.message}; reject it and let the next step learn again",
                            field="release",
                        ) from None
                    if tree is None:
                        raise ConflictError(
                            f"c{step} was made on an older release and its change cannot be rebuilt on "
                            f"{tip.name}: reject it and ask again",
                            field="release",
                        )
                return chain.promote(
                    step, expected=tip.commit if tip else None, tree=tree, approved_by=approved_by
                )

        return await _publish(daemon, name, publish)


@routes.post("/reef/scenarios/{name}/reject")
async def reject(request: web.Request) -> web.Response:
    """Turn a pending candidate down: it leaves pending, is marked rejected, and is never served."""
    daemon, name, step, _ = await _candidate_request(request)
    async with _opened(daemon, name) as scenario:

        def turn_down() -> None:
            chain = scenario.releases
            with scenario.publish_lock:
                _pending(scenario, step)
                chain.reject(step)

        await asyncio.to_thread(turn_down)
    return web.json_response({"step": step, "name": f"c{step}", "rejected": True})


def _pending(scenario: ScenarioReader, step: int) -> Candidate:
    """Candidate ``step``, if it waits for a person; else a conflict saying what became of it."""
    chain = scenario.releases
    candidate = chain.candidate(step)  # NotFound names it
    if step in chain.pending():
        return candidate
    if step in chain.rejected():
        reason = "a person rejected it"
    else:
        done = next((r for r in chain if step_of_source(r.source) == step), None)
        reason = f"it was published as {done.name}" if done else f"its verdict: {candidate.verdict}"
    raise ConflictError(f"c{step} is not pending: {reason}", field="release")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
