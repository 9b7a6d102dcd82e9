"""GEPA's archive: every candidate kept, its validation scores, and the Pareto front per session.

A member is one harness tree: the seed (the current release, member 0) or a child made by one
reflective mutation of one component of its parent.  Each member that entered the archive was
scored on every validation session (``search.py``: the pairwise replay judge against the
current release, 1 a win, 0.5 a tie, 0 a loss; the seed ties itself, 0.5 everywhere).

**The front** of a validation session is the set of members with the best score on it.  A
member is *dominated* when every front it is on also holds another member that is not
dominated; dominated members are taken out one at a time, the lowest mean first (GEPA's
``remove_dominated_programs``).  **A parent** is drawn with probability proportional to the
number of fronts the member is on after that: a member that is best on some session keeps being
tried even when its mean is not the highest (GEPA's ``ParetoCandidateSelector``).

**The best** member is the one with the highest mean validation score; on a tie the earlier
member, so the seed stays best unless a child beats it strictly (the publish rule, ``recipe.py``).

:class:`Minibatches` hands out training sessions a few at a time, each epoch in a new shuffled
order, the last batch of an epoch filled up with the sessions used least that it does not hold
(GEPA's ``EpochShuffledBatchSampler``, without its repeats inside one batch).

Pure: no model, no git.  Written for reef from the GEPA paper and the ``gepa`` package's
strategies (0.1.4), not copied from it.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from reef_core.harness import HarnessTree

__all__ = ["Archive", "Member", "Minibatches"]


@dataclass
class Member:
    id: int
    tree: HarnessTree
    parent: int | None = None
    component: str | None = None  # the path its mutation rewrote (None: the seed)
    mutation: int | None = None  # its index in the step's list of mutations
    scores: dict[str, float] = field(default_factory=dict)  # validation session -> score
    next_component: int = 0  # round robin: the component its next child rewrites

    @property
    def mean(self) -> float:
        return sum(self.scores.values()) / len(self.scores) if self.scores else 0.0


class Archive:
    def __init__(self, seed: Member) -> None:
        self.members = [seed]

    def add(self, member: Member) -> None:
        self.members.append(member)

    def fronts(self) -> dict[str, set[int]]:
        """Per validation session, the members with the best score on it."""
        sessions = sorted({s for m in self.members for s in m.scores})
        out = {}
        for session in sessions:
            scored = [m for m in self.members if session in m.scores]
            top = max(m.scores[session] for m in scored)
            out[session] = {m.id for m in scored if m.scores[session] == top}
        return out

    def undominated(self) -> dict[str, set[int]]:
        """The fronts without the dominated members (see the module docstring)."""
        fronts = self.fronts()
        means = {m.id: m.mean for m in self.members}
        on_a_front = sorted({i for front in fronts.values() for i in front}, key=lambda i: (means[i], i))
        out: set[int] = set()
        removed = True
        while removed:
            removed = False
            for member in on_a_front:
                if member in out:
                    continue
                others = set(on_a_front) - out - {member}
                if all(front & others for front in fronts.values() if member in front):
                    out.add(member)
                    removed = True
                    break
        return {session: front - out for session, front in fronts.items()}

    def select(self, rng: random.Random) -> Member:
        """A parent, drawn in proportion to the fronts it is on (the seed when none has scores)."""
        counts = Counter(i for front in self.undominated().values() for i in front)
        if not counts:
            return self.members[0]
        ids = sorted(counts)
        chosen = rng.choices(ids, weights=[counts[i] for i in ids])[0]
        return self.members[chosen]

    def best(self) -> Member:
        """The highest mean validation score; the earliest member on a tie."""
        return max(self.members, key=lambda m: (m.mean, -m.id))

    def to_json(self) -> list[dict[str, Any]]:
        fronts = self.undominated()
        counts = Counter(i for front in fronts.values() for i in front)
        return [
            {
                "id": m.id,
                "parent": m.parent,
                "component": m.component,
                "mutation": m.mutation,
                "scores": dict(sorted(m.scores.items())),
                "mean": round(m.mean, 4),
                "fronts": counts.get(m.id, 0),
            }
            for m in self.members
        ]


class Minibatches:
    """Training sessions, ``size`` at a time (see the module docstring)."""

    def __init__(self, sessions: list[str], size: int, rng: random.Random) -> None:
        self.sessions = list(sessions)
        self.size = min(size, len(sessions))
        self.rng = rng
        self.used: Counter[str] = Counter()
        self.queue: list[str] = []

    def next(self) -> list[str]:
        if not self.sessions:
            return []
        if len(self.queue) < self.size:
            order = list(self.sessions)
            self.rng.shuffle(order)
            tail = order[len(order) - len(order) % self.size :]  # the epoch's last, short batch
            least = sorted((s for s in self.sessions if s not in tail), key=lambda s: (self.used[s], s))
            order += least[: (-len(order)) % self.size]
            self.queue = order
        batch, self.queue = self.queue[: self.size], self.queue[self.size :]
        self.used.update(batch)
        return batch
