"""reef_core.sessions on hand-made records: both wire formats, turns, scores, pages."""

from __future__ import annotations

from typing import Any

import pytest

from reef_core.ids import IdGenerator
from reef_core.sessions import (
    Message,
    answer_text,
    conversation,
    group_sessions,
    opens_turn,
    page_sessions,
    session_of,
)
from reef_core.store import Item

SYSTEM = {"role": "system", "content": "You are a coding agent."}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"p":"a"}'}}],
}


class Items:
    """Items in write order, with real time-ordered ids."""

    def __init__(self) -> None:
        self.ids = IdGenerator()
        self.items: list[Item] = []

    def record(
        self, messages: list[dict[str, Any]], answer: str = "ok", *, tags: dict[str, str] | None = None
    ) -> str:
        item_id = str(self.ids.new("record"))
        data = {
            "id": item_id,
            "kind": "record",
            "created_at": f"2026-01-01T00:00:{len(self.items):02d}.000Z",
            "client_format": "openai",
            "tags": tags or {},
            "release": "v1",
            "request": {"model": "m", "messages": messages},
            "response": {"choices": [{"message": {"role": "assistant", "content": answer}}]},
        }
        self.items.append(Item(item_id, "record", data))
        return item_id

    def anthropic(
        self, request: dict[str, Any], content: list[dict[str, Any]], *, tags: dict[str, str]
    ) -> str:
        item_id = str(self.ids.new("record"))
        data = {
            "id": item_id,
            "kind": "record",
            "created_at": "2026-01-01T00:01:00.000Z",
            "client_format": "anthropic",
            "tags": tags,
            "release": "v2",
            "request": request,
            "response": {"role": "assistant", "content": content},
        }
        self.items.append(Item(item_id, "record", data))
        return item_id

    def report(self, references: list[str], score: float | None = None, **fields: Any) -> str:
        item_id = str(self.ids.new("report"))
        data = {"id": item_id, "kind": "report", "score": score, "references": references, **fields}
        self.items.append(Item(item_id, "report", data))
        return item_id


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_session_of_takes_the_first_session_tag():
    assert session_of({"tags": {"run": "r1", "session": "s1"}}) == "s1"
    assert session_of({"tags": {"run": "r1"}}) == "r1"
    assert session_of({"tags": {"other": "x"}}) is None
    assert session_of({"tags": "not a mapping"}) is None
    assert session_of({}) is None


def test_openai_turns_a_tool_call_stays_in_its_turn():
    items = Items()
    tags = {"run": "r1"}
    first = items.record([SYSTEM, user("fix the bug")], "calling read", tags=tags)
    second = items.record(
        [SYSTEM, user("fix the bug"), CALL, {"role": "tool", "tool_call_id": "c1", "content": "file a"}],
        "fixed it",
        tags=tags,
    )
    third = items.record(
        [
            SYSTEM,
            user("fix the bug"),
            CALL,
            {"role": "tool", "content": "file a"},
            {"role": "assistant", "content": "fixed it"},
            user("now add a test"),
        ],
        "added",
        tags=tags,
    )
    assert [opens_turn(i.data) for i in items.items] == [True, False, True]
    [session] = group_sessions(items.items)
    assert session.id == "r1" and session.records == [first, second, third]
    assert [(t.user, t.records, t.answer) for t in session.turns] == [
        ("fix the bug", [first, second], "fixed it"),
        ("now add a test", [third], "added"),
    ]
    assert session.releases == ["v1"] and not session.continues
    sources = [m.source for m in conversation(items.items[-1].data)]
    assert sources == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert conversation(items.items[1].data)[2].text == '[tool call read({"p":"a"})]'


def test_anthropic_tool_results_are_tool_not_user():
    items = Items()
    tags = {"session": "a1"}
    ask = {"role": "user", "content": [{"type": "text", "text": "weather in Oslo?"}]}
    use = {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}
    result = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "-3C"}]}
        ],
    }
    items.anthropic({"system": "be brief", "messages": [ask]}, [use], tags=tags)
    items.anthropic(
        {
            "system": [{"type": "text", "text": "be brief"}],
            "messages": [ask, {"role": "assistant", "content": [use]}, result],
        },
        [{"type": "text", "text": "It is -3C."}],
        tags=tags,
    )
    first, second = (i.data for i in items.items)
    assert opens_turn(first) and not opens_turn(second)
    assert answer_text(first) == '[tool call weather({"city": "Oslo"})]'
    assert conversation(second) == [
        Message("system", "be brief"),
        Message("user", "weather in Oslo?"),
        Message("assistant", '[tool call weather({"city": "Oslo"})]'),
        Message("tool", "-3C"),
        Message("assistant", "It is -3C."),
    ]
    [session] = group_sessions(items.items)
    assert len(session.turns) == 1 and session.turns[0].answer == "It is -3C."
    assert session.releases == ["v2"]


def test_untagged_records_and_interleaved_sessions():
    items = Items()
    a1 = items.record([user("a")], tags={"run": "A"})
    items.record([user("nobody's")])
    b1 = items.record([user("b")], tags={"session": "B"})
    a2 = items.record([user("a"), {"role": "assistant", "content": "ok"}, user("a again")], tags={"run": "A"})
    sessions = group_sessions(items.items)
    assert [(s.id, s.records) for s in sessions] == [("A", [a1, a2]), ("B", [b1])]
    assert [len(s.turns) for s in sessions] == [2, 1]


