"""The embedded model behind reef, and the grpo recipe learning from scores over HTTP."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest
import torch

from reef_cli.demo_user import DemoUser, parse_preference
from reef_core.daemon.context import DAEMON
from reef_core.models.tiny import corpus
from reef_core.models.tiny.checkpoint import state_fingerprint
from reef_core.models.tiny.tokenizer import encode, prompt_ids
from tests.conftest import LFS_CONFIG, git


def sdk(reef, scenario: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{reef.url}/v1",
        api_key="unused",
        max_retries=0,
        timeout=60,
        default_headers={"x-reef-scenario": scenario},
    )


def test_the_openai_sdk_chats_with_builtin_tiny_and_records_keep_token_ids(tiny_reef):
    reef = tiny_reef()
    client = sdk(reef, "chat")
    raw = client.chat.completions.with_raw_response.create(
        model="builtin:tiny",
        messages=[{"role": "user", "content": "How is the weather today?"}],
        max_tokens=24,
    )
    completion = raw.parse()
    text = completion.choices[0].message.content
    assert isinstance(text, str) and completion.usage.completion_tokens <= 24
    record = reef.reader("chat").data.get(raw.headers["x-reef-agent-record-id"]).data
    tokens = record["tokens"]
    assert len(tokens["response_ids"]) == len(tokens["logprobs"]) == completion.usage.completion_tokens
    assert all(lp <= 0 for lp in tokens["logprobs"]) and tokens["weight_version"] == 0
    chunks = list(
        client.chat.completions.create(
            model="builtin:tiny",
            messages=[{"role": "user", "content": "Tell me about the river."}],
            max_tokens=24,
            stream=True,
            seed=3,
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    receipt = chunks[-1].model_extra["reef"]["agent_record_id"]
    assert (
        reef.reader("chat").data.get(receipt).data["response"]["choices"][0]["message"]["content"] == streamed
    )
    again = client.chat.completions.create(
        model="builtin:tiny",
        messages=[{"role": "user", "content": "Tell me about the river."}],
        max_tokens=24,
        seed=3,
    )
    assert again.choices[0].message.content == streamed  # a seed fixes the sample


def _user(reef, scenario: str, seed: int = 0) -> DemoUser:
    return DemoUser(
        reef.url,
        scenario,
        parse_preference("starts-with:Sure"),
        corpus.train_prompts(seed=seed, n=200),
        corpus.heldout_prompts(seed=seed, n=16),
        seed=seed,
    )


async def _teach(user: DemoUser, *, seconds: float, releases: int) -> list[dict]:
    deadline = time.monotonic() + seconds
    rows: list[dict] = []
    while time.monotonic() < deadline:
        await asyncio.gather(user.teach_one_group(), user.teach_one_group())
        rows = await user.releases()
        if len(rows) >= releases:
            break
    return rows


@pytest.mark.slow
def test_grpo_over_http_raises_the_heldout_reward_and_publishes_lfs_checkpoints(tiny_reef):
    reef = tiny_reef("--recipe", "grpo")
    httpx.post(f"{reef.url}/reef/scenarios", json={"name": "learn"}).raise_for_status()

    async def run() -> tuple[float, float, list[dict]]:
        user = _user(reef, "learn")
        try:
            before = after = await user.heldout_score(samples_per_prompt=4)
            rows: list[dict] = []
            deadline = time.monotonic() + 100
            # teach in rounds of 4 releases until the held-out reward has risen by 0.3 (a
            # quiet machine gets there in about 10), at most 30 releases or 100 s
            while after < before + 0.3 and len(rows) < 30 and time.monotonic() < deadline:
                rows = await _teach(user, seconds=deadline - time.monotonic(), releases=len(rows) + 4)
                after = await user.heldout_score(samples_per_prompt=4)
                print(f"{len(rows)} releases: held-out {after:.2f}")
            return before, after, rows
        finally:
            await user.close()

    before, after, rows = asyncio.run(run())
    print(f"held-out reward {before:.2f} -> {after:.2f} over {len(rows)} releases")
    assert after >= before + 0.3
    assert rows[-1]["operation"] == "creation" and all(r["operation"] == "training" for r in rows[:-1])
    repo = reef.repo("learn")
    git("-C", repo, *LFS_CONFIG, "lfs", "fsck")
    listed = git("-C", repo, *LFS_CONFIG, "lfs", "ls-files", "--all").stdout
    assert listed.count("weights/model.safetensors") >= 2
    manifest = git("-C", repo, "show", "release:reef-release.json").stdout
    assert '"recipe": "grpo"' in manifest


@pytest.mark.slow
def test_a_candidate_that_lowers_the_heldout_score_is_rejected_and_serving_is_unchanged(tiny_reef):
    # gradient ascent with a large step: each candidate is pushed away from what the user likes
    reef = tiny_reef(
        "--recipe",
        "grpo",
        "--recipe.config.lr",
        "-0.003",
        "--recipe.config.heldout-min",
        "8",
        "--recipe.config.heldout-every",
        "2",
        "--recipe.config.heldout-tolerance",
        "0.0",
    )
    httpx.post(f"{reef.url}/reef/scenarios", json={"name": "bad"}).raise_for_status()
    probe = {
        "model": "builtin:tiny",
        "messages": [{"role": "user", "content": "What do you think?"}],
        "max_tokens": 32,
        "seed": 11,
    }
    headers = {"x-reef-scenario": "bad", "x-reef-capture": "false"}
    served_before = httpx.post(f"{reef.url}/v1/chat/completions", json=probe, headers=headers).json()

    async def run() -> None:
        user = _user(reef, "bad", seed=1)
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                await asyncio.gather(user.teach_one_group(), user.teach_one_group())
                steps = httpx.get(f"{reef.url}/reef/scenarios/bad/releases").json()["steps"]
                judged = [s for s in steps if "heldout_current" in s["metrics"]]
                if len(judged) >= 2:
                    return
        finally:
            await user.close()

    asyncio.run(run())
    listing = httpx.get(f"{reef.url}/reef/scenarios/bad/releases").json()
    judged = [s for s in listing["steps"] if "heldout_current" in s["metrics"]]
    assert judged and all(
        s["verdict"].startswith("rejected") and "heldout_score" in s["verdict"] for s in judged
    )
    # each was either estimated worse beyond the noise or moved too far from the scored answers
    # to be judged
    assert all(
        s["metrics"]["heldout_candidate"] < s["metrics"]["heldout_current"] - s["metrics"]["heldout_margin"]
        or s["metrics"]["heldout_effective"] < max(4.0, 0.1 * s["metrics"]["heldout_samples"])
        for s in judged
    )
    published = [r for r in listing["releases"] if r["operation"] == "training"]
    unjudged = [s for s in listing["steps"] if "heldout_current" not in s["metrics"]]
    # only steps taken before there was held-out data to judge by can have published
    made = {r["step"] for r in published}
    assert made <= {s["step"] for s in unjudged}
    # what is served is the current release (none of the rejected candidates), whatever published
    current = next((r for r in listing["releases"] if r["current"]), None)
    assert reef.app[DAEMON].engine.version("bad") == (current["number"] if current else 0)
    served_after = httpx.post(f"{reef.url}/v1/chat/completions", json=probe, headers=headers)
    if current is None:  # the base weights and the same seed sample the same answer
        assert (
            served_after.json()["choices"][0]["message"]["content"]
            == served_before["choices"][0]["message"]["content"]
        )


@pytest.mark.slow
def test_rollback_restores_the_old_weights(tiny_reef):
    reef = tiny_reef("--recipe", "grpo", "--recipe.config.groups-per-step", "1")
    httpx.post(f"{reef.url}/reef/scenarios", json={"name": "rb"}).raise_for_status()
    probe = {
        "model": "builtin:tiny",
        "messages": [{"role": "user", "content": "Any news about the market?"}],
        "max_tokens": 40,
        "seed": 5,
    }
    headers = {"x-reef-scenario": "rb", "x-reef-capture": "false"}

    def answer() -> str:
        return httpx.post(f"{reef.url}/v1/chat/completions", json=probe, headers=headers, timeout=30).json()[
            "choices"
        ][0]["message"]["content"]

    def served() -> tuple[str, float]:
        """The served weights' digest, and the log-prob they give a fixed continuation of the
        probe: what must change when training moves the weights (a sample need not)."""
        model, _ = reef.app[DAEMON].engine.snapshot("rb")
        with torch.no_grad():
            logprobs, _ = model.sequence_logprobs(
                [prompt_ids(probe["messages"], model.config.max_len - 40)],
                [encode("Sure, the market is up.")],
            )
        return state_fingerprint(model), float(logprobs.sum())

    base, base_weights = answer(), served()

    async def run() -> list[dict]:
        user = _user(reef, "rb", seed=2)
        try:
            return await _teach(user, seconds=200, releases=3)
        finally:
            await user.close()

    rows = asyncio.run(run())  # as many as the machine trains in its time: one is enough
    assert len(rows) >= 2 and rows[0]["operation"] == "training", rows
    trained_digest, trained_logprob = served()
    assert trained_digest != base_weights[0] and trained_logprob != base_weights[1]
    rolled = httpx.post(f"{reef.url}/reef/scenarios/rb/rollback", json={"release": "v1"})
    assert rolled.status_code == 200, rolled.text
    assert served() == base_weights
    assert answer() == base  # the same weights and seed sample the same answer
    latest = httpx.get(f"{reef.url}/reef/scenarios/rb/releases").json()["releases"][0]
    assert latest["operation"] == "rollback" and latest["source"] == "v1" and latest["current"]
