"""Every schema reefine sends fits the answer's budget: the longest document it accepts is within
``max_tokens`` (counted one token per character), llguidance compiles it, and an answer that
parses but is refused is told apart from one that holds no JSON."""

from __future__ import annotations

import json

import pytest

from recipes.reefine import checks, curate, judge, proposer, reflect, replay
from recipes.reefine.structured import Unusable, ask_json, fit, longest, schema
from reef_core.learning.model import ModelCall, ModelCaller
from reef_core.upstream import constrain
from tests.upstream.schemas import violations

#: each schema with the max_tokens its caller sends (the proposer's is the config's default)
SENT = [
    (proposer.PROPOSAL_SCHEMA, 4096),
    (proposer.REVIEW_SCHEMA, 4096),
    (checks.REVIEW_SCHEMA, 1024),
    (judge.JUDGE_SCHEMA, 512),
    (replay.PAIRWISE_SCHEMA, 512),
    (reflect.REFLECT_SCHEMA, 4096),
    (curate.CURATE_SCHEMA, 4096),
]


@pytest.mark.parametrize(("shape", "max_tokens"), SENT, ids=[s["name"] for s, _ in SENT])
def test_each_schema_fits_its_budget_and_compiles(shape, max_tokens):
    before = json.dumps(shape)
    for budget in (max_tokens, 1024, 64_000):
        if budget < max_tokens and shape in (reflect.REFLECT_SCHEMA, curate.CURATE_SCHEMA):
            continue  # their callers always send 4,096
        fitted = fit(shape, budget)
        assert longest(fitted["schema"]) <= budget
        constrain.parse({"type": "json_schema", "json_schema": fitted})  # llguidance takes it
    assert json.dumps(shape) == before  # fit works on a copy


def test_fitting_shrinks_free_strings_only_and_never_grows_them():
    shape = schema(
        "s",
        {
            "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 10},
            "text": {"type": "string", "maxLength": 1000},
            "items": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 100}},
        },
    )
    small = fit(shape, 300)["schema"]["properties"]
    assert small["name"]["maxLength"] == 10
    assert small["text"]["maxLength"] < 1000 and small["items"]["items"]["maxLength"] < 100
    assert small["text"]["maxLength"] / small["items"]["items"]["maxLength"] == pytest.approx(10, rel=0.1)
    assert fit(shape, 100_000)["schema"] == shape["schema"]  # room enough: as declared
    assert shape["schema"]["properties"]["text"]["maxLength"] == 1000


@pytest.mark.parametrize(
    ("node", "problem"),
    [
        ({"type": "string"}, "maxLength"),
        ({"type": "array", "items": {"type": "boolean"}}, "maxItems"),
        ({"type": "integer", "minimum": 0}, "minimum and maximum"),
        ({"type": "object", "properties": {}}, "additionalProperties"),
        ({"type": "number"}, "'number'"),
    ],
)
def test_a_schema_that_leaves_something_unbounded_is_refused_by_name(node, problem):
    with pytest.raises(ValueError, match=problem):
        fit(schema("s", {"x": node}), 4096)


def test_a_budget_too_small_for_the_fixed_parts_is_refused():
    with pytest.raises(ValueError, match="cannot fit 16 tokens"):
        fit(proposer.PROPOSAL_SCHEMA, 16)


class Answers(ModelCaller):
    def __init__(self, *answers: str) -> None:
        self.answers, self.schemas = list(answers), []

    def answer(self, call: ModelCall) -> str:
        self.schemas.append(call.schema)
        return self.answers.pop(0)


def _positive(value):
    if value["n"] < 1:
        raise ValueError("n must be positive")
    return value["n"]


SHAPE = schema("n", {"n": {"type": "integer", "minimum": -9, "maximum": 9}})


def test_refused_and_unusable_answers_are_told_apart():
    with pytest.raises(Unusable, match=r"refused 2 times; last: n must be positive"):
        ask_json(Answers("no json", '{"n": 0}'), [], system="", shape=SHAPE, check=_positive, retries=1)
    with pytest.raises(Unusable, match=r"unusable once; last: the answer holds no JSON object"):
        ask_json(Answers("no json"), [], system="", shape=SHAPE, check=_positive, retries=0)
    model = Answers('{"n": 3}')
    assert ask_json(model, [], system="", shape=SHAPE, check=_positive, max_tokens=64) == (3, 0)
    assert violations({"n": 3}, model.schemas[0]["schema"]) == []  # the fitted schema was sent
