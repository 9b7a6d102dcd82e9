"""What reefine knows of a scenario's usage: its sessions, and what earlier usage steps used.

* **the session index** (:class:`SessionIndex`): the scenario's sessions, their records and the
  reports on them, kept up to date from a cursor on this node's data ref.  The turns that open
  a session anew are handed to the judge (``usage_step.py``, ``judge.py``);
* **held out** (:func:`held_out`): a share of all sessions, decided by a hash of the session id
  (so a session is held out forever), is never learned from, only replayed by the gate
  (``replay.py``).  A usage step picks scored sessions with reports no earlier step used, the
  negative ones and the lowest scores first, at most ``usage-max-sessions``;
* **the ledger** (:class:`Ledger`, :func:`ledger`): from the step records, the reports earlier
  usage steps learned from, every bullet id ever added, and how often sessions found each rule
  helpful or harmful (a harmful tag counts only from a session a person scored);
* **the step record** (:class:`Stepped`): what a usage step did (the sessions and reports used,
  the lessons with their evidence, the edits applied, dropped and held, and why), which is what
  the ledger reads back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reef_core.errors import ReefError
from reef_core.sessions import Session, is_aside, is_explicit, opens_turn, request_messages, session_of
from reef_core.store import Scenario
from reef_core.store.data import Item

if TYPE_CHECKING:
    from recipes.reefine.reflect import Lesson

__all__ = ["Known", "Ledger", "NewTurn", "SessionIndex", "Stepped", "held_out", "ledger"]


def held_out(session: str, share: float) -> bool:
    """Whether ``session`` is in the held-out share (stable: a hash of its id)."""
    digest = hashlib.sha256(session.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < share


# -- the sessions reefine knows of ---------------------------------------------------------------


@dataclass
class Known:
    id: str
    receipts: set[str] = field(default_factory=set)
    reports: list[dict[str, Any]] = field(default_factory=list)
    asides: set[str] = field(default_factory=set)  # the harness's errands: never the answer judged

    def view(self) -> Session:
        ordered = sorted(self.receipts)
        return Session(self.id, records=ordered, reports=list(self.reports))

    @property
    def last(self) -> str | None:
        answers = self.receipts - self.asides
        return max(answers) if answers else None

    @property
    def first(self) -> str | None:
        return min(self.receipts) if self.receipts else None


@dataclass(frozen=True)
class NewTurn:
    """A record that opened a new turn of a session: the next message judges the last answer."""

    session: str
    record: str
    previous: str  # the receipt whose answer the next message answers
    answer: str
    next_message: str


class SessionIndex:
    """What reefine knows of a scenario's sessions, kept up to date from a cursor.

    Reports are read from the start (they are few); records from the moment the index was
    made (the judge needs only new turns; a report's receipts say which session it is about).
    """

    def __init__(self) -> None:
        self.sessions: dict[str, Known] = {}
        self.owner: dict[str, str] = {}  # receipt -> session, for the receipts seen
        self.judged: set[str] = set()  # receipts a judge report is about
        self.cursor: str | None = None
        self.started = False

    def update(self, scenario: Scenario, *, records_after: str | None = None) -> list[NewTurn]:
        """Read what was written since the last update; returns the new turns of sessions.

        The first update reads every report, and the records after ``records_after`` (None:
        from the data branch's tip on).  Only this node's data ref is followed (a cursor over
        every node's would miss what a fetch brings in late, and two nodes would learn from
        the same turn); receipts are still looked up on every ref."""
        data = scenario.own_data
        turns: list[NewTurn] = []
        if not self.started:
            last = data.last_id()
            start = records_after if records_after is not None else (None if last is None else str(last))
            for item in data.iter_items(["report"]):
                if start is not None and item.id[4:] > start[4:]:
                    break
                self._report(scenario, item)
            self.cursor = start
            self.started = True
        for item in data.iter_items(["record", "report"], after=self.cursor):
            self.cursor = item.id
            if item.kind == "report":
                self._report(scenario, item)
                continue
            turn = self._record(item)
            if turn is not None:
                turns.append(turn)
        return turns

    def _record(self, item: Item) -> NewTurn | None:
        name = session_of(item.data)
        if name is None:
            return None
        known = self.sessions.setdefault(name, Known(name))
        previous = known.last
        known.receipts.add(item.id)
        self.owner[item.id] = name
        if is_aside(item.data):
            known.asides.add(item.id)
            return None
        if previous is None or not opens_turn(item.data):
            return None
        messages = [m for m in request_messages(item.data) if m.source not in ("system", "harness")]
        answers = [m for m in messages[:-1] if m.source == "assistant"]
        if not answers:
            return None
        return NewTurn(name, item.id, previous, answers[-1].text, messages[-1].text)

    def _report(self, scenario: Scenario, item: Item) -> None:
        report = item.data
        metadata = report.get("metadata") if isinstance(report.get("metadata"), dict) else {}
        references = [r for r in report.get("references") or [] if isinstance(r, str)]
        names: set[str] = set()
        named = metadata.get("session") if metadata else None
        if isinstance(named, str) and named:
            names.add(named)
        else:
            for ref in {references[0], references[-1]} if references else set():
                owner = self.owner.get(ref)
                if owner is None:
                    owner = _session_of_receipt(scenario, ref)
                if owner is not None:
                    names.add(owner)
        for name in names:
            known = self.sessions.setdefault(name, Known(name))
            known.receipts.update(references)
            known.reports.append(report)
            for ref in references:
                self.owner.setdefault(ref, name)
        if not is_explicit(report):
            self.judged.update(references)

    def explicitly_scored(self, session: str) -> bool:
        known = self.sessions.get(session)
        return known is not None and any(is_explicit(r) for r in known.reports)


def _session_of_receipt(scenario: Scenario, receipt: str) -> str | None:
    try:
        return session_of(scenario.data.get(receipt).data)
    except ReefError:
        return None


# -- the ledger: what earlier steps used and counted ----------------------------------------------


@dataclass
class Ledger:
    consumed: set[str] = field(default_factory=set)  # report ids earlier usage steps learned from
    helpful: dict[str, int] = field(default_factory=dict)
    harmful: dict[str, int] = field(default_factory=dict)
    ids: set[str] = field(default_factory=set)  # every bullet id ever added

    def add(self, record: dict[str, Any]) -> None:
        usage = record.get("usage")
        if not isinstance(usage, dict):
            return
        self.consumed.update(r for r in record.get("batch", {}).get("items", []) if r.startswith("rep_"))
        for tag in usage.get("rule_tags") or []:
            if tag.get("tag") == "harmful" and tag.get("scored_by") != "person":
                continue  # a harmful tag counts only from a session a person scored
            counts = self.helpful if tag.get("tag") == "helpful" else self.harmful
            if tag.get("tag") in ("helpful", "harmful"):
                counts[tag["id"]] = counts.get(tag["id"], 0) + 1
        for edit in usage.get("edits") or []:
            if edit.get("target") == "rule" and edit.get("id"):
                self.ids.add(str(edit["id"]))

    def counts(self, bullet: str) -> tuple[int, int]:
        return self.helpful.get(bullet, 0), self.harmful.get(bullet, 0)


def ledger(records: Iterable[dict[str, Any]]) -> Ledger:
    book = Ledger()
    for record in records:
        book.add(record)
    return book


# -- the step record: what a usage step did ----------------------------------------------------


@dataclass
class Stepped:
    """What a usage step did, for its record."""

    sessions: list[dict[str, Any]] = field(default_factory=list)
    held_out: int = 0
    lessons: list[Lesson] = field(default_factory=list)
    rule_tags: list[dict[str, str]] = field(default_factory=list)
    edits: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    held: list[dict[str, Any]] = field(default_factory=list)
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "held_out_sessions": self.held_out,
            "lessons": [les.to_json() for les in self.lessons],
            "rule_tags": self.rule_tags,
            "edits": self.edits,
            "dropped_edits": self.dropped,
            "held_for_a_person": self.held,
            "why": self.why,
        }
