"""A learning step whose publish loses the remote's lease is rebuilt on the release that won
(``LearningWorker._settle``): the remote's chain is adopted before the ConflictError, so the
worker finds the tip moved and asks the recipe's ``rebase``, as in a race on one machine.
Real git: two repositories (nodes a and b) and one bare remote on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reef_core.learning import Batch, Budgets, Candidate, LearningWorker, Recipe, RecipeContext, StepOutcome
from reef_core.store import Release, Scenario, Store, StoreOptions, build_tree
from reef_core.store.remotes import add_remote
from reef_core.store.repo import init_bare
from reef_core.store.sync import RemotePublisher, sync
from tests.conftest import git, wait_for


def _publish(scenario: Scenario, files: dict[str, bytes]) -> Release:
    tip = scenario.releases.tip()
    tree = build_tree(scenario.handle.repo, files)
    return scenario.releases.publish(tree, expected=tip.commit if tip else None, operation="evolve")


class RacedRecipe(Recipe):
    """One step that adds ``rules/a.md``; while it proposes, another node publishes first."""

    name = "raced"

    def __init__(self, context: RecipeContext, race) -> None:
        super().__init__(context)
        self.race = race
        self.batches = [Batch(item_ids=("rec_" + "0" * 28,), summary="one")]
        self.rebased: list[str] = []

    def next_batch(self, scenario: Scenario) -> Batch | None:
        return self.batches.pop() if self.batches else None

    def _tree(self, scenario: Scenario, base: Release) -> str:
        files = {**scenario.releases.files(base), "rules/a.md": b"from a\n"}
        return str(build_tree(scenario.handle.repo, files))

    def propose(self, scenario: Scenario, batch: Batch) -> Candidate:
        tip = scenario.releases.tip()
        assert tip is not None
        tree = self._tree(scenario, tip)
        self.race()  # node b publishes (and pushes) its release now
        return Candidate(tree=tree, operation="evolve")

    def rebase(self, scenario: Scenario, record: dict[str, Any], new_base: Release) -> str | None:
        self.rebased.append(new_base.name)
        return self._tree(scenario, new_base)


def test_a_step_that_loses_the_remote_lease_is_rebuilt_on_the_winners_release(tmp_path: Path):
    remote = tmp_path / "remote.git"
    init_bare(remote)
    options = StoreOptions(pack_every=0)
    with (
        Store(tmp_path / "a", options).open("s", create=True, node="a") as a,
        Store(tmp_path / "b", options).open("s", create=True, node="b") as b,
    ):
        for node in (a, b):
            add_remote(node.path, "origin", str(remote))
        _publish(a, {"AGENTS.md": b"v1\n"})
        assert sync(a, "origin", admit=None).outcome == "ok"
        assert sync(b, "origin", admit=None).adopted == "v1"
        a.releases.publisher = RemotePublisher(a, "origin", admit=None)
        b.releases.publisher = RemotePublisher(b, "origin", admit=None)

        def race() -> None:
            _publish(b, {"AGENTS.md": b"v1\n", "rules/b.md": b"from b\n"})

        recipe = RacedRecipe(RecipeContext(cache_dir=tmp_path / "cache"), race)
        outcomes: list[StepOutcome] = []
        worker = LearningWorker(
            a, recipe, Budgets(max_steps=1, poll_seconds=0.05), on_outcome=outcomes.append
        )
        worker.start().notify()
        try:
            assert wait_for(lambda: outcomes, timeout=60)
        finally:
            worker.stop()

        (outcome,) = outcomes
        assert outcome.verdict == "selected" and outcome.release is not None
        assert (outcome.release.name, recipe.rebased) == ("v3", ["v2"])
        assert a.releases.files(outcome.release) == {
            "AGENTS.md": b"v1\n",
            "rules/b.md": b"from b\n",
            "rules/a.md": b"from a\n",
        }
        # the first candidate stood on v1 and lost its publish; the second, rebuilt, on v2
        bases = [c.base for c in a.releases.candidates()]
        assert bases == [a.releases.get("v1").commit, a.releases.get("v2").commit]
        assert outcome.release.source == "candidate 2" and outcome.candidate_step == 2
        chain = git(
            "--git-dir", str(remote), "log", "--first-parent", "--format=%H", "release"
        ).stdout.split()
        assert chain[0] == outcome.release.commit and len(chain) == 3
        assert git("--git-dir", str(remote), "rev-parse", "v3^{commit}").stdout.strip() == chain[0]
