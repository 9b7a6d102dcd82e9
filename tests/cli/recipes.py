"""A small real recipe for CLI tests: each ask becomes a rule file in the next release.

An ask that mentions a hook also adds an extension, so it needs a person's approval (pending);
one that asks to be rude fails its check; one that says "slowly" takes a while to propose.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

from reef_core.learning import Batch, Candidate, CheckResult, Recipe
from reef_core.store import Scenario, build_tree

__all__ = ["AskRecipe"]


class AskRecipe(Recipe):
    name = "cli-test-asks"
    consumes: ClassVar[frozenset[str]] = frozenset({"ask"})

    def __init__(self, context) -> None:
        super().__init__(context)
        self._after: dict[str, str] = {}

    def next_batch(self, scenario: Scenario) -> Batch | None:
        for item in scenario.data.iter_items(["ask"], after=self._after.get(scenario.name), limit=1):
            self._after[scenario.name] = item.id
            return Batch(item_ids=(item.id,), payload=item.data["text"], summary="one ask")
        return None

    def propose(self, scenario: Scenario, batch: Batch) -> Candidate:
        text = str(batch.payload)
        if "slowly" in text:
            time.sleep(1.5)
        tip = scenario.releases.tip()
        files = dict(scenario.releases.files(tip)) if tip else {}
        files[f"rules/ask-{len(files) + 1}.md"] = text.encode()
        hook = "hook" in text
        if hook:
            files["extensions/hook.ts"] = b"export default function () {}\n"
        tree = build_tree(scenario.handle.repo, files)
        return Candidate(tree=str(tree), operation="evolve", ask=text, needs_approval=hook)

    def checks(self, scenario: Scenario, candidate: Candidate) -> list[Callable[[], CheckResult]]:
        def politeness() -> CheckResult:
            rude = "rude" in (candidate.ask or "")
            return CheckResult("politeness", not rude, metrics={"polite": 0.0 if rude else 1.0})

        return [politeness]
