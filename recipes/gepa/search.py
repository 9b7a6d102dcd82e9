"""One GEPA run inside one step: parents from the archive, one component mutated at a time,
minibatch acceptance, validation of what was accepted, within the step's model calls and time.

Each iteration (GEPA's reflective mutation proposer, arXiv 2507.19457):

1. **parent**: drawn from the archive by its Pareto fronts (``archive.py``);
2. **component**: the parent's next one, round robin over the components (rules files, skills);
3. **minibatch**: ``minibatch-size`` training sessions (``archive.Minibatches``).  The parent
   is scored on them; when none of them is failing (the seed: a session whose recorded score is
   below 1; any other member: a session where it did not beat the release) the iteration stops
   there (GEPA's ``skip_perfect_score``);
4. **mutation**: the model rewrites the component, reading the minibatch's sessions
   (``mutate.py``).  A text left as it was, a tree that is no longer well formed, and a text the
   screens refuse (``reef_core.release.screens``: it is never sent to the model as instructions,
   and its record is redacted) end the iteration;
5. **acceptance**: the child is scored on the same minibatch; it is accepted only when its sum
   is strictly above the parent's (GEPA's ``StrictImprovementAcceptance``).  An accepted child
   is scored on every validation session and joins the archive; a rejected one is dropped.

**Scores** come from the replay gate's machinery (``recipes/reefine/replay.py``): ``replay.gate``
sends a session's opening task to the served model with the current release's tree and with the
member's, and the pairwise judge compares the answers in both orders against the session's
feedback.  Its table says, per session, win (1.0), tie (0.5) or loss (0.0); its sign test is not
used here.  The seed is the current release: against itself it ties, 0.5, without a call.  A
member's scores are kept, so no (member, session) pair is replayed twice.  Each replayed
session costs four calls (two answers, two verdicts).

**Budget**: every call goes through the step's ``CountingModel``.  An iteration starts only
when the calls it may need at most (the parent's minibatch, the mutation with its retries, the
child's minibatch, the validation sessions) are left, and before half of ``step-seconds`` has
passed (the checks and publishing need the rest).  A judge or a mutation that stays unusable
ends its iteration; running out of calls ends the run; neither is an error of the step.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from recipes.gepa.archive import Archive, Member, Minibatches
from recipes.gepa.mutate import mutate
from recipes.reefine import replay
from recipes.reefine.reflect import Material
from recipes.reefine.structured import Unusable
from reef_core.harness import Entry, HarnessTree
from reef_core.learning.model import BudgetExhausted, CountingModel
from reef_core.release.screens import redact_credentials, screen_text

__all__ = ["SCORES", "Limits", "Run", "Search", "Session"]

#: a replayed session's result as a member's score on it
SCORES = {"win": 1.0, "tie": 0.5, "loss": 0.0}
_ANSWER_CHARS = 600  # of a replayed answer, in the mutation's prompt


@dataclass(frozen=True)
class Session:
    """A recorded session GEPA trains or validates on."""

    id: str
    case: replay.ReplayCase
    served: HarnessTree | None  # the release that served it (its rules come out of the prompt)
    material: Material  # what the reflector of a usage step reads of it
    score: float  # its recorded score (the person's, else the judge's)


@dataclass
class Run:
    """What a run did, for the step record."""

    archive: Archive
    mutations: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = ""


@dataclass(frozen=True)
class Limits:
    """How far a run may go (``recipe.config``; the model's limit is the step's calls)."""

    iterations: int
    minibatch_size: int
    seed: int
    max_chars: int  # of a component's new text
    retries: int  # an unusable answer sent back this often
    max_tokens: int  # of the mutation's answer
    deadline: float  # time.monotonic() after which no iteration starts


@dataclass
class Search:
    """One run from ``base`` (the current release's tree) over ``components`` (kind, name);
    ``render(case, served, tree)`` is the system prompt of ``case`` with ``tree`` in it (the
    adapter's ``prompt_context``)."""

    model: CountingModel
    base: HarnessTree
    components: list[tuple[str, str]]
    train: list[Session]
    validation: list[Session]
    render: Callable[[replay.ReplayCase, HarnessTree | None, HarnessTree], str]
    limits: Limits

    def __post_init__(self) -> None:
        self.sessions = {s.id: s for s in [*self.train, *self.validation]}
        self.val = [s.id for s in self.validation]
        self.rng = random.Random(self.limits.seed)
        self.batches = Minibatches([s.id for s in self.train], self.limits.minibatch_size, self.rng)
        self.outcome = Run(Archive(Member(0, self.base, scores=dict.fromkeys(self.val, SCORES["tie"]))))
        self.replayed: dict[tuple[int, str], dict[str, Any]] = {}  # (member, session) -> table row

    def run(self) -> Run:
        run = self.outcome
        for iteration in range(1, self.limits.iterations + 1):
            if time.monotonic() > self.limits.deadline:
                run.stopped = "half of step-seconds had passed"
                break
            parent = run.archive.select(self.rng)
            component = self.components[parent.next_component % len(self.components)]
            parent.next_component += 1
            batch = self.batches.next()
            fresh = 0 if parent.id == 0 else sum((parent.id, i) not in self.replayed for i in batch)
            need = replay.CALLS_PER_SESSION * (fresh + len(batch) + len(self.val)) + self.limits.retries + 1
            if self.model.calls + need > self.model.limit:
                left = self.model.limit - self.model.calls
                run.stopped = f"the step's model calls: {left} left, an iteration may need {need}"
                break
            entry: dict[str, Any] = {
                "iteration": iteration,
                "parent": parent.id,
                "component": Entry(*component, "").path,
                "minibatch": batch,
                "accepted": False,
            }
            run.mutations.append(entry)
            try:
                entry["why"] = self.iterate(entry, parent, component, batch)
            except BudgetExhausted as exc:
                entry["why"] = run.stopped = f"the model calls ran out: {exc.message}"
                break
        else:
            run.stopped = f"all {self.limits.iterations} iteration(s) (recipe.config.iterations)"
        return run

    def iterate(
        self, entry: dict[str, Any], parent: Member, component: tuple[str, str], batch: list[str]
    ) -> str:
        """One mutation of ``component`` of ``parent``, tried on ``batch``; fills ``entry`` and
        returns why it went as it did."""
        kind, name = component
        try:
            before = self.scores(parent, batch)
        except Unusable as exc:
            return f"the judge's answers on the parent were unusable: {exc.message}"
        entry["parent_scores"] = [before[i] for i in batch]
        failing = [i for i in batch if (self.sessions[i].score if parent.id == 0 else before[i]) < 1.0]
        if not failing:
            return "skipped: the parent does every session of the minibatch well already"
        old = parent.tree.get(kind, name)
        text = old.content if old is not None else ""
        try:
            new, why = mutate(
                self.model,
                entry["component"],
                text,
                [self.shown(parent, i) for i in batch],
                max_chars=self.limits.max_chars,
                retries=self.limits.retries,
                max_tokens=self.limits.max_tokens,
            )
        except Unusable as exc:
            return f"the mutation's answer was unusable: {exc.message}"
        entry["text"], entry["model_why"] = redact_credentials(new), why
        if new.strip() == text.strip():
            return "the mutation left the text as it was"
        hits = screen_text(new, where=entry["component"])
        if hits:
            found = ", ".join(sorted({h.rule for h in hits}))
            return f"refused by the screens ({found}): never tried, never published"
        entries = dict(parent.tree.entries)
        entries[component] = Entry(kind, name, new)
        tree = HarnessTree(entries, parent.tree.manifest)
        problems = tree.problems()
        if problems:
            return "the new text is not well formed: " + "; ".join(problems[:3])
        child = Member(
            len(self.outcome.mutations), tree, parent.id, entry["component"], len(self.outcome.mutations) - 1
        )
        child.next_component = parent.next_component
        try:
            after = self.scores(child, batch)
        except Unusable as exc:
            return f"the judge's answers on the child were unusable: {exc.message}"
        entry["child_scores"] = [after[i] for i in batch]
        old_sum, new_sum = sum(before.values()), sum(after.values())
        if new_sum <= old_sum:
            return f"rejected: {new_sum:g} on the minibatch is not above the parent's {old_sum:g}"
        try:
            child.scores = self.scores(child, self.val)
        except Unusable as exc:
            return (
                f"accepted on the minibatch; the judge's answers on validation were unusable: {exc.message}"
            )
        self.outcome.archive.add(child)
        entry.update(accepted=True, child=child.id, validation=round(child.mean, 4))
        return f"accepted: {new_sum:g} on the minibatch is above the parent's {old_sum:g}"

    def scores(self, member: Member, ids: list[str]) -> dict[str, float]:
        """``member``'s score on each of ``ids``, replaying the sessions not replayed for it yet."""
        if member.id == 0:
            return dict.fromkeys(ids, SCORES["tie"])
        todo = [i for i in ids if (member.id, i) not in self.replayed]
        if todo:

            def prompt(case: replay.ReplayCase, side: str) -> str:
                tree = self.base if side == "current" else member.tree
                return self.render(case, self.sessions[case.session].served, tree)

            # only the gate's table is read: at level 0.5, one session is enough for it to replay
            _, _, table = replay.gate(
                self.model,
                [self.sessions[i].case for i in todo],
                render=prompt,
                confidence=0.5,
                level=0.5,
                max_calls=replay.CALLS_PER_SESSION * len(todo),
                retries=self.limits.retries,
            )
            for row in table["table"]:
                self.replayed[(member.id, row["session"])] = row
        return {i: SCORES[self.replayed[(member.id, i)]["result"]] for i in ids}

    def shown(self, parent: Member, session: str) -> dict[str, Any]:
        """What the mutation reads of one session of the minibatch."""
        stuff = self.sessions[session]
        out: dict[str, Any] = {"session": session, "score": stuff.score, "recorded": stuff.material.quoted()}
        row = self.replayed.get((parent.id, session))
        if row is not None:
            out["tried_again"] = {
                "answer": row["candidate"][:_ANSWER_CHARS],
                "against_the_release": row["result"],
                "judge": [v["reason"] for v in row["verdicts"]],
            }
        return out
