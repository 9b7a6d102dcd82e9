"""One release chain everywhere, under faults (issue 29, build item 6): three nodes on one file
remote, random events (publish by learning and by rollback, sync, the remote away and back,
SIGKILL in the middle of a sync or a publish, restarts, acknowledged records) and, after every
node synced, the invariants of ``chain_model.py`` (beside this file, which says what each
event does and what each invariant means).

* ``test_one_release_chain_everywhere``: five seeds of 200 events each.  A run stops at the
  first event after which an invariant broke; the failure is shrunk (delta debugging over the
  events, ``REEF_CHAIN_SHRINK_S`` seconds, 45 by default, 0 for none) and reported as the
  minimal sequence found, in the words :func:`chain_model.parse_events` reads, ready for
  ``MINIMAL`` below.  ``bench/sync.py --fault-events 2000 --fault-seeds 10`` runs longer ones.
* ``test_minimal_sequence``: the shortest sequences found so far, replayed exactly.

Why a seeded loop rather than hypothesis's stateful testing: every event costs real git
processes (a sync 30-70 ms, a check with its five syncs and four ``git fsck`` 150-250 ms), and
hypothesis shrinks by replaying, bounded only by its own five-minute cap, so a failing suite
would spend minutes there; and a SIGKILL that lands on a different instruction in a replay is a
``Flaky`` error to it.  Here the events are a pure function of the seed (printed with every
failure), a kill lands on a step of the operation (counted, or named once it struck) rather
than after some milliseconds, so a replay kills in the same place, and the shrinker has a time
budget and always appends ``back, check``, so any sublist of events is a whole test.

Sizing: the store API is driven in-process for every event but the kills, which run the
operation in a subprocess forked from one that has imported the store (about 50 ms a kill,
start to restart); no daemon is started.  200 events per seed run at 35-55 events a second on
2 idle cores (a check 0.15-0.25 s, a sync or publish 35-60 ms, an append 1 ms): 4-6 s a seed,
the file about 25 s (35 s beside another test run).  The cost per event grows with the history
(at 700 events and 140 releases a check takes 0.55 s), which bench/sync.py's longer runs show.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.store import chain_model as model

EVENTS = 200
SHRINK_S = float(os.environ.get("REEF_CHAIN_SHRINK_S", "45"))

# -- the bugs found (issue 29), each with the shortest sequence of events found to show it ------
#
# Found against sync.py and releases.py as committed in 4b3784c (the first two) and 416caff (the
# other two), and fixed in 2b23713 and 92bd5f2: the sequences pass now and stay as regression
# tests.  A kill names its step (``after:move_ref``) rather than counting steps, so that it lands
# in the same place when sync.py gains or loses steps elsewhere; a kill whose step no longer
# exists fails the test (see test_minimal_sequence) rather than passing it unstruck.
#
# While a bug is open its sequence is marked ``xfail(strict=True, raises=model.InvariantBroken)``
# with the bug as the reason: InvariantBroken is raised only when the sequence breaks the
# invariant named beside it, so any other failure fails the test outright, and once the fix
# lands the strict mark fails the suite until it is removed.  A seed that breaks an invariant
# through a known bug goes in KNOWN, marked the same way but not strict (a kill while a git
# command runs lands a little differently in each run).

LEASE_ON_TRACKING = (
    "fixed in 2b23713; was: a publish leased the remote's chain at its tracking ref, not at the "
    "release's parent: a sync killed after its fetch left the tracking ref at b's v1 and a's own "
    "v1, made while the remote was away, in place; a's next publish built v2 on that, leased at "
    "the tracking ref, which still matched, and forced a non-fast-forward: the remote's chain "
    "then held a's v1 while its tag v1 named b's"
)
TAG_NOT_PUSHED = (
    "fixed in 2b23713; was: a publish pushed only the new release's tag and a sync pushed no "
    "tag when the chains were equal, so v1, made while the remote was away, reached the remote "
    "as v2's parent without its tag, and every node that adopted the chain lacked it too"
)
SUPERSEDE_TORN = (
    "fixed in 92bd5f2; was: the supersede step moved the chain first and kept the superseded "
    "releases and fixed the tags after: killed in between, the node restarted on the remote's "
    "v1 with its tag v1 still naming its own v1, which was kept nowhere (repair_tags stopped at "
    "the first release that had a tag, whatever it named): two releases under one number"
)
ADOPTED_TAG_LOST = (
    "fixed in 92bd5f2; was: adopting the remote's chain created the adopted tags newest first, "
    "and repair_tags stopped at the first release that had one: a sync killed between v2's tag "
    "and v1's left v1 untagged on that node for good (later syncs saw equal chains and adopted "
    "no tag)"
)

MINIMAL = [
    pytest.param(
        "away\nlearn a\nback\nlearn b\nkill a sync at=after:_fetch delay=0\nlearn a",
        "one-commit-per-number",
        id="lease-on-tracking-ref",  # LEASE_ON_TRACKING
    ),
    pytest.param(
        "away\nlearn a\nback\nlearn a",
        "every-release-tagged",
        id="tag-of-a-release-made-away",  # TAG_NOT_PUSHED
    ),
    pytest.param(
        "learn a\naway\nlearn b\nback\nkill b sync at=after:move_ref delay=0",
        "one-commit-per-number",
        id="supersede-killed-midway",  # SUPERSEDE_TORN
    ),
    pytest.param(
        "learn c\nlearn c\nkill b sync at=after:create_ref_exclusive#2 delay=0",
        "every-release-tagged",
        id="adopted-tag-killed-midway",  # ADOPTED_TAG_LOST
    ),
]

#: seed -> the known bug it breaks an invariant through (none open)
KNOWN: dict[int, str] = {}
SEEDS = [
    pytest.param(
        seed,
        marks=[pytest.mark.xfail(strict=False, raises=model.InvariantBroken, reason=KNOWN[seed])]
        if seed in KNOWN
        else [],
    )
    for seed in range(5)
]


def test_a_seed_is_its_events_and_they_read_back_from_their_words():
    events = model.draw_events(7, EVENTS)
    assert events == model.draw_events(7, EVENTS)
    assert events != model.draw_events(8, EVENTS)
    assert model.parse_events("\n".join(map(str, events))) == events
    kinds = {event.kind for event in events}
    assert kinds == set(model.WEIGHTS)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_one_release_chain_everywhere(seed: int, tmp_path: Path, request: pytest.FixtureRequest):
    events = model.draw_events(seed, EVENTS)
    run = _play(events, tmp_path / "run")
    assert run.played == EVENTS + 2 or run.broken
    if not run.broken:
        return
    assert run.failed_at is not None
    minimal, last, replays = None, None, 0
    if SHRINK_S > 0 and request.node.get_closest_marker("xfail") is None:
        first = next(name for name in model.INVARIANTS if name in run.invariants)
        minimal, last, replays = model.shrink(
            run.resolved[: run.failed_at + 1], {first}, budget_s=SHRINK_S, root=tmp_path
        )
    raise model.InvariantBroken(model.report(seed, run, minimal, last, replays))


@pytest.mark.parametrize(("events", "invariant"), MINIMAL)
def test_minimal_sequence(events: str, invariant: str, tmp_path: Path):
    run = _play(model.parse_events(events), tmp_path / "run")
    assert not run.unstruck, f"these kills no longer find their step: {run.unstruck}\n" + "\n".join(run.log)
    if invariant in run.invariants:
        raise model.InvariantBroken(model.report(None, run, None, None, 0))
    assert not run.broken, model.report(None, run, None, None, 0)


def _play(events: list[model.Event], root: Path) -> model.Run:
    root.mkdir()
    chain = model.Model(root)
    try:
        return chain.play(events)
    finally:
        chain.close()