def test_explicit_reports_outweigh_the_judge():
    items = Items()
    receipt = items.record([user("q")], tags={"run": "A"})
    judged = items.report([receipt], 0.0, metadata={"source": "judge", "reason": "rejected"})
    [session] = group_sessions(items.items)
    assert session.score == 0.0 and session.to_json()["scored_by"] == "judge" and session.negative
    person = items.report([receipt], 1.0, metadata={"source": "reef-pi"})
    [session] = group_sessions(items.items)
    assert session.score == 1.0 and not session.negative
    shown = session.to_json()
    assert shown["scored_by"] == "person"
    assert [(r["id"], r["source"]) for r in shown["reports"]] == [(judged, "judge"), (person, "reef-pi")]


def test_negative_by_score_or_by_a_persons_words():
    items = Items()
    receipt = items.record([user("q")], tags={"run": "A"})
    items.report([receipt], 0.25)
    items.report([receipt], 0.5)
    [session] = group_sessions(items.items)
    assert session.score == pytest.approx(0.375) and session.negative
    words = Items()
    other = words.record([user("q")], tags={"run": "B"})
    words.report([other], 1.0, feedback="but it ignored the style guide")
    [session] = group_sessions(words.items)
    assert (
        session.score == 1.0 and session.negative and session.feedback == ["but it ignored the style guide"]
    )
    judge_words = Items()
    third = judge_words.record([user("q")], tags={"run": "C"})
    judge_words.report([third], 1.0, feedback="accepted", metadata={"source": "judge"})
    [session] = group_sessions(judge_words.items)
    assert not session.negative  # a judge's reason is not a person's complaint
    assert group_sessions(Items().items) == []


def test_reports_join_by_reference_or_by_metadata_session():
    items = Items()
    a = items.record([user("a")], tags={"run": "A"})
    b = items.record([user("b")], tags={"run": "B"})
    both = items.report([a, b], 1.0)
    named = items.report([], 0.0, metadata={"session": "B"})
    items.report(["rec_0000000000000000000000000000"], 1.0)  # on nothing here
    sessions = {s.id: [r["id"] for r in s.reports] for s in group_sessions(items.items)}
    assert sessions == {"A": [both], "B": [both, named]}


def test_a_session_seen_from_its_middle_continues():
    items = Items()
    items.record([user("a")], tags={"run": "A"})
    later = items.record([user("a"), {"role": "assistant", "content": "ok"}, user("more")], tags={"run": "A"})
    [whole] = group_sessions(items.items)
    [tail] = group_sessions(items.items[1:])
    assert not whole.continues and tail.continues and tail.records == [later]
    assert tail.to_json()["continues"] is True


def test_pages_start_with_the_session_left_out_whole():
    items = Items()
    a1 = items.record([user("a")], tags={"run": "A"})
    b1 = items.record([user("b")], tags={"run": "B"})
    rep = items.report([a1], 1.0)
    a2 = items.record([user("a"), {"role": "assistant", "content": "ok"}, user("a2")], tags={"run": "A"})
    c1 = items.record([user("c")], tags={"run": "C"})
    page, cursor = page_sessions(items.items, 1)
    assert [(s.id, s.records) for s in page] == [("A", [a1, a2])] and cursor == a1
    assert [r["id"] for r in page[0].reports] == [rep]
    rest = [i for i in items.items if i.id > cursor]
    page, cursor = page_sessions(rest, 2)
    assert [(s.id, s.records, s.continues) for s in page] == [("B", [b1], False), ("A", [a2], True)]
    assert cursor == a2  # C, left out, starts right after it
    page, cursor = page_sessions([i for i in items.items if i.id > cursor], 2)
    assert [s.id for s in page] == ["C"] and page[0].records == [c1] and cursor is None
    everything, cursor = page_sessions(items.items, 3)
    assert [s.id for s in everything] == ["A", "B", "C"] and cursor is None
    with pytest.raises(ValueError):
        page_sessions(items.items, 0)


def test_an_aside_belongs_to_its_session_but_opens_and_answers_no_turn():
    """opencode asks its model for a title with the person's first words, beside the answer:
    the title is not what the person was answered, whichever comes back first."""
    items = Items()
    title_prompt = {"role": "system", "content": "You are a title generator."}
    aside = {"session": "ses_1", "aside": "title"}
    title = items.record([title_prompt, user("fix the bug")], "Fixing a bug", tags=aside)
    answer = items.record([SYSTEM, user("fix the bug")], "fixed it", tags={"session": "ses_1"})
    late_title = items.record([title_prompt, user("fix the bug")], "Bug fix", tags=aside)
    [session] = group_sessions(items.items)
    assert session.records == [title, answer, late_title]
    assert [(t.user, t.answer, t.records) for t in session.turns] == [("fix the bug", "fixed it", [answer])]
    assert not opens_turn(items.items[0].data) and opens_turn(items.items[1].data)
