from __future__ import annotations

import pytest

from reef_core.errors import InvalidInput
from reef_core.ids import IdGenerator, parse_item_id, validate_scenario_name


def test_ids_increase_strictly_even_within_one_millisecond_and_when_the_clock_steps_back():
    times = iter([1000.0, 1000.0, 1000.0, 999.0, 1001.0])
    gen = IdGenerator(clock=lambda: next(times))
    ids = [gen.new("record") for _ in range(5)]
    assert [str(i) for i in ids] == sorted(str(i) for i in ids)
    assert len({i.hex for i in ids}) == 5
    assert ids[3].millis == 1_000_000  # the step back did not move time backwards


def test_generator_continues_after_a_stored_id():
    first = IdGenerator(clock=lambda: 2000.0).new("ask")
    later = IdGenerator(after=first, clock=lambda: 1000.0).new("record")
    assert later.hex > first.hex


def test_id_path_is_time_sharded_and_round_trips():
    item = IdGenerator(clock=lambda: 1_700_000_000.123).new("report")
    parsed = parse_item_id(str(item))
    assert parsed == item
    assert str(item).startswith("rep_")
    parts = item.path.split("/")
    assert parts[0] == "reports" and parts[-1] == f"{item}.json"
    assert "".join(parts[1:6]) == item.hex[:12]
    assert item.created_at == "2023-11-14T22:13:20.123Z"


@pytest.mark.parametrize(
    ("clock", "shown"),
    [
        (0.0, "1970-01-01T00:00:00.000Z"),
        (1_700_000_000.999, "2023-11-14T22:13:20.999Z"),
        (1_700_000_001.0, "2023-11-14T22:13:21.000Z"),
        (1_709_164_799.5, "2024-02-28T23:59:59.500Z"),
        (1_709_164_800.001, "2024-02-29T00:00:00.001Z"),
    ],
)
def test_created_at_is_the_ids_millisecond_in_utc(clock, shown):
    assert IdGenerator(clock=lambda: clock).new("record").created_at == shown


@pytest.mark.parametrize("bad", ["", "rec_", "rec_XYZ", "rec_" + "0" * 27, "run_" + "0" * 28, 42, None])
def test_bad_ids_are_rejected_naming_the_field(bad):
    with pytest.raises(InvalidInput) as info:
        parse_item_id(bad, field="references[0]")
    assert info.value.field == "references[0]"


@pytest.mark.parametrize("good", ["a", "demo", "my-project_2.1", "X" * 64])
def test_good_scenario_names(good):
    assert validate_scenario_name(good) == good


@pytest.mark.parametrize("bad", ["", ".", "..", ".hidden", "a/b", "../etc", "-x", "a b", "x" * 65, "é", None])
def test_scenario_names_that_could_escape_or_confuse_are_rejected(bad):
    with pytest.raises(InvalidInput, match="not a valid scenario name"):
        validate_scenario_name(bad)
