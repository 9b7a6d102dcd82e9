"""The next-turn judge inside one look of the worker: every new turn of every session is judged
once, and the verdicts score their sessions in that same look (a real store; the judge is a
model object answering by the next message, since only its calls are counted here)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from recipes.reefine.recipe import ReefineRecipe
from reef_core.learning import RecipeContext
from reef_core.store import Store, StoreOptions


class Judge:
    def __init__(self) -> None:
        self.calls = 0

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        system: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 300.0,
        schema: dict[str, Any] | None = None,
    ) -> str:
        self.calls += 1
        verdict = "correct" if "wrong" in messages[0]["content"] else "accept"
        return json.dumps({"verdict": verdict, "reason": "by the next message"})


def record(session: str, messages: list[dict[str, str]], answer: str) -> dict[str, Any]:
    return {
        "client_format": "openai",
        "tags": {"session": session},
        "request": {"model": "m", "messages": messages},
        "response": {"choices": [{"message": {"role": "assistant", "content": answer}}]},
    }


def test_every_new_turn_is_judged_once_and_scores_its_session_in_the_same_look(tmp_path: Path):
    judge = Judge()
    context = RecipeContext(cache_dir=tmp_path / "cache", config={"health": False}, model=judge)
    recipe = ReefineRecipe(context)
    scenario = Store(tmp_path / "state", StoreOptions(pack_every=0)).open("s", create=True)
    try:
        for n in range(3):
            first = [{"role": "user", "content": "fix it"}]
            scenario.append_sync("record", record(f"s{n}", first, "Done."))
            nxt = "that is wrong, run the tests" if n else "thanks, next one"
            second = [*first, {"role": "assistant", "content": "Done."}, {"role": "user", "content": nxt}]
            scenario.append_sync("record", record(f"s{n}", second, "Ran them."))
        assert recipe.next_batch(scenario) is None  # 3 scored sessions < usage-min-sessions 5
        assert judge.calls == 3
        verdicts = [i.data for i in scenario.data.iter_items(["report"])]
        assert sorted((v["metadata"]["session"], v["metadata"]["verdict"]) for v in verdicts) == [
            ("s0", "accept"),
            ("s1", "correct"),
            ("s2", "correct"),
        ]
        ready, held = recipe._eligible()
        assert len(ready) + held == 3  # every session is scored already, in the look that judged it
        assert recipe.next_batch(scenario) is None and judge.calls == 3  # never judged twice
    finally:
        scenario.close()


class BusyJudge(Judge):
    """A judge during whose first call another session's next turn is recorded (traffic goes on
    while the judge runs)."""

    def __init__(self, meanwhile: Any) -> None:
        super().__init__()
        self.meanwhile = meanwhile

    def complete(self, messages: Sequence[Mapping[str, str]], **options: Any) -> str:
        if self.calls == 0:
            self.meanwhile()
        return super().complete(messages, **options)


def test_a_turn_recorded_while_the_judge_runs_is_judged_too(tmp_path: Path):
    scenario = Store(tmp_path / "state", StoreOptions(pack_every=0)).open("s", create=True)
    first = [{"role": "user", "content": "fix it"}]

    def turns(session: str, next_message: str) -> None:
        scenario.append_sync("record", record(session, first, "Done."))
        second = [
            *first,
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": next_message},
        ]
        scenario.append_sync("record", record(session, second, "Ran them."))

    judge = BusyJudge(lambda: turns("late", "that is wrong, run the tests"))
    recipe = ReefineRecipe(RecipeContext(cache_dir=tmp_path / "cache", config={"health": False}, model=judge))
    try:
        turns("early", "thanks, next one")
        recipe.next_batch(scenario)
        recipe.next_batch(scenario)  # a later look finds nothing left to judge
        verdicts = sorted(
            (i.data["metadata"]["session"], i.data["metadata"]["verdict"])
            for i in scenario.data.iter_items(["report"])
        )
        assert verdicts == [("early", "accept"), ("late", "correct")]
        assert judge.calls == 2
    finally:
        scenario.close()
