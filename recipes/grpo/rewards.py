"""Which scores a grpo step trains on (``recipe.config.reward``), and the judge that makes some.

* ``reports`` (the default): the reports people write (``/good``, ``/bad``, ``reef report``,
  ``POST /reef/report``), every one with a numeric score, as before; verdicts the next-turn judge
  stored (``metadata.source = "judge"``) are not trained on;
* ``judge``: only the judge's verdicts.  Between steps the recipe follows the harness's sessions
  and, when a session's next user message arrives, has the previous answer judged by it
  (reefine's judge and session index, :func:`recipes.reefine.judge.follow_sessions`): accept 1,
  correct 0.25, reject 0, stored as a report like reefine's, so ``git log data`` shows it;
* ``both``: a person's reports and the judge's verdicts.

A person outweighs the judge, as in :mod:`reef_core.sessions`: a verdict on a session a person
scored is never trained on (dropped when it is read, or while it waits for a step), and a
verdict on an answer a person scored is dropped.  One answer trains once: a person's report on
an answer a step already trained on from the judge's verdict is not trained on again.

The judge is the served model (``context.model``) unless ``recipe.config.judge-url`` names an
OpenAI-compatible endpoint (``judge-model``, and the key in the environment variable
``judge-api-key-env``): a 135M served model is a poor judge, so OpenClaw-RL asks a separate
one.  :class:`EndpointJudge` sends to it through reef's own upstream client.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from recipes.grpo.samples import Sample
from recipes.reefine.judge import follow_sessions
from recipes.reefine.usage import SessionIndex
from reef_core.errors import ConfigError, UpstreamRejected, UpstreamUnavailable
from reef_core.learning import RecipeContext
from reef_core.learning.model import ModelCall, ModelCaller
from reef_core.store import Scenario
from reef_core.upstream.client import UpstreamClient

if TYPE_CHECKING:
    from recipes.grpo.recipe import GrpoConfig

__all__ = ["REWARDS", "EndpointJudge", "Rewards", "check_settings"]

REWARDS = ("reports", "judge", "both")
_REMEMBERED = 65536  # answers remembered for the precedence rules (the oldest are forgotten)


def check_settings(values: dict[str, Any]) -> None:
    """Refuse bad reward settings (``values``: ``recipe.config``, typed), naming the setting."""
    reward = values.get("reward", "reports")
    if reward not in REWARDS:
        raise ConfigError(
            f"recipe.config.reward must be reports, judge or both (got {reward!r})",
            field="recipe.config.reward",
        )
    judge_keys = [key for key in ("judge_url", "judge_model", "judge_api_key_env") if key in values]
    if judge_keys and reward == "reports":
        shown = judge_keys[0].replace("_", "-")
        raise ConfigError(
            f"recipe.config.{shown} is for the judge, which only recipe.config.reward judge or both asks",
            field=f"recipe.config.{shown}",
        )
    url = values.get("judge_url", "")
    if judge_keys and not url:
        shown = judge_keys[0].replace("_", "-")
        raise ConfigError(
            f"recipe.config.{shown} names the judge endpoint's settings: set recipe.config.judge-url too",
            field=f"recipe.config.{shown}",
        )
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"recipe.config.judge-url must be an http:// or https:// URL (got {url!r})",
                field="recipe.config.judge-url",
            )
    variable = values.get("judge_api_key_env", "")
    if variable and variable not in os.environ:
        raise ConfigError(
            f"recipe.config.judge-api-key-env names {variable}, which is not set in the environment",
            field="recipe.config.judge-api-key-env",
        )


class EndpointJudge(ModelCaller):
    """An OpenAI-compatible endpoint as the judge, through reef's upstream client: one request per
    call, on an event loop of the call's own (a recipe runs on its worker thread).  The judge's
    schema goes as ``response_format``; an endpoint that answers 400 to it is asked once more
    without, and if that succeeds it is never sent one again (the judge parses text either way)."""

    def __init__(self, url: str, model: str, key_env: str = "") -> None:
        self.url, self.model, self.key_env = url, model, key_env
        self.plain = False  # the endpoint refused a response schema

    def answer(self, call: ModelCall) -> str:
        return asyncio.run(self._answer(call))

    async def _answer(self, call: ModelCall) -> str:
        system = [{"role": "system", "content": call.system}] if call.system else []
        body: dict[str, Any] = {
            "model": self.model,
            "messages": system + [{"role": m["role"], "content": m["content"]} for m in call.messages],
            "max_tokens": call.max_tokens,
            "stream": False,
        }
        client = UpstreamClient(self.url, timeout_s=call.timeout)
        try:
            if call.schema is not None and not self.plain:
                shaped = {**body, "response_format": {"type": "json_schema", "json_schema": call.schema}}
                try:
                    return await self._send(client, shaped, call.timeout)
                except UpstreamRejected as exc:
                    if exc.status != 400:
                        raise
                    answer = await self._send(client, body, call.timeout)
                    self.plain = True
                    return answer
            return await self._send(client, body, call.timeout)
        finally:
            await client.close()

    async def _send(self, client: UpstreamClient, body: dict[str, Any], timeout: float) -> str:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.key_env, "") if self.key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            reply = await asyncio.wait_for(
                client.request(
                    "POST", "/v1/chat/completions", headers=headers, body=json.dumps(body).encode()
                ),
                timeout,
            )
        except TimeoutError as exc:
            raise UpstreamUnavailable(
                f"the judge at {client.name} did not answer within {timeout:.0f}s"
            ) from exc
        try:
            content = json.loads(reply.body)["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise UpstreamUnavailable(f"the judge at {client.name} answered no chat message") from exc
        return content if isinstance(content, str) else ""


class Rewards:
    """The reward setting at work: the judge between steps, and which samples count."""

    def __init__(self, config: GrpoConfig, context: RecipeContext, stats: dict[str, Any]) -> None:
        self.mode = config.reward
        self.context = context
        self.stats = stats
        #: the sessions followed for the judge (``judge`` and ``both``; none for ``reports``)
        self.sessions = SessionIndex() if self.mode != "reports" else None
        self.endpoint = (
            EndpointJudge(config.judge_url, config.judge_model, config.judge_api_key_env)
            if config.judge_url
            else None
        )
        self._person: dict[str, None] = {}  # answers a person scored
        self._judge_trained: dict[str, None] = {}  # answers a step trained on from a verdict
        if self.sessions is not None:
            stats.update({"judged": 0, "judge_failures": 0, "judge_seconds": [], "judge_not_trained": 0})

    def follow(self, scenario: Scenario) -> None:
        """Judge the sessions' new turns (``judge`` and ``both``): each verdict is stored as a report."""
        if self.sessions is not None:
            model = self.endpoint if self.endpoint is not None else self.context.model
            follow_sessions(scenario, self.sessions, model, self.stats, recipe="grpo")

    def admit(self, samples: Iterable[Sample]) -> list[Sample]:
        """Of a report's samples, those the setting trains on (the module docstring)."""
        kept = []
        for sample in samples:
            if sample.source == "judge":
                if self.mode == "reports" or self._outweighed(sample):
                    self._not_trained()
                    continue
            elif self.mode == "judge":
                continue
            elif sample.record_id in self._judge_trained:
                continue  # one answer trains once
            elif self.mode == "both":
                _remember(self._person, sample.record_id)
            kept.append(sample)
        return kept

    def kept(self, waiting: list[Sample]) -> list[Sample]:
        """``waiting`` less the judge's verdicts a person has outweighed since they were read."""
        if self.sessions is None:
            return waiting
        kept = [s for s in waiting if s.source != "judge" or not self._outweighed(s)]
        for _ in range(len(waiting) - len(kept)):
            self._not_trained()
        return kept

    def trained(self, samples: Iterable[Sample]) -> dict[str, int]:
        """Book the samples a step trains on; how many scores came from the judge and from people."""
        counts = {"judge": 0, "person": 0}
        for sample in samples:
            counts["judge" if sample.source == "judge" else "person"] += 1
            if sample.source == "judge":
                _remember(self._judge_trained, sample.record_id)
        return counts

    def _outweighed(self, sample: Sample) -> bool:
        session = sample.session
        return sample.record_id in self._person or (
            self.sessions is not None and session is not None and self.sessions.explicitly_scored(session)
        )

    def _not_trained(self) -> None:
        self.stats["judge_not_trained"] = self.stats.get("judge_not_trained", 0) + 1


def _remember(seen: dict[str, None], key: str) -> None:
    seen[key] = None
    if len(seen) > _REMEMBERED:
        del seen[next(iter(seen))]
