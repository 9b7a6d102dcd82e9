"""What the review TUI shows, read from the scenario repositories: plain values, no textual.

The chain and the steps come from :func:`release_listing` (the document the daemon serves and
``reef releases`` prints), so the TUI can never disagree with them; what the listing leaves
out (a step's design, its checks, the trees to diff) is read from the candidate commits.
Reading needs no daemon and takes no lock: the repositories are opened read-only, beside a
daemon that may be writing them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reef_cli.output import when
from reef_cli.tui.canary import kept, step_state
from reef_cli.tui.scores import ScoreTally
from reef_core.harness.diff import FileDiff, diff_files
from reef_core.release.evidence import Evidence
from reef_core.release.intervals import Interval
from reef_core.release.listing import release_listing
from reef_core.store import ScenarioReader, Store, release_name

__all__ = [
    "Check",
    "Detail",
    "ReleaseRow",
    "ReviewData",
    "ScenarioView",
    "Selection",
    "StepRow",
    "in_use_lines",
]


@dataclass(frozen=True)
class Selection:
    """What the cursor is on: a scenario, a group of it, a candidate (``c2``) or a release (``v3``)."""

    scenario: str
    kind: str  # "scenario", "group", "candidate", "release"
    name: str = ""


@dataclass(frozen=True)
class StepRow:
    name: str  # "c5", as the listing names it
    step: int
    state: str  # "pending", "selected", "rejected", "skipped", "rejected by a person"
    verdict: str
    ask: str | None
    base: str | None  # the release it was built on
    release: str | None  # the release it became
    page_path: str
    approval: str = ""  # "approved by alice via reef review at Jun 01 12:00", once a person did
    executable: tuple[str, ...] | None = ()  # a pending step's files that run code (None: unknown)
    evidence: Evidence | None = None  # how it did in use, when it served (a canary)


@dataclass(frozen=True)
class ReleaseRow:
    name: str
    number: int
    commit: str
    operation: str
    ask: str | None
    verdict: str | None
    source: str | None
    step: int | None
    current: bool
    page_path: str
    approval: str = ""  # who approved it and when, for a promoted release
    evidence: Evidence | None = None  # how it does in use


@dataclass(frozen=True)
class ScenarioView:
    name: str
    releases: tuple[ReleaseRow, ...]  # newest first
    steps: tuple[StepRow, ...]  # newest first
    counts: tuple[tuple[str, int], ...]  # records, reports, asks on the data branch
    scores: tuple[tuple[str, float], ...]  # (release, mean report score), oldest first
    canary: Mapping[str, Any] | None = None  # its canary (running, or the last) as git keeps it

    @property
    def current(self) -> ReleaseRow | None:
        return next((r for r in self.releases if r.current), None)

    @property
    def pending(self) -> tuple[StepRow, ...]:
        return tuple(s for s in self.steps if s.state == "pending")

    def step(self, name: str) -> StepRow | None:
        return next((s for s in self.steps if s.name == name), None)

    def release(self, name: str) -> ReleaseRow | None:
        return next((r for r in self.releases if r.name == name), None)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Detail:
    """The right-hand side for one selection."""

    selection: Selection
    state: str  # a step's state, "current"/"published" for a release, "" for a scenario
    verdict: str | None = None
    ask: str | None = None
    design: str | None = None
    self_review: str | None = None  # "delivers", or "partially: what is missing"
    checks: tuple[Check, ...] = ()
    base: str | None = None  # the release the diff is taken against
    became: str | None = None  # the release a step became
    diffs: tuple[FileDiff, ...] = ()
    summary: str = ""  # a scenario's one-paragraph state
    note: str = ""  # what a person should know before acting on it
    approval: str = ""  # who approved it and when
    replay: tuple[str, ...] = ()  # a usage step's replay table, one line per held-out session
    held: tuple[str, ...] = ()  # edits that wait for a person, with where their evidence is
    in_use: tuple[str, ...] = ()  # its live evidence, one line per measure (:func:`in_use_lines`)
    canary: tuple[str, ...] = ()  # the scenario's canary, rich markup (:mod:`reef_cli.tui.canary`)


def _state(step: Mapping[str, Any], canaries: Mapping[str, str]) -> str:
    if step.get("release"):
        return "selected"
    if step.get("pending"):
        return "pending"
    if step.get("rejected_by_person"):
        return "rejected by a person"
    word = str(step.get("verdict") or "").split(":")[0].strip()
    if word == "canary":
        return step_state(canaries.get(step["name"]))
    return word if word in ("rejected", "skipped") else "rejected"


def approval(row: Mapping[str, Any]) -> str:
    """``approved by alice via reef review at Jun 01 12:00`` for a listing row a person approved."""
    who = row.get("approved_by")
    if not who:
        return ""
    at = row.get("approved_at")
    return f"approved by {who}" + (f" at {when(at)}" if at else "")


def _interval(interval: Interval | None) -> str:
    return "" if interval is None else f" [{interval.low:.2f}, {interval.high:.2f}]"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def in_use_lines(evidence: Evidence | None) -> tuple[str, ...]:
    """A release's live evidence as the pane shows it: what it served, the person's and the
    judge's scores (mean over sessions, 95% interval), latency, tokens and errors."""
    if evidence is None or not evidence.requests:
        return ("(it has served no request yet)",)
    lines = [f"{_n(evidence.sessions, 'session')} · {_n(evidence.requests, 'request')}"]
    for label, scores in (("person's score", evidence.person), ("judge's score", evidence.judge)):
        if scores.count:
            lines.append(
                f"{label} {scores.mean:.2f}{_interval(scores.interval)} over {_n(scores.count, 'session')}"
            )
        else:
            lines.append(f"{label}: none yet")
    if evidence.p50_ms is not None and evidence.p95_ms is not None:
        lines.append(f"upstream latency p50 {evidence.p50_ms:.0f} ms · p95 {evidence.p95_ms:.0f} ms")
    if evidence.metered:
        lines.append(
            f"tokens {evidence.tokens_in} in · {evidence.tokens_out} out ({_n(evidence.metered, 'answer')})"
        )
    rate, interval = evidence.error_rate or 0.0, evidence.error_interval
    spread = f"; 95% {100 * interval.low:.1f}–{100 * interval.high:.1f}%" if interval is not None else ""
    lines.append(f"errors {evidence.errors} of {evidence.requests} ({100 * rate:.1f}%{spread})")
    return tuple(lines)


