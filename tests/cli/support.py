"""What CLI tests share: invoking ``reef``, making receipts, and release-chain state built with
the real store API (beside a running daemon: publishing needs no writer lock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner, Result

from reef_cli.main import app
from reef_core.store import Candidate, Release, Store, build_tree
from tests.recipes.conftest import ROOT

__all__ = ["candidate", "chat", "demo_state", "publish", "reef", "releases_of"]

_runner = CliRunner()


def reef(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Result:
    return _runner.invoke(app, list(args), env=env, input=input)


def demo_state(tmp_path: Path) -> Path:
    """A demo's state directory whose model cache is the embedded model pretrained once for
    every test."""
    state = tmp_path / "demo"
    state.mkdir()
    cache = ROOT / ".cache" / "models"
    cache.mkdir(parents=True, exist_ok=True)
    (state / "models").symlink_to(cache)
    return state


def chat(
    daemon: Any, scenario: str = "s", text: str = "hi", *, anthropic: bool = False, token: str | None = None
) -> str:
    """One real exchange through the daemon; returns its receipt."""
    headers = {"x-reef-scenario": scenario}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    if anthropic:
        body: dict[str, Any] = {
            "model": "m",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": text}],
        }
        response = httpx.post(f"{daemon.url}/v1/messages", json=body, headers=headers, timeout=10)
    else:
        body = {"model": "m", "messages": [{"role": "user", "content": text}]}
        response = httpx.post(f"{daemon.url}/v1/chat/completions", json=body, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.headers["x-reef-agent-record-id"]


def publish(
    state_dir: Path,
    scenario: str,
    files: dict[str, bytes],
    *,
    operation: str = "creation",
    ask: str | None = None,
    verdict: str | None = None,
    source: str | None = None,
) -> Release:
    chain = Store(state_dir).reader(scenario)
    tip = chain.releases.tip()
    tree = build_tree(chain.handle.repo, files)
    return chain.releases.publish(
        tree,
        expected=tip.commit if tip else None,
        operation=operation,
        ask=ask,
        verdict=verdict,
        source=source,
    )


def candidate(
    state_dir: Path,
    scenario: str,
    files: dict[str, bytes],
    *,
    verdict: str,
    ask: str | None = None,
    pending: bool = False,
    metrics: dict[str, float] | None = None,
) -> Candidate:
    chain = Store(state_dir).reader(scenario)
    tree = build_tree(chain.handle.repo, files)
    made = chain.releases.create_candidate(
        tree, base=chain.releases.tip(), verdict=verdict, ask=ask, record={"metrics": metrics or {}}
    )
    if pending:
        chain.releases.mark_pending(made.step)
    return made


def releases_of(state_dir: Path, scenario: str) -> list[str]:
    return [r.name for r in Store(state_dir).reader(scenario).releases]
