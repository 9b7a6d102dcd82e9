"""With several daemons on one scenario, each node's recipe follows its own data ref only: an ask
or a scored report another node recorded (brought in by a fetch) is that node's to act on."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes.grpo.samples import read_scored
from recipes.reefine.recipe import ReefineRecipe
from reef_core.learning import RecipeContext
from reef_core.store import Store, StoreOptions
from tests.conftest import git


@pytest.fixture
def two_nodes(tmp_path: Path):
    a = Store(tmp_path / "a", StoreOptions(pack_every=0, node="a")).open("s", create=True)
    b = Store(tmp_path / "b", StoreOptions(pack_every=0, node="b")).open("s", create=True)
    yield a, b
    a.close()
    b.close()


def _fetch_b(a, b) -> None:
    git("-C", str(a.path), "fetch", "-q", str(b.path), "refs/reef/data/b:refs/reef/data/b")


def test_reefine_takes_only_its_own_nodes_asks(two_nodes, tmp_path: Path):
    a, b = two_nodes
    theirs = b.append_sync("ask", {"text": "b's ask"})
    mine = a.append_sync("ask", {"text": "a's ask"})
    _fetch_b(a, b)
    assert {item.id for item in a.data.iter_items(["ask"])} == {mine, theirs}
    recipe = ReefineRecipe(RecipeContext(cache_dir=tmp_path / "cache", config={"health": False}))
    batch = recipe.next_batch(a)
    assert batch is not None and batch.item_ids == (mine,)
    assert recipe.next_batch(a) is None  # b's ask is b's


def test_grpo_reads_only_its_own_nodes_reports_and_their_records_anywhere(two_nodes):
    a, b = two_nodes
    tokens = {"prompt_ids": [1, 2], "response_ids": [3], "logprobs": [-0.5], "weight_version": 1}
    record = b.append_sync("record", {"tokens": tokens})  # recorded on b ...
    b.append_sync("report", {"score": 0.0, "references": [record]})  # ... b's own report on it
    _fetch_b(a, b)
    mine = a.append_sync("report", {"score": 1.0, "references": [record]})  # ... and a's
    scored = list(read_scored(a, None))
    assert [(report, [s.record_id for s in samples]) for report, samples in scored] == [(mine, [record])]
    assert scored[0][1][0].reward == 1.0
