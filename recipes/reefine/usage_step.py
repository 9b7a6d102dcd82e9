"""reefine's usage step: sessions followed between steps, their turns judged, and lessons
learned from them proposed as delta edits.

:class:`UsageStep` is the half of :class:`~recipes.reefine.recipe.ReefineRecipe` that learns from
usage (a mixin: the recipe holds the state, ``ReefineRecipe.__init__`` makes it):

* **between steps** (``_follow_sessions``): the session index (``usage.py``) is brought up to
  date from the data branch and, with ``judge-next-turn``, each new turn's previous answer is
  judged by the user's next message (``judge.py``); the verdict is stored as a report;
* **the batch** (``_usage_batch``): when ``usage-min-sessions`` sessions that are scored, not
  held out and have reports no earlier step used exist (``_eligible``), or on ``reef learn``;
* **the proposal** (``_propose_usage``): reflect on each session, curate the lessons into delta
  edits (``reflect.py``, ``curate.py``), apply them (``playbook.py``) and mark those that must
  wait for a person; every outcome, a skip too, is booked in the ledger (``_book_step``);
* **the rebuild** (``_rebase_usage``): a usage candidate whose base moved is made again from its
  recorded delta edits, each checked against what it changed (``_replayed``), never from its
  whole files.
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import TYPE_CHECKING, Any

from recipes.reefine import curate, reflect, usage
from recipes.reefine.judge import follow_sessions
from recipes.reefine.playbook import Edit, EditError, apply_edits, bullets
from recipes.reefine.proposer import StepSkipped
from recipes.reefine.structured import Unusable
from reef_core.errors import ConflictError
from reef_core.harness import HarnessTree, changed_entries, needs_approval
from reef_core.learning import Batch, Candidate, RecipeContext
from reef_core.learning.model import CountingModel
from reef_core.release.listing import step_of_source
from reef_core.store import Release, Scenario, ScenarioReader, build_tree

if TYPE_CHECKING:
    from recipes.reefine.recipe import ReefineConfig

__all__ = ["UsageStep", "step_adapters"]


class UsageStep:
    """Learning from usage, as :class:`~recipes.reefine.recipe.ReefineRecipe` does it."""

    # the recipe's state (``ReefineRecipe.__init__``)
    config: ReefineConfig
    context: RecipeContext
    sessions: usage.SessionIndex
    stats: dict[str, Any]  # what the recipe did between steps, for ``reef status``
    _book: usage.Ledger | None
    _learn: deque[str]

    if TYPE_CHECKING:  # the recipe's own, shared with the ask step

        def adapters(self, scenario: ScenarioReader) -> tuple[str, ...]: ...

        def _served(self, scenario: Scenario, release: str | None) -> HarnessTree | None: ...

        @staticmethod
        def _stamp(
            tree: HarnessTree, base: HarnessTree, ask: str, verdict: str, learned: dict[str, Any] | None
        ) -> HarnessTree: ...

    # -- between steps: the sessions, their turns judged -------------------------------------------

    def _follow_sessions(self, scenario: Scenario) -> None:
        """Bring the session index up to date; judge the new turns (``judge-next-turn``)."""
        model = self.context.model if self.config.judge_next_turn else None
        follow_sessions(scenario, self.sessions, model, self.stats, recipe="reefine")

    def _eligible(self) -> tuple[list[usage.Known], int]:
        """Sessions a usage step may learn from (best material first), and how many are held out."""
        assert self._book is not None
        ready, held = [], 0
        for known in self.sessions.sessions.values():
            view = known.view()
            if view.score is None:
                continue
            if usage.held_out(known.id, self.config.held_out_share):
                held += 1
                continue
            if any(r.get("id") not in self._book.consumed for r in known.reports):
                ready.append(known)
        ready.sort(key=lambda k: (not k.view().negative, k.view().score or 0.0, k.first or ""))
        return ready, held

    def _usage_batch(self) -> Batch | None:
        ready, held = self._eligible()
        ticket = self._learn.popleft() if self._learn else None
        if ticket is None and len(ready) < self.config.usage_min_sessions:
            return None
        chosen = ready[: self.config.usage_max_sessions]
        reports = sorted({str(r["id"]) for k in chosen for r in k.reports if r.get("id")})
        assert self._book is not None
        self._book.consumed.update(reports)
        items = (*reports, *([ticket] if ticket else []))
        why = f"reef learn ({ticket})" if ticket else f"{len(ready)} new scored sessions"
        payload = {"kind": "usage", "sessions": [k.id for k in chosen], "held_out": held, "ticket": ticket}
        return Batch(items, payload=payload, summary=f"usage: {len(chosen)} sessions, {why}")

    # -- a usage step --------------------------------------------------------------------------------

    def _propose_usage(self, scenario: Scenario, batch: Batch) -> Candidate:
        assert self.context.model is not None and self._book is not None
        payload = batch.payload
        chain = scenario.releases
        base = chain.tip()
        base_tree = HarnessTree.from_files(chain.files(base)) if base else HarnessTree.empty()
        model = CountingModel(self.context.model, self.config.usage_model_calls)
        did = usage.Stepped(held_out=int(payload.get("held_out", 0)))
        adapters = self.adapters(scenario)

        def skipped(why: str) -> StepSkipped:
            did.why = why
            record = {"learned_from": "usage", "usage": did.to_json(), "adapter": list(adapters)}
            self._book_step(batch, did)
            return StepSkipped(why, record=record)

        known = [
            self.sessions.sessions[name] for name in payload["sessions"] if name in self.sessions.sessions
        ]
        if not known:
            ready, held = len(self._eligible()[0]), payload.get("held_out", 0)
            raise skipped(f"nothing new to learn from: {ready} unused scored session(s), {held} held out")
        current = bullets(base_tree)
        for session in known:
            stuff = reflect.material(scenario, session, lambda name: self._served(scenario, name))
            view = stuff.session
            did.sessions.append(
                {
                    "session": session.id,
                    "score": view.score,
                    "scored_by": "person" if view.explicit else "judge",
                    "reports": [r.get("id") for r in view.reports],
                    "last_record": session.last,
                }
            )
            try:
                lessons, tags = reflect.reflect(model, stuff, current, retries=self.config.retries)
            except Unusable as exc:
                did.dropped.append(
                    {"session": session.id, "why": f"the reflection was unusable: {exc.message}"}
                )
                continue
            did.lessons += lessons
            did.rule_tags += tags
        live = [les for les in did.lessons if not les.dropped]
        if not live:
            raise skipped(f"skip: no usable lesson in {len(known)} session(s)")
        try:
            curated = curate.curate(
                model,
                base_tree,
                did.lessons,
                self._book,
                max_edits=self.config.max_edits,
                retries=self.config.retries,
            )
        except curate.Rewrite as exc:
            raise skipped(
                f"refused: the curator's answer rewrites the tree ({exc}); only delta edits are taken"
            ) from None
        except Unusable as exc:
            raise skipped(f"the curator's answer: {exc.message}") from None
        did.dropped += curated.dropped
        book = usage.Ledger(
            consumed=self._book.consumed,
            helpful=dict(self._book.helpful),
            harmful=dict(self._book.harmful),
            ids=self._book.ids,
        )
        book.add({"usage": {"rule_tags": did.rule_tags}, "batch": {"items": []}})
        edits = curated.edits + curate.harmful_removals(base_tree, book, curated.edits)
        if not edits:
            raise skipped(f"skip: the curator made no edit ({curated.why or 'no reason given'})")
        try:
            tree, applied = apply_edits(
                base_tree, edits, budget=self.config.rules_budget, used_ids=self._book.ids | set(current)
            )
        except EditError as exc:
            raise skipped(f"refused: {exc}") from None
        taught = curate.taught_bullets(base_tree, self._published_records(scenario))
        for edit in applied:
            entry = {
                **edit.to_json(),
                "supported": curate.edit_supported(edit, did.lessons, current),
                **_before(base_tree, current, edit),
            }
            reasons = curate.hold_reasons(edit, did.lessons, taught=taught, current=current)
            if reasons:
                did.held.append({**entry, "why_held": reasons, "evidence": _evidence(edit, did.lessons)})
            did.edits.append(entry)
        did.why = curated.why
        self._book_step(batch, did)
        lessons_used = sorted({i for e in applied for i in e.lessons})
        summary = _usage_summary(applied, len(known))
        learned = {
            "kind": "usage",
            "sessions": len(known),
            "reports": sum(len(k.reports) for k in known),
            "lessons": len(lessons_used),
        }
        tree = self._stamp(tree, base_tree, summary, "delivers", learned)
        record = {
            "learned_from": "usage",
            "ask": summary,
            "design": curated.why,
            "changes": [c.to_json() for c in changed_entries(base_tree, tree)],
            "usage": did.to_json(),
            "adapter": list(adapters),
            "proposer": "usage",
        }
        return self._learned(scenario, base_tree, tree, summary, record, model, held=bool(did.held))

    @staticmethod
    def _learned(
        scenario: Scenario,
        base_tree: HarnessTree,
        tree: HarnessTree,
        summary: str,
        record: dict[str, Any],
        model: Any,
        *,
        held: bool,
    ) -> Candidate:
        """A candidate learned from usage (this step's or GEPA's): ``tree`` built in the
        repository, waiting for a person when an edit is ``held`` or the tree changes code."""
        return Candidate(
            tree=str(build_tree(scenario.handle.repo, tree.files())),
            operation="learn",
            ask=summary,
            record=record,
            payload=model,
            needs_approval=held or needs_approval(base_tree, tree),
        )

    @staticmethod
    def _published_records(scenario: Scenario) -> list[dict[str, Any]]:
        """The step records of the releases on the chain, oldest first."""
        chain = scenario.releases
        steps = sorted({s for r in chain if (s := step_of_source(r.source)) is not None})
        return [chain.candidate(step).record for step in steps]

    def _book_step(self, batch: Batch, did: usage.Stepped) -> None:
        assert self._book is not None
        self._book.add({"usage": did.to_json(), "batch": {"items": list(batch.item_ids)}})

    # -- the chain moved: the same delta edits on the new tip -------------------------------------

    def _rebase_usage(self, scenario: Scenario, record: dict[str, Any], new_base: Release) -> str:
        """A usage step rebuilt on ``new_base`` by its delta edits, not its whole files: each add
        is made again (keeping its bullet id where it is free), each edit or removal only if what
        it changed is still as it was on the step's base.  Anything else is a conflict, raised
        naming what changed, so a concurrent change (another node's bullets, a person's rollback)
        is never reverted by a rebuild."""
        base = HarnessTree.from_files(scenario.releases.files(new_base))
        current = bullets(base)
        edits: list[Edit] = []
        added: set[str] = set()  # bullets the step itself adds: its later edits of them need no check
        for entry in (record.get("usage") or {}).get("edits") or []:
            edits.append(_replayed(entry, base, current, new_base.name, added))
            if entry.get("op") == "add" and entry.get("target") == "rule" and entry.get("id"):
                added.add(str(entry["id"]))
        if not edits:
            raise ConflictError("the step's record holds no delta edits to rebuild it from")
        used = (self._book.ids if self._book else set()) | set(current)
        try:
            tree, applied = apply_edits(base, edits, budget=self.config.rules_budget, used_ids=used)
        except EditError as exc:
            raise ConflictError(f"its edits no longer apply on {new_base.name}: {exc}") from None
        for wanted, done in zip(edits, applied, strict=True):
            if wanted.op == "add" and done.op != "add":
                raise ConflictError(
                    f"its new rule {wanted.text[:80]!r} is now a near-duplicate of {done.id} on "
                    f"{new_base.name}, which it would overwrite"
                )
        summary = str(record.get("ask") or "learned from usage")
        learned = {"kind": "usage"}
        return str(
            build_tree(scenario.handle.repo, self._stamp(tree, base, summary, "delivers", learned).files())
        )


def _replayed(
    entry: dict[str, Any], base: HarnessTree, current: dict[str, Any], tip: str, added: set[str]
) -> Edit:
    """One recorded delta edit as an edit of the tree ``base`` (release ``tip``), or a
    :class:`ConflictError` naming what changed under it (``added``: bullets the step added
    before this edit)."""
    op, target = str(entry.get("op")), str(entry.get("target"))
    text = str(entry.get("text") or "")
    if target == "rule":
        bullet_id = str(entry.get("id") or "")
        if op == "add":
            return Edit("add", "rule", text, id=bullet_id or None, name=entry.get("name"))
        if bullet_id in added:
            return Edit(op, "rule", text, id=bullet_id)
        bullet = current.get(bullet_id)
        if bullet is None:
            raise ConflictError(f"rule {bullet_id} that it {_verb(op)} is no longer in the rules of {tip}")
        if "before" in entry and bullet.text != entry["before"]:
            raise ConflictError(
                f"rule {bullet_id} that it {_verb(op)} changed meanwhile: it was {entry['before'][:120]!r}, "
                f"on {tip} it reads {bullet.text[:120]!r}"
            )
        return Edit(op, "rule", text, id=bullet_id)
    name = str(entry.get("name") or "")
    existing = base.get(target, name)
    if op == "add" and existing is not None:
        raise ConflictError(f"the {target} {name!r} it adds exists on {tip} already")
    if op != "add":
        if existing is None:
            raise ConflictError(f"the {target} {name!r} that it {_verb(op)} is no longer on {tip}")
        sha = hashlib.sha256(existing.content.encode()).hexdigest()
        if entry.get("before_sha256") not in (None, sha):
            raise ConflictError(f"the {target} {name!r} that it {_verb(op)} changed meanwhile on {tip}")
    return Edit(op, target, text, name=name)


def _verb(op: str) -> str:
    return {"edit": "edits", "remove": "removes"}.get(op, "adds")


def step_adapters(record: dict[str, Any]) -> list[str]:
    """The adapters a step's candidate was made for: its record's ``adapter``, a list since
    candidates are checked for every installed harness, one name in older records."""
    value = record.get("adapter")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(name) for name in value]
    return []


def _before(tree: HarnessTree, current: dict[str, Any], edit: Any) -> dict[str, Any]:
    """What an edit or removal changed, as it was on its base: a rebuild on a newer tip checks
    that it is still so (``rebase``)."""
    if edit.op == "add":
        return {}
    if edit.target == "rule":
        bullet = current.get(edit.id)
        return {"before": bullet.text} if bullet else {}
    entry = tree.get(edit.target, edit.name) if edit.name else None
    return {"before_sha256": hashlib.sha256(entry.content.encode()).hexdigest()} if entry else {}


def _evidence(edit: Any, lessons: list[reflect.Lesson]) -> list[dict[str, str]]:
    return [e for i in edit.lessons for e in lessons[i].evidence]


def _usage_summary(applied: list[Any], sessions: int) -> str:
    first = next((e for e in applied if e.op != "remove"), None)
    what = (
        f'{first.op} {first.target} "{first.text[:120]}"'
        if first
        else f"{applied[0].op} rule {applied[0].id}"
    )
    more = f" (+{len(applied) - 1} more)" if len(applied) > 1 else ""
    return f"learned from {sessions} session(s): {what}{more}"
