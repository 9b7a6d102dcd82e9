"""Scored samples: what the grpo recipe reads back from records and reports.

Each sample says whose score it carries (``source``): ``judge`` for a verdict the next-turn judge
stored (``metadata.source = "judge"``, with the judged ``session``), ``person`` for any other
report.  Which of them a step trains on is ``recipe.config.reward`` (:mod:`recipes.grpo.rewards`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from reef_core.sessions import is_explicit
from reef_core.store import Scenario

__all__ = ["Sample", "read_scored", "recent"]


@dataclass(frozen=True)
class Sample:
    record_id: str
    report_id: str
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    reward: float
    version: int
    #: the temperature it was sampled at: its log-probs are under that distribution, and the
    #: policy scores it at the same one (1 for a greedy answer, whose log-probs are the model's own)
    temperature: float = 1.0
    source: str = "person"  # whose score: "person" (a report) or "judge" (a next-turn verdict)
    session: str | None = None  # the session a judge's verdict is about

    @property
    def group(self) -> str:
        """Samples of one prompt form a group (GRPO compares answers to the same prompt)."""
        return hashlib.sha1(bytes(str(self.prompt_ids), "ascii")).hexdigest()[:16]


def read_scored(scenario: Scenario, after: str | None) -> Iterator[tuple[str, list[Sample]]]:
    """``(report id, samples)`` for each report after ``after``; records that the embedded
    model did not produce (no token ids) are skipped.  Reports are this node's own (its data
    ref), so two nodes never train on one; the records they name may be on any node's."""
    for report in scenario.own_data.iter_items(["report"], after=after):
        score = report.data.get("score")
        judged = not is_explicit(report.data)
        metadata = report.data.get("metadata") if judged else None
        session = metadata.get("session") if isinstance(metadata, dict) else None
        samples = []
        if isinstance(score, (int, float)) and not isinstance(score, bool):
            for ref in report.data.get("references") or []:
                try:
                    record = scenario.data.get(ref).data
                except Exception:
                    continue
                tokens = record.get("tokens")
                if not isinstance(tokens, dict) or not tokens.get("response_ids"):
                    continue
                if str(record.get("release") or "").startswith("c"):
                    continue  # a canary's answer: it judges the canary; its weights may never serve
                samples.append(
                    Sample(
                        record_id=ref,
                        report_id=report.id,
                        prompt_ids=tuple(tokens["prompt_ids"]),
                        response_ids=tuple(tokens["response_ids"]),
                        logprobs=tuple(tokens["logprobs"]),
                        reward=float(score),
                        version=int(tokens.get("weight_version") or 0),
                        temperature=float(tokens.get("temperature") or 1.0),
                        source="judge" if judged else "person",
                        session=session if isinstance(session, str) else None,
                    )
                )
        yield report.id, samples


def recent(samples: Sequence[Sample], version: int, staleness: int, least: int) -> list[Sample]:
    """The samples written by the releases at most ``staleness`` before ``version``, or, when
    those are fewer than ``least``, the newest ``least`` (``samples`` is oldest first).  Answers of
    releases long gone say little about a model that has moved since: the held-out check judges
    on these."""
    fresh = [s for s in samples if version - s.version <= staleness]
    return fresh if len(fresh) >= least else list(samples[-least:])