def _evidence(listing: Mapping[str, Any], name: str) -> Evidence | None:
    found = (listing.get("evidence") or {}).get(name)
    return Evidence.from_json(found) if found else None


def _executable(step: Mapping[str, Any]) -> tuple[str, ...] | None:
    lines = step.get("executable")
    return None if lines is None else tuple(str(line) for line in lines)


def _checks(record: Mapping[str, Any]) -> tuple[Check, ...]:
    return tuple(
        Check(str(c.get("name", "check")), bool(c.get("passed")), str(c.get("detail") or ""))
        for c in record.get("checks") or []
        if isinstance(c, Mapping)
    )


def _one(text: object, width: int = 70) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _replay(record: Mapping[str, Any]) -> tuple[str, ...]:
    """The replay table of a usage step (or a gated ask): one line per held-out session."""
    check = next((c for c in record.get("checks") or [] if c.get("name") == "replay"), None)
    rows = ((check or {}).get("data") or {}).get("table") or []
    return tuple(
        f"{row.get('result')}: {_one(row.get('task'), 40)} · current: {_one(row.get('current'), 50)} · "
        f"candidate: {_one(row.get('candidate'), 50)} · "
        + ", ".join(f"{v.get('order')} → {v.get('prefers')}" for v in row.get("verdicts") or [])
        for row in rows
    )


def _held(record: Mapping[str, Any]) -> tuple[str, ...]:
    used = record.get("usage")
    lines = []
    for item in used.get("held_for_a_person") or [] if isinstance(used, Mapping) else []:
        evidence = ", ".join(
            _one(f"{e.get('source')}: {e.get('quote')}", 60) for e in item.get("evidence") or []
        )
        why = "; ".join(item.get("why_held") or [])
        lines.append(f"{_one(item.get('text') or item.get('id'))}: {why} (evidence: {evidence})")
    return tuple(lines)


def _self_review(record: Mapping[str, Any]) -> str | None:
    review = record.get("self_review")
    if not isinstance(review, Mapping) or not review.get("verdict"):
        return None
    missing = review.get("missing")
    return f"{review['verdict']}: {missing}" if missing else str(review["verdict"])


