"""Record import: ``POST /reef/records`` and ``POST /reef/records/batch``, the original Reef's
routes, which its client's resumable importer (``python -m reef_client import``) sends to.

| route | what |
|---|---|
| ``POST /reef/records`` | one record ``{agent_record_id, request_type, payload}`` |
| ``POST /reef/records/batch`` | ``{"records": [...]}``: 1-1,000 records, all or none |

A record is an inference (``request_type: "inference"``, the payload a request body with the
answer under ``response``) or a report on earlier records (``"report"``, its ``references``
the original ids, or receipts).  Each is validated like live traffic and screened like a live
report (:mod:`reef_core.daemon.imported`); the whole batch is checked before anything is
written, then written as one group: one commit per record, one move of the data branch.  The
client's ``agent_record_id`` is the idempotency key: a batch sent again (a retry after a lost
answer) gets the same answer and writes nothing; other content under a used id is a 409.  The
answer echoes each record's ``agent_record_id``, ``request_type`` and scenario in order,
exactly as the client checks it, and lists reef's receipts under ``receipts``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from reef_core.daemon.context import Daemon, daemon_of
from reef_core.daemon.imported import Item, inference_item, report_item, source_id
from reef_core.daemon.parsing import json_body, known_fields, scenario_header
from reef_core.daemon.reports import KeyedDesk
from reef_core.errors import ConflictError, InvalidInput
from reef_core.ids import parse_item_id
from reef_core.store import GroupEntry, GroupItem, Scenario

__all__ = ["MAX_BATCH", "MAX_BATCH_BYTES", "routes"]

routes = web.RouteTableDef()

MAX_BATCH = 1000
#: the original client's own ceiling on a request (``MAX_REQUEST_BYTES``)
MAX_BATCH_BYTES = 10 * 1024 * 1024
# a batch wraps each payload in a record, in a list, in an object
_ENVELOPE_DEPTH = 3
_KINDS = ("inference", "report")


@dataclass
class _Entry:
    key: str
    request_type: str
    payload: Any
    item: Item | None = None  # as checked (references to records not yet written stand in)
    receipt: str | None = None  # stored before this batch
    same_as: int | None = None  # repeats an earlier entry of the batch
    slot: int | None = None  # its place in the group written


@routes.post("/reef/records")
async def one_record(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    name = scenario_header(request)
    _, body = await json_body(request, max_bytes=MAX_BATCH_BYTES, extra_depth=_ENVELOPE_DEPTH)
    (echo,), receipts = await _import(daemon, name, [body])
    return web.json_response({**echo, "receipt": receipts[0]})


@routes.post("/reef/records/batch")
async def batch(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    name = scenario_header(request)
    _, body = await json_body(request, max_bytes=MAX_BATCH_BYTES, extra_depth=_ENVELOPE_DEPTH)
    records = known_fields(body, {"records"}, "a records batch").get("records")
    if not isinstance(records, list) or not 1 <= len(records) <= MAX_BATCH:
        raise InvalidInput(f"records must be a list of 1-{MAX_BATCH} records", field="records")
    echoes, receipts = await _import(daemon, name, records)
    return web.json_response({"records": echoes, "receipts": receipts})


async def _import(daemon: Daemon, name: str, raw: list[Any]) -> tuple[list[dict[str, str]], list[str]]:
    entries = [_entry(record, f"records[{i}]") for i, record in enumerate(raw)]
    desks = {"inference": daemon.records, "report": daemon.reports}
    async with daemon.scenarios.use(name) as scenario:
        async with daemon.records.lock(scenario), daemon.reports.lock(scenario):
            receipts = await _Batch(scenario, entries, desks).write()
    if any(e.slot is not None for e in entries):
        daemon.learners.notify(name)
    echoes = [{"agent_record_id": e.key, "request_type": e.request_type, "scenario": name} for e in entries]
    return echoes, receipts


def _entry(record: Any, where: str) -> _Entry:
    record = known_fields(record, {"agent_record_id", "request_type", "payload"}, f"{where}: a record")
    key = source_id(record.get("agent_record_id"), field=f"{where}.agent_record_id")
    request_type = record.get("request_type")
    if request_type not in _KINDS:
        hint = " (asks go to POST /reef/train)" if request_type in ("train", "ask") else ""
        raise InvalidInput(
            f"{where}.request_type must be inference or report, not {request_type!r}{hint}",
            field=f"{where}.request_type",
        )
    if "payload" not in record:
        raise InvalidInput(f"{where}.payload is required", field=f"{where}.payload")
    return _Entry(key, request_type, record["payload"])


class _Batch:
    """One batch, checked whole under the key indexes' locks, then written as one group.

    A report may reference a record of its own batch that is not written yet: while checking,
    such a reference stands in as a receipt made of the record's position, and the report is
    built again with the real receipt when the group is written (``submit_group`` hands each
    item the ids issued before it).
    """

    def __init__(self, scenario: Scenario, entries: list[_Entry], desks: dict[str, KeyedDesk]) -> None:
        self.scenario = scenario
        self.entries = entries
        self.desks = desks
        self.by_key: dict[tuple[str, str], int] = {}  # (request type, key) → first position
        self.group: list[GroupEntry] = []

    async def write(self) -> list[str]:
        records = await self.desks["inference"].keys(self.scenario)
        for i, entry in enumerate(self.entries):
            await self._check(i, entry, records)
        written: list[str] = []
        if self.group:
            written = await asyncio.wrap_future(self.scenario.append_group(self.group))
        receipts: list[str] = []
        for entry in self.entries:
            if entry.slot is not None:
                receipts.append(written[entry.slot])
                self.desks[entry.request_type].remember(self.scenario, entry.key, receipts[-1])
            elif entry.same_as is not None:
                receipts.append(receipts[entry.same_as])
            else:
                assert entry.receipt is not None
                receipts.append(entry.receipt)
        return receipts

    async def _check(self, i: int, entry: _Entry, records: dict[str, str]) -> None:
        where = f"records[{i}].payload"
        waiting: dict[str, int] = {}  # stand-in receipt → the group slot of its record
        resolve: Callable[[str], str | None] | None = None
        if entry.request_type == "inference":
            entry.item = inference_item(entry.payload, key=entry.key, where=where)
        else:
            resolve = await self._resolver(entry.payload, records, waiting)
            entry.item = report_item(entry.payload, key=entry.key, resolve=resolve, where=where)
        first = self.by_key.setdefault((entry.request_type, entry.key), i)
        if first != i:
            earlier = self.entries[first].item
            assert earlier is not None
            if _content(earlier) != _content(entry.item):
                raise ConflictError(
                    f"records[{i}]: agent_record_id {entry.key!r} repeats records[{first}] "
                    "with other content",
                    field=f"records[{i}].agent_record_id",
                )
            entry.same_as = first
            return
        desk = self.desks[entry.request_type]
        entry.receipt = await desk.stored(self.scenario, entry.key, _content(entry.item))
        if entry.receipt is not None:
            return
        entry.slot = len(self.group)
        if waiting:
            assert resolve is not None
            self.group.append(_report_builder(entry, where, resolve, waiting))
        else:
            kind, body, summary, trailers = entry.item
            self.group.append(GroupItem(kind, body, summary, trailers))

    async def _resolver(
        self, payload: Any, records: dict[str, str], waiting: dict[str, int]
    ) -> Callable[[str], str | None]:
        """What a report's references are now: an original id of this batch or of the
        scenario, or a receipt of the scenario; None for anything else."""
        refs = payload.get("references") if isinstance(payload, dict) else None
        receipts = (
            [r for r in refs if isinstance(r, str) and r.startswith("rec_")] if isinstance(refs, list) else []
        )
        exists = {r: await asyncio.to_thread(_exists, self.scenario, r) for r in receipts}

        def resolve(ref: str) -> str | None:
            position = self.by_key.get(("inference", ref))
            if position is not None:
                earlier = self.entries[position]
                if earlier.receipt is not None:
                    return earlier.receipt
                assert earlier.slot is not None
                stand_in = f"rec_{earlier.slot:028x}"
                waiting[stand_in] = earlier.slot
                return stand_in
            if ref in records:
                return records[ref]
            return ref if exists.get(ref) else None

        return resolve


def _report_builder(
    entry: _Entry, where: str, resolve: Callable[[str], str | None], waiting: dict[str, int]
) -> Callable[[list[str]], GroupItem]:
    """The report, built again once the records it references have their receipts."""

    def build(issued: list[str]) -> GroupItem:
        def final(ref: str) -> str | None:
            found = resolve(ref)
            return issued[waiting[found]] if found in waiting else found

        kind, body, summary, trailers = report_item(entry.payload, key=entry.key, resolve=final, where=where)
        return GroupItem(kind, body, summary, trailers)

    return build


def _content(item: Item) -> dict[str, Any]:
    return {k: v for k, v in item[1].items() if k != "idempotency_key"}


def _exists(scenario: Scenario, ref: str) -> bool:
    try:
        parse_item_id(ref, field="references")
    except InvalidInput:
        return False
    return scenario.data.exists(ref)
