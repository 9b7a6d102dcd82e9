"""Reports: feedback on receipts, validated before anything is stored, safe to retry.

A report names the receipts it judges (``references``); each must be a record of the same
scenario.  A client may send its own ``agent_record_id`` as an idempotency key: resending
the same report returns the stored one, and different content under the same key is a
conflict.  Unknown fields are refused by name rather than dropped.  Feedback is screened like
an ask (:mod:`reef_core.daemon.asks`): a learner reads it, so a credential shape, an instruction
override or a chat-template token is refused with the rule's name, without echoing the text.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from reef_core.daemon.asks import refuse_screened
from reef_core.daemon.parsing import known_fields
from reef_core.errors import ConflictError, InvalidInput
from reef_core.ids import parse_item_id
from reef_core.store import Scenario

__all__ = ["KeyedDesk", "ReportDesk", "ReportInput", "parse_report"]

_FIELDS = {"score", "feedback", "references", "metadata", "agent_record_id"}
_MAX_REFERENCES = 1000


@dataclass(frozen=True)
class ReportInput:
    score: float | None
    feedback: Any
    references: tuple[str, ...]
    metadata: dict[str, Any]
    key: str | None

    def content(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "feedback": self.feedback,
            "references": list(self.references),
            "metadata": self.metadata,
        }

    def summary(self) -> str:
        refs = ",".join(self.references[:3]) + ("…" if len(self.references) > 3 else "")
        score = "none" if self.score is None else f"{self.score:g}"
        return f"score={score} refs={refs or '-'}"


def parse_report(body: Any) -> ReportInput:
    body = known_fields(body, _FIELDS, "a report")
    score = body.get("score")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise InvalidInput("score must be a finite number", field="score")
        score = float(score)
    feedback = body.get("feedback")
    if feedback is not None and not isinstance(feedback, (str, dict)):
        raise InvalidInput("feedback must be a string or an object", field="feedback")
    _screen_feedback(feedback)
    references = body.get("references", [])
    if not isinstance(references, list):
        raise InvalidInput("references must be a list of receipts", field="references")
    if len(references) > _MAX_REFERENCES:
        raise InvalidInput(f"at most {_MAX_REFERENCES} references", field="references")
    seen = set()
    for i, ref in enumerate(references):
        parsed = parse_item_id(ref, field=f"references[{i}]")
        if parsed.kind != "record":
            raise InvalidInput(f"references[{i}] is a {parsed.kind}, not a receipt", field=f"references[{i}]")
        if ref in seen:
            raise InvalidInput(f"references[{i}] repeats {ref}", field=f"references[{i}]")
        seen.add(ref)
    metadata = body.get("metadata", {})
    if not isinstance(metadata, dict):
        raise InvalidInput("metadata must be an object", field="metadata")
    key = body.get("agent_record_id")
    if key is not None and (not isinstance(key, str) or not 1 <= len(key) <= 200):
        raise InvalidInput("agent_record_id must be a string of 1-200 characters", field="agent_record_id")
    if score is None and feedback is None:
        raise InvalidInput("a report needs a score or feedback", field="score")
    return ReportInput(score, feedback, tuple(references), metadata, key)


def _strings(value: Any) -> list[str]:
    """Every string in ``value``, at any depth of objects and lists."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _screen_feedback(feedback: Any) -> None:
    refuse_screened(_strings(feedback), "the feedback", field="feedback")


class KeyedDesk:
    """Appends items of one kind, idempotent by the client's ``agent_record_id``.

    Resending the same content under the same key returns the stored item; different content
    under a used key is a conflict.  One key index per scenario, read once per process.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._keys: dict[str, dict[str, str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def lock(self, scenario: Scenario) -> asyncio.Lock:
        """Held around a look at the key index and the appends it decides."""
        return self._locks.setdefault(scenario.name, asyncio.Lock())

    async def append(
        self, scenario: Scenario, content: dict[str, Any], *, key: str | None, summary: str
    ) -> tuple[str, bool]:
        """Store ``content``; returns ``(id, created)``."""
        async with self.lock(scenario):
            if key is not None:
                existing = await self.stored(scenario, key, content)
                if existing is not None:
                    return existing, False
            document = {**content, "idempotency_key": key}
            item_id = await asyncio.wrap_future(scenario.append(self.kind, document, summary=summary))
            if key is not None:
                self.remember(scenario, key, item_id)
            return item_id, True

    async def stored(self, scenario: Scenario, key: str, content: dict[str, Any]) -> str | None:
        """The item stored under ``key``, if any; a conflict if it holds other ``content``.
        The caller holds :meth:`lock`."""
        existing = (await self.keys(scenario)).get(key)
        if existing is None:
            return None
        stored = await asyncio.to_thread(scenario.data.get, existing)
        if {k: stored.data.get(k) for k in content} != content:
            raise ConflictError(
                f"agent_record_id {key!r} was already used for a different {self.kind} ({existing})",
                field="agent_record_id",
            )
        return existing

    async def keys(self, scenario: Scenario) -> dict[str, str]:
        """The scenario's key index (key → id); read from the branch once per process."""
        keys = self._keys.get(scenario.name)
        if keys is None:
            keys = await asyncio.to_thread(_scan_keys, scenario, self.kind)
            self._keys[scenario.name] = keys
        return keys

    def remember(self, scenario: Scenario, key: str, item_id: str) -> None:
        """Note an item stored under ``key`` (after :meth:`keys` was read)."""
        self._keys[scenario.name][key] = item_id


class ReportDesk(KeyedDesk):
    """Accepts reports for the daemon's scenarios."""

    def __init__(self) -> None:
        super().__init__("report")

    async def submit(self, scenario: Scenario, report: ReportInput) -> tuple[str, bool]:
        """Store ``report``; returns ``(report id, created)``."""
        for i, ref in enumerate(report.references):
            if not await asyncio.to_thread(scenario.data.exists, ref):
                raise InvalidInput(
                    f"references[{i}]: {ref} is not a record of scenario {scenario.name}",
                    field=f"references[{i}]",
                )
        return await self.append(scenario, report.content(), key=report.key, summary=report.summary())


def _scan_keys(scenario: Scenario, kind: str) -> dict[str, str]:
    """Idempotency keys of the items of ``kind`` already stored."""
    return {
        item.data["idempotency_key"]: item.id
        for item in scenario.data.iter_items([kind])
        if item.data.get("idempotency_key")
    }
