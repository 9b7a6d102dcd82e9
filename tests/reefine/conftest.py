"""A reefine daemon on a loopback port, in front of the scripted upstream.

The scripted upstream plays every model part of a step, in order: the proposer, its
self-review, the served model that answers the real pi during the health check, and the
reviewer.  The helpers below write those answers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daemon.conftest import RunningReef
from tests.fakes.upstream import ScriptedUpstream, Text
from tests.reefine.pi import require_pi


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        yield server


@pytest.fixture
def reefine(tmp_path: Path, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch):
    """Start reefine daemons (``--recipe.name reefine``); each is stopped after the test."""
    monkeypatch.setenv("REEF_PI", str(require_pi().path))
    started: list[RunningReef] = []

    def make(*flags: str, env: dict[str, str] | None = None) -> RunningReef:
        reef = RunningReef(
            tmp_path / f"reef{len(started)}",
            "--recipe.name",
            "reefine",
            "--inference.upstream-url",
            upstream.url,
            "--inference.upstream-model",
            "scripted-model",
            *flags,
            env=env,
        )
        started.append(reef.start())
        return reef

    yield make
    for reef in started:
        reef.stop()


def skill(name: str, text: str, op: str = "create") -> dict[str, Any]:
    return {
        "op": op,
        "kind": "skill",
        "name": name,
        "content": f"---\nname: {name}\ndescription: Use when {text.lower()}\n---\n{text}\n",
    }


def rule(name: str, text: str) -> dict[str, Any]:
    return {"op": "create", "kind": "rule", "name": name, "content": text + "\n"}


def extension(name: str) -> dict[str, Any]:
    code = (
        'import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";\n'
        "export default function (pi: ExtensionAPI) {\n"
        f'  pi.registerCommand("{name}", {{ description: "say hi", handler: async () => {{}} }});\n'
        "}\n"
    )
    return {"op": "create", "kind": "extension", "name": name, "content": code}


def proposal(*changes: dict[str, Any], design: str = "One entry that does what was asked.") -> Text:
    return Text(json.dumps({"design": design, "changes": list(changes)}))


DELIVERS = Text('{"verdict": "delivers", "missing": ""}')
HEALTHY = Text("READY")
APPROVE = Text('{"implements_ask": true, "unrelated_changes": false, "reason": "it does what was asked"}')
REFUSE = Text(
    '{"implements_ask": false, "unrelated_changes": false, "reason": "it changes nothing relevant"}'
)


def step(*changes: dict[str, Any]) -> tuple[Text, ...]:
    """The four answers of a step that passes: proposal, self-review, health, reviewer."""
    return (proposal(*changes), DELIVERS, HEALTHY, APPROVE)


def ask(
    reef: RunningReef, scenario: str, text: str, *, token: str | None = None, **extra: Any
) -> httpx.Response:
    return httpx.post(
        f"{reef.url}/reef/train", json={"text": text, **extra}, headers=_headers(scenario, token)
    )


def _headers(scenario: str, token: str | None) -> dict[str, str]:
    return {"x-reef-scenario": scenario} | ({"Authorization": f"Bearer {token}"} if token else {})


def settle(
    reef: RunningReef, scenario: str, ask_id: str, timeout: float = 90, *, token: str | None = None
) -> dict[str, Any]:
    """Follow an ask's progress until it settles; returns the last progress document."""
    deadline = time.monotonic() + timeout
    while True:
        progress = httpx.get(
            f"{reef.url}/reef/harness/requests/{ask_id}/progress", headers=_headers(scenario, token)
        ).json()
        if progress["state"] == "settled":
            return progress
        if time.monotonic() > deadline:
            raise TimeoutError(f"ask {ask_id} still {progress['state']} after {timeout}s")
        time.sleep(0.05)


def evolve(reef: RunningReef, scenario: str, text: str, *, token: str | None = None) -> dict[str, Any]:
    """Ask, and follow the ask until it settles (with ``token`` as the bearer, when given)."""
    response = ask(reef, scenario, text, token=token)
    assert response.status_code == 200, response.text
    return settle(reef, scenario, response.json()["agent_record_id"], token=token)
