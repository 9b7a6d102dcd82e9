"""A simulated user with a hidden preference, who talks to reef only through its public HTTP API.

It asks questions, scores each answer by a rule reef never sees (say, "starts with Sure"),
reports the scores on the receipts, and measures how well the served model pleases it on
held-out prompts (with ``x-reef-capture: false``, so measuring never feeds training).

With ``sessions=True`` every answer it is taught on is asked in a session of its own (a fresh
``x-reef-tag-session``: eight people asking the same question, not one person asking eight
times), so a canary release answers its share of those sessions and their scores compare it
with the release.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from reef_core.errors import InvalidInput

__all__ = ["DemoUser", "Preference", "parse_preference", "requests"]

# What people ask a chat model for: "Sure" is a natural opening for these, which SmolLM2-135M
# takes about one time in ten (the embedded model's prompts, statements about its toy world,
# almost never).  The last quarter of the things asked for are held out.
_ASKS = ("Can you recommend {}?", "Could you suggest {}?", "Can you give me {}?", "Would you find me {}?")
_THINGS = (
    "a book about history",
    "a recipe for bread",
    "a name for my dog",
    "a good movie for tonight",
    "a gift for my sister",
    "a song for a road trip",
    "a game for a rainy day",
    "a plant for my office",
    "a hobby I can start at home",
    "a quick breakfast",
    "a title for my essay",
    "a place to visit in spring",
    "a snack for a long hike",
    "a way to learn French",
    "a board game for four people",
    "a podcast about science",
    "a theme for a birthday party",
    "a color for my bedroom",
    "a dessert for a dinner party",
    "a warm-up before running",
    "a name for my new cat",
    "a story to read to a child",
    "a simple dinner for two",
    "a way to relax after work",
)
_HELD_OUT = len(_THINGS) * 3 // 4


def requests(seed: int = 0, n: int = 200, *, held_out: bool = False) -> list[str]:
    """Requests for things (held-out ones ask for things the training ones never do)."""
    things = _THINGS[_HELD_OUT:] if held_out else _THINGS[:_HELD_OUT]
    every = [ask.format(thing) for thing in things for ask in _ASKS]
    random.Random(seed).shuffle(every)
    return [every[i % len(every)] for i in range(n)]


@dataclass(frozen=True)
class Preference:
    description: str
    score: Callable[[str], float]


def parse_preference(spec: str) -> Preference:
    """``starts-with:Sure`` or ``shorter-than:40``."""
    kind, _, arg = spec.partition(":")
    if kind == "starts-with" and arg:
        return Preference(
            f"answers that start with {arg!r}", lambda text: float(text.strip().startswith(arg))
        )
    if kind == "shorter-than" and arg.isdigit():
        limit = int(arg)
        return Preference(
            f"answers shorter than {limit} characters", lambda text: float(len(text.strip()) < limit)
        )
    raise InvalidInput(
        f"unknown preference {spec!r}: use starts-with:WORD or shorter-than:N", field="preference"
    )


@dataclass
class DemoUser:
    url: str
    scenario: str
    preference: Preference
    train_prompts: list[str]
    heldout_prompts: list[str]
    group_size: int = 8
    model: str = "builtin:tiny"
    max_tokens: int = 48
    token: str | None = None
    seed: int = 0
    requests: int = 0
    reports: int = 0
    started: float = field(default_factory=time.monotonic)
    round_seconds: list[float] = field(default_factory=list)  # asking one group its answers
    sessions: bool = False  # each taught answer in a session of its own (what a canary splits)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._session_count = 0
        headers = {"x-reef-scenario": self.scenario}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self._client = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=300)

    async def close(self) -> None:
        await self._client.aclose()

    async def ask(
        self, prompt: str, *, capture: bool = True, seed: int | None = None, session: str | None = None
    ) -> tuple[str, str | None]:
        """The answer to ``prompt`` and its receipt; ``session`` tags the request
        (``x-reef-tag-session``)."""
        body: dict = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": self.max_tokens,
        }
        if seed is not None:
            body["seed"] = seed
        headers = {} if capture else {"x-reef-capture": "false"}
        if session is not None:
            headers["x-reef-tag-session"] = session
        response = await self._client.post("/v1/chat/completions", json=body, headers=headers)
        response.raise_for_status()
        self.requests += 1
        text = response.json()["choices"][0]["message"]["content"] or ""
        return text, response.headers.get("x-reef-agent-record-id")

    def _new_session(self) -> str | None:
        if not self.sessions:
            return None
        self._session_count += 1
        return f"u{self.seed}-s{self._session_count}"

    async def wait_while_stepping(self, poll: float = 0.2) -> None:
        """Wait while reef trains, as a person waits for a review (on a small machine the
        training step gets the CPU, and every answer scored comes from the newest release)."""
        while await self.learning_state() == "stepping":
            await asyncio.sleep(poll)

    async def learning_state(self) -> str | None:
        for row in (await self.status())["scenarios"]:
            if row["name"] == self.scenario:
                return (row.get("learning") or {}).get("state")
        return None

    async def teach_one_group(self) -> float:
        """Ask one prompt ``group_size`` times, score every answer, report each score (with
        ``sessions``, each answer in a fresh session)."""
        prompt = self._rng.choice(self.train_prompts)
        asked = time.monotonic()
        answers = await asyncio.gather(
            *(self.ask(prompt, session=self._new_session()) for _ in range(self.group_size))
        )
        self.round_seconds.append(time.monotonic() - asked)
        scores = []
        for text, receipt in answers:
            score = self.preference.score(text)
            scores.append(score)
            response = await self._client.post("/reef/report", json={"score": score, "references": [receipt]})
            response.raise_for_status()
            self.reports += 1
        return sum(scores) / len(scores)

    async def heldout_score(self, samples_per_prompt: int = 2) -> float:
        """How often the served model pleases the user on prompts it was never taught on."""
        jobs = [
            self.ask(p, capture=False, seed=1000 + i * 7 + k)
            for i, p in enumerate(self.heldout_prompts)
            for k in range(samples_per_prompt)
        ]
        answers = await asyncio.gather(*jobs)
        return sum(self.preference.score(text) for text, _ in answers) / len(answers)

    async def canary(self) -> dict:
        """``{"canary": the running (or last) canary with its test, "plan": the settings}``."""
        response = await self._client.get(f"/reef/scenarios/{self.scenario}/canary")
        response.raise_for_status()
        return response.json()

    async def releases(self) -> list[dict]:
        response = await self._client.get(f"/reef/scenarios/{self.scenario}/releases")
        response.raise_for_status()
        return response.json()["releases"]

    async def status(self) -> dict:
        response = await self._client.get("/reef/status")
        response.raise_for_status()
        return response.json()

    @property
    def rate(self) -> float:
        return self.requests / max(1e-9, time.monotonic() - self.started)