class ReviewData:
    """Reads the scenarios under one state directory (or just one of them) for the TUI.

    Thread-safe: the app reads from worker threads, one load at a time.
    """

    def __init__(self, store: Store, *, only: str | None = None, tokens: Sequence[str] = ()) -> None:
        self.store = store
        self.only = only
        self.tokens = tuple(tokens)
        self._readers: dict[str, ScenarioReader] = {}
        self._tallies: dict[str, ScoreTally] = {}
        self._views: dict[str, ScenarioView] = {}
        self._lock = threading.Lock()

    @property
    def scenarios_dir(self) -> Path:
        return self.store.scenarios_dir

    def names(self) -> list[str]:
        return [self.only] if self.only else self.store.names()

    def _reader(self, name: str) -> ScenarioReader:
        if name not in self._readers:
            self._readers[name] = self.store.reader(name)
        return self._readers[name]

    def load(self) -> tuple[ScenarioView, ...]:
        """Every scenario as it stands now."""
        with self._lock:
            views = tuple(self._view(name) for name in self.names())
            self._views = {v.name: v for v in views}
            return views

    def _view(self, name: str) -> ScenarioView:
        reader = self._reader(name)
        listing = release_listing(reader, self.tokens)
        canary, canaries = kept(reader.canary)
        releases = tuple(
            ReleaseRow(
                name=r["release"],
                number=r["number"],
                commit=r["commit"],
                operation=r["operation"],
                ask=r.get("ask"),
                verdict=r.get("verdict"),
                source=r.get("source"),
                step=r.get("step"),
                current=bool(r["current"]),
                page_path=r["page_path"],
                approval=approval(r),
                evidence=_evidence(listing, r["release"]),
            )
            for r in listing["releases"]
        )
        steps = tuple(
            StepRow(
                name=s["name"],
                step=s["step"],
                state=_state(s, canaries),
                verdict=s.get("verdict") or "",
                ask=s.get("ask"),
                base=s.get("base"),
                release=s.get("release"),
                page_path=s["page_path"],
                approval=approval(s),
                executable=_executable(s) if s.get("pending") else (),
                evidence=_evidence(listing, s["name"]),
            )
            for s in sorted(listing["steps"], key=lambda s: -s["step"])
        )
        tally = self._tallies.setdefault(name, ScoreTally())
        tally.update(reader)
        oldest_first = [r.name for r in reversed(releases)]
        counts = tuple(sorted(reader.data.counts().items()))
        return ScenarioView(name, releases, steps, counts, tally.means(oldest_first), canary)

    def view(self, name: str) -> ScenarioView | None:
        with self._lock:
            return self._views.get(name)

    def detail(self, selection: Selection) -> Detail | None:
        """What the right-hand side shows for ``selection`` (None: it is gone)."""
        with self._lock:
            view = self._views.get(selection.scenario)
            if view is None:
                return None
            if selection.kind == "candidate":
                step = view.step(selection.name)
                return None if step is None else self._step_detail(selection, view, step)
            if selection.kind == "release":
                release = view.release(selection.name)
                return None if release is None else self._release_detail(selection, view, release)
            return Detail(selection, "", summary=_summary(view))

    def _step_detail(self, selection: Selection, view: ScenarioView, step: StepRow) -> Detail:
        chain = self._reader(view.name).releases
        candidate = chain.candidate(step.step)
        base = next((r for r in view.releases if r.commit == candidate.base), None)
        base_files = chain.files(chain.get(base.number)) if base else {}
        record = candidate.record
        current = view.current
        note = ""
        if step.state == "pending" and current is not None and (base is None or base.name != current.name):
            note = f"{current.name} serves now: approving rebuilds this change on {current.name}"
        return Detail(
            selection,
            step.state,
            note=note,
            verdict=step.verdict,
            ask=step.ask,
            design=_text(record.get("design")),
            self_review=_self_review(record),
            checks=_checks(record),
            base=base.name if base else None,
            became=step.release,
            approval=step.approval,
            diffs=tuple(diff_files(base_files, chain.tree_files(candidate.tree))),
            replay=_replay(record),
            held=_held(record),
            in_use=in_use_lines(step.evidence) if step.evidence is not None else (),
        )

    def _release_detail(self, selection: Selection, view: ScenarioView, release: ReleaseRow) -> Detail:
        """A release: what it changed against the one before it, and the step that made it."""
        chain = self._reader(view.name).releases
        older = view.release(release_name(release.number - 1))
        base_files = chain.files(chain.get(older.number)) if older else {}
        files = chain.files(chain.get(release.number))
        record: Mapping[str, Any] = {}
        if release.step is not None:
            record = chain.candidate(release.step).record
        design = _text(record.get("design"))
        if design is None and release.operation == "rollback":
            design = f"a rollback: the content of {release.source} serves again"
        return Detail(
            selection,
            "current" if release.current else "published",
            verdict=release.verdict,
            ask=release.ask,
            design=design,
            self_review=_self_review(record),
            checks=_checks(record),
            base=older.name if older else None,
            approval=release.approval,
            diffs=tuple(diff_files(base_files, files)),
            replay=_replay(record),
            in_use=in_use_lines(release.evidence),
        )


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _summary(view: ScenarioView) -> str:
    current = view.current
    lines = [f"{current.name} serves {view.name}." if current else f"{view.name} has no release yet."]
    lines.append(f"{len(view.releases)} releases, {len(view.steps)} candidates.")
    pending = view.pending
    if pending:
        names = ", ".join(s.name for s in pending)
        lines.append(f"Waiting for a person: {names}.")
    lines.append(" · ".join(f"{kind}s {n}" for kind, n in view.counts))
    return "\n".join(lines)
