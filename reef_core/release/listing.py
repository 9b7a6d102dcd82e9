"""A scenario's releases and steps as one document: what the daemon answers and the CLI prints.

The same function serves ``GET /reef/scenarios/{s}/releases`` and the CLI reading a repository
directly, so the two can never disagree.  What a person reads before approving a pending step
(the question, the files that run code) is worded here too, once for ``reef promote``, ``reef
review`` and ``reef-pi``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reef_core.harness.tree import HarnessTree, TreeError, approval_changes
from reef_core.release.evidence import Evidence, scenario_evidence
from reef_core.release.pages import page_path
from reef_core.store import Candidate, Release, ReleaseChain, ScenarioReader, step_name
from reef_core.store.remotes import list_remotes
from reef_core.store.sync import remote_status

__all__ = [
    "approval_question",
    "code_notice",
    "executable_changes",
    "release_listing",
    "scenario_summary",
    "step_of_source",
]


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


def executable_changes(chain: ReleaseChain, candidate: Candidate, base: Release | None) -> list[str] | None:
    """The files of ``candidate`` that run code, against the release it was built on, one line
    each (:func:`~reef_core.harness.tree.approval_changes`); None when its tree is not a harness
    tree (a recipe that publishes something else)."""
    try:
        before = HarnessTree.from_files(chain.files(base)) if base is not None else None
        after = HarnessTree.from_files(chain.tree_files(candidate.tree))
    except TreeError:
        return None
    return approval_changes(before, after)


def code_notice(executable: Sequence[str] | None) -> str:
    """What a person reads before approving a step: the files that will run as them.

    ``executable`` is a step's ``executable`` from the listing; "" when it lists nothing.
    """
    if executable is None:
        return (
            "reef could not tell which of its files run code (its tree is not a harness tree): "
            "read its page before approving."
        )
    if not executable:
        return ""
    files = "\n".join(f"  {line}" for line in executable)
    return f"The harness runs this code with your privileges:\n{files}"


def approval_question(step: str, scenario: str, executable: Sequence[str] | None) -> str:
    """``Approve c5 of s? It runs extensions/format.ts with your privileges.``: the question a
    person answers before a promote, naming the code it runs (``executable`` as in :func:`code_notice`)."""
    question = f"Approve {step} of {scenario}?"
    if executable is None:
        return f"{question} It changes code that runs on this machine."
    running = [line.split(" (")[0] for line in executable if not line.endswith("(removed)")]
    if running:
        more = f" and {len(running) - 1} more" if len(running) > 1 else ""
        return f"{question} It runs {running[0]}{more} with your privileges."
    return f"{question} It removes code from the harness." if executable else question


def release_listing(reader: ScenarioReader, tokens: Sequence[str] = ()) -> dict[str, Any]:
    """The chain (newest first) with current marks and metrics, then every step with its state.

    A release a person approved names who and when (``approved_by``, ``approved_at``), and so
    does the step it came from; a pending step lists the files it adds or changes that run code
    (``executable``), which is what a person approves.  Page links carry a page key when
    ``tokens`` are given (a daemon with auth on).

    Each release row has its live ``evidence`` (:mod:`reef_core.release.evidence`), and the
    top-level ``evidence`` maps every release, newest first, then every other name that served
    records (a canary candidate ``cN``), to the same.
    """
    name = reader.name
    chain = reader.releases
    current = chain.tip()
    candidates: dict[int, Candidate] = {c.step: c for c in chain.candidates()}
    published: dict[int, Release] = {}
    by_commit: dict[str, Release] = {}
    evidence = scenario_evidence(reader)
    rows = []
    for release in chain:
        by_commit[release.commit] = release
        step = step_of_source(release.source)
        if step is not None:
            published.setdefault(step, release)
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
                "approved_by": release.approved_by,
                "approved_at": release.approved_at,
                "current": current is not None and release.commit == current.commit,
                "metrics": _metrics(record),
                "page_path": page_path(name, release.name, tokens),
                "evidence": evidence.get(release.name, Evidence(release.name)).to_json(),
            }
        )
    pending, rejected = set(chain.pending()), set(chain.rejected())
    steps = []
    for c in candidates.values():
        base, became = by_commit.get(c.base or ""), published.get(c.step)
        steps.append(
            {
                "step": c.step,
                "name": step_name(c.step),
                "verdict": c.verdict,
                "ask": c.ask,
                "base": base.name if base else None,
                "release": became.name if became else None,
                "approved_by": became.approved_by if became else None,
                "approved_at": became.approved_at if became else None,
                "metrics": _metrics(c.record),
                # the daemon's peak resident memory while the step ran (None: not measured)
                "peak_rss_bytes": c.record.get("peak_rss_bytes"),
                "pending": c.step in pending,
                "rejected_by_person": c.step in rejected,
                # only for what waits for a person: reading two trees per step costs too much
                "executable": executable_changes(chain, c, base) if c.step in pending else None,
                "page_path": page_path(name, c.step, tokens),
            }
        )
    shown = {row["release"]: row["evidence"] for row in rows}
    for other in sorted(set(evidence) - set(shown), key=_newest_first):
        shown[other] = evidence[other].to_json()
    return {"scenario": name, "releases": rows, "steps": steps, "evidence": shown}


def _newest_first(name: str) -> tuple[str, int]:
    """Candidates newest first (``c7`` before ``c3``), then any other name."""
    number = int(name[1:]) if name[1:].isdigit() else 0
    return (name[:1] if number else name, -number)


def scenario_summary(reader: ScenarioReader) -> dict[str, Any]:
    """One scenario in a listing: its item counts (every node's data ref), the data refs,
    current release, pending steps, and each git remote's state (last sync, what is not pushed)."""
    tip = reader.releases.tip()
    return {
        "name": reader.name,
        "counts": reader.data.counts(),
        "data_refs": reader.data.refs(),
        "release": tip.name if tip else None,
        "pending": reader.releases.pending(),
        "remotes": [remote_status(reader, remote) for remote in list_remotes(reader.path)],
    }
