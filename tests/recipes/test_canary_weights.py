"""A weights canary on the embedded model: grpo's gated candidate serves its share of sessions.

grpo learns from scored answers as ever (the demo's simulated user prefers answers that open
with "Sure"); with ``recipe.config.canary-share`` set, its first candidate that passes the held-out
check becomes a canary: the daemon answers the canary's share of new sessions (by session tag)
with the candidate's weights and says so (``x-reef-release-id: cN``, the record's ``release``),
and everyone else with the current release.  The sessions' scores decide.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from reef_core.daemon.context import DAEMON
from reef_core.learning.canary import arm_of, canary_key
from tests.recipes.test_tiny_and_grpo import _user

S = "wcanary"


def _canary(reef) -> dict:
    return httpx.get(f"{reef.url}/reef/scenarios/{S}/canary", timeout=30).json()["canary"]


def _ended(reef, name: str) -> bool:
    """Whether canary ``name`` has ended: the learner decides on a score in its own time, so a
    request sent after the test read "running" may already be served what it decided."""
    now = _canary(reef)
    return now is None or now["name"] != name or now["state"] != "running"


async def _teach_until_canary(reef, seconds: float) -> dict | None:
    user = _user(reef, S, seed=1)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            await asyncio.gather(user.teach_one_group(), user.teach_one_group())
            state = _canary(reef)
            if state is not None and state["state"] == "running":
                return state
    finally:
        await user.close()
    return None


def _session(reef, session: str) -> tuple[str, dict]:
    """One session's opening request: which release answered, and its record."""
    response = httpx.post(
        f"{reef.url}/v1/chat/completions",
        json={
            "model": "builtin:tiny",
            "messages": [{"role": "user", "content": "Any news?"}],
            "max_tokens": 8,
        },
        headers={"x-reef-scenario": S, "x-reef-tag-session": session},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    record = httpx.get(
        f"{reef.url}/reef/scenarios/{S}/records/{response.headers['x-reef-agent-record-id']}", timeout=30
    ).json()
    return response.headers["x-reef-release-id"], record


def _score(reef, record: dict, score: float) -> None:
    httpx.post(
        f"{reef.url}/reef/report",
        json={"references": [record["id"]], "score": score},
        headers={"x-reef-scenario": S},
        timeout=30,
    ).raise_for_status()


@pytest.mark.slow
def test_weights_canaries_better_promoted_worse_retired_equal_expired(tiny_reef):
    reef = tiny_reef(
        "--recipe", "grpo",
        "--recipe.config.groups-per-step", "1",
        "--recipe.config.canary-share", "0.5",
        "--recipe.config.canary-min-sessions", "5",
        "--recipe.config.canary-max-sessions", "60",
    )  # fmt: skip
    httpx.post(f"{reef.url}/reef/scenarios", json={"name": S}).raise_for_status()
    state = asyncio.run(_teach_until_canary(reef, 400))
    assert state is not None, "no candidate passed its checks in time"
    name, base = state["name"], state["base"]
    assert state["kind"] == "weights" and base == "v1"
    engine = reef.app[DAEMON].engine
    assert canary_key(S) in engine._served  # the candidate's weights, beside the release's

    for i in range(200):
        session = f"w{i}"
        served, record = _session(reef, session)
        expected = name if arm_of(name, session, 0.5) == "canary" else base
        if served != expected and _ended(reef, name):
            break  # it ended on the last score after the check below read it: asserted after the loop
        assert served == expected and record["release"] == expected
        if served == name:
            assert record["tokens"]["weight_version"] == int(base[1:]) + 1
        again, _ = _session(reef, session)  # the next request of the session: the same weights
        if again != served and _ended(reef, name):
            break
        assert again == served
        _score(reef, record, 1.0 if served == name else 0.0)
        if _ended(reef, name):
            break
    history = reef.reader(S).canary.history()
    ended = next(c for c in history if c["name"] == name)
    assert ended["state"] == "promoted" and ended["release"] == "v2", ended
    assert canary_key(S) not in engine._served  # the canary's own copy is gone
    assert engine.version(S) == 2  # everyone is served the promoted weights

    # the next candidate becomes the next canary, against v2; its sessions score it worse
    state = _canary(reef)
    if state["state"] != "running":
        state = asyncio.run(_teach_until_canary(reef, 400))
    assert state is not None and state["base"] == "v2", state
    worse = state["name"]
    for i in range(200):
        session = f"x{i}"
        served, record = _session(reef, session)
        _score(reef, record, 0.0 if served == worse else 1.0)
        if _canary(reef)["state"] != "running":
            break
    ended = next(c for c in reef.reader(S).canary.history() if c["name"] == worse)
    assert ended["state"] == "retired" and "release" not in ended, ended
    assert reef.reader(S).releases.tip().name == "v2" and engine.version(S) == 2
    assert canary_key(S) not in engine._served
    served, record = _session(
        reef, next(f"y{i}" for i in range(100) if arm_of(worse, f"y{i}", 0.5) == "canary")
    )
    assert served == "v2" and record["release"] == "v2"  # its share is served the release again

    # and one that scores the same runs out its 60 sessions without being published
    state = _canary(reef)
    if state["state"] != "running":
        state = asyncio.run(_teach_until_canary(reef, 400))
    assert state is not None and state["base"] == "v2", state
    equal, seen = state["name"], {"canary": 0, "control": 0}
    for i in range(400):
        session = f"z{i}"
        served, record = _session(reef, session)
        arm = "canary" if served == equal else "control"
        _score(reef, record, float(seen[arm] % 2))  # each arm: 0, 1, 0, 1, ...
        seen[arm] += 1
        if _canary(reef)["state"] != "running":
            break
    ended = next(c for c in reef.reader(S).canary.history() if c["name"] == equal)
    assert ended["state"] == "expired" and ended["decision"]["canary"]["n"] == 60, ended
    assert reef.reader(S).releases.tip().name == "v2"
