"""A scenario's releases and steps as one document: what the daemon answers and the CLI prints.

The same function serves ``GET /reef/scenarios/{s}/releases`` and the CLI reading a repository
directly, so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reef_core.release.pages import page_path
from reef_core.store import Candidate, ScenarioReader

__all__ = ["release_listing", "scenario_summary", "step_of_source"]


def step_of_source(source: str | None) -> int | None:
    """The step a release was made from (``"candidate 5"`` → 5), or None."""
    if source and source.startswith("candidate ") and source[len("candidate ") :].isdigit():
        return int(source[len("candidate ") :])
    return None


def _metrics(record: dict[str, Any]) -> dict[str, float]:
    merged: dict[str, float] = {}
    for check in record.get("checks", []):
        merged.update(check.get("metrics") or {})
    merged.update(record.get("metrics") or {})
    return merged


def release_listing(reader: ScenarioReader, tokens: Sequence[str] = ()) -> dict[str, Any]:
    """The chain (newest first) with current marks and metrics, then every step with its state.

    Page links carry a page key when ``tokens`` are given (a daemon with auth on).
    """
    name = reader.name
    chain = reader.releases
    current = chain.tip()
    candidates: dict[int, Candidate] = {c.step: c for c in chain.candidates()}
    published: dict[int, str] = {}
    rows = []
    for release in chain:
        step = step_of_source(release.source)
        if step is not None:
            published.setdefault(step, release.name)
        record = candidates[step].record if step in candidates else {}
        rows.append(
            {
                "release": release.name,
                "number": release.number,
                "commit": release.commit,
                "operation": release.operation,
                "ask": release.ask,
                "verdict": release.verdict,
                "source": release.source,
                "step": step,
                "created_at": release.created_at,
                "current": current is not None and release.commit == current.commit,
                "metrics": _metrics(record),
                "page_path": page_path(name, release.name, tokens),
            }
        )
    pending, rejected = set(chain.pending()), set(chain.rejected())
    by_commit = {r["commit"]: r["release"] for r in rows}
    steps = [
        {
            "step": c.step,
            "name": f"c{c.step}",
            "verdict": c.verdict,
            "ask": c.ask,
            "base": by_commit.get(c.base or ""),
            "release": published.get(c.step),
            "metrics": _metrics(c.record),
            "pending": c.step in pending,
            "rejected_by_person": c.step in rejected,
            "page_path": page_path(name, c.step, tokens),
        }
        for c in candidates.values()
    ]
    return {"scenario": name, "releases": rows, "steps": steps}


def scenario_summary(reader: ScenarioReader) -> dict[str, Any]:
    """One scenario in a listing: its item counts, current release and pending steps."""
    tip = reader.releases.tip()
    return {
        "name": reader.name,
        "counts": reader.data.counts(),
        "release": tip.name if tip else None,
        "pending": reader.releases.pending(),
    }
