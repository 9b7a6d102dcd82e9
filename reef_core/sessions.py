"""Sessions: a harness's records grouped by its session tag, with the reports that judge them.

A harness tags every request of one session (pi through ``reef-pi``: ``x-reef-tag-run``;
anyone: ``x-reef-tag-session``; Claude Code: its ``x-claude-code-session-id``, stored as the
``session`` tag), so a session is the records
sharing that tag, in the order they were written.  Nothing about a session is stored twice:

* its **turns** come from its records: a record whose request ends with the user's own words
  (not a tool result, nor text the harness wrote) opens a turn; the records after it, up to the
  next such record, are the agent's work on that turn (tool calls and their results).  A record
  tagged ``aside`` (:data:`ASIDE_TAG`) is the harness's own errand beside the session, such as
  the title opencode asks its model for with the person's first words: it belongs to the
  session's records but opens no turn and answers none;
* its **transcript** is the conversation of its last record (each request of a chat carries the
  whole conversation so far) plus that record's answer;
* its **score** comes from the reports whose references include its receipts (or whose
  ``metadata.session`` names it): the mean of the explicit ones (a person's ``/good``,
  ``/bad``, ``reef report``…) when there are any, else the mean of the judge's
  (``metadata.source = "judge"``, the next-turn judge of reefine).  Explicit reports always
  outweigh judged ones.

Scores run from 0 (bad) to 1 (good): ``/good`` is 1, ``/bad`` is 0, a judge's accept is 1,
correct 0.25, reject 0.  A session is *negative* when its score is below 0.5, or when a
person wrote feedback text on it (a person types feedback mostly to say what was wrong; the
reflector reads the words and decides).

Everything here is pure: items in, sessions out (the daemon reads the items; reefine keeps an
index of them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from reef_core.errors import InvalidInput
from reef_core.store.data import Item
from reef_core.wire.responses_api import response_to_chat_message, responses_request_to_chat

__all__ = [
    "ASIDE_TAG",
    "JUDGE_SCORES",
    "SESSION_TAGS",
    "Message",
    "Session",
    "Turn",
    "answer_text",
    "conversation",
    "group_sessions",
    "is_aside",
    "is_explicit",
    "opens_turn",
    "page_sessions",
    "request_messages",
    "served_release",
    "session_of",
]

#: the record tags that name a session, in the order they are looked for
SESSION_TAGS = ("session", "run")
#: the record tag of a harness's errand beside the session (its value says which: ``title``)
ASIDE_TAG = "aside"
#: the score a judge's verdict stands for
JUDGE_SCORES = {"accept": 1.0, "correct": 0.25, "reject": 0.0}
_NEGATIVE = 0.5
#: the sources that are nobody's turn: the harness's instructions and what it wrote for them
_NOT_SAID = ("system", "harness")
_EXCERPT = 400


@dataclass(frozen=True)
class Message:
    """One message of a conversation, flattened to text.

    ``source`` says who wrote it: ``user`` (the person), ``assistant`` (the model), ``tool``
    (a tool's output: file contents, command output, fetched pages; anyone could have written
    it), ``system`` (the harness's instructions) or ``harness`` (text the harness wrote into a
    user-role message, not the person: reminders, attachments, command wrappers and outputs;
    a file or a hook may have written it, so it is no more trusted than ``tool``).
    """

    source: str
    text: str

    def to_json(self) -> dict[str, str]:
        return {"source": self.source, "text": self.text}


def session_of(record: Mapping[str, Any]) -> str | None:
    """The session a record belongs to: the first of :data:`SESSION_TAGS` among its tags."""
    tags = record.get("tags") or {}
    if not isinstance(tags, Mapping):
        return None
    for name in SESSION_TAGS:
        value = tags.get(name)
        if isinstance(value, str) and value:
            return value
    return None


_RELEASE_NAME = re.compile(r"[vc][1-9][0-9]{0,8}")


def served_release(record: Mapping[str, Any]) -> str | None:
    """The release (``vN``) or candidate (``cN``, a canary) that served a record.

    A harness launcher knows which tree its session runs and sends it as the ``release`` tag
    (``x-reef-tag-release``); that wins, since the daemon's chain tip may be newer than what the
    harness installed.  Otherwise the record's own ``release``: what the daemon served (its tip,
    or for weights the canary candidate whose adapter answered)."""
    tags = record.get("tags")
    if isinstance(tags, Mapping):
        tagged = tags.get("release")
        if isinstance(tagged, str) and _RELEASE_NAME.fullmatch(tagged):
            return tagged
    release = record.get("release")
    return release if isinstance(release, str) and release else None


def is_explicit(report: Mapping[str, Any]) -> bool:
    """A person's report (anything a judge did not write)."""
    metadata = report.get("metadata") or {}
    return not (isinstance(metadata, Mapping) and metadata.get("source") == "judge")


# -- conversations, in any client's wire format ----------------------------------------------------


def _text_of(content: Any) -> str:
    """The text of an OpenAI or Anthropic content value (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, Mapping):
            kind = part.get("type")
            if kind in ("text", "input_text", "output_text"):
                parts.append(str(part.get("text", "")))
            elif kind == "tool_result":
                parts.append(_text_of(part.get("content")))
    return "\n".join(p for p in parts if p)


def _tool_calls(calls: Any) -> list[str]:
    shown = []
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            shown.append(f"[tool call {function.get('name')}({function.get('arguments', '')})]")
    return shown


def _openai_messages(messages: Iterable[Any]) -> list[Message]:
    out = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        text = _text_of(message.get("content"))
        if role == "assistant":
            text = "\n".join([t for t in [text, *_tool_calls(message.get("tool_calls"))] if t])
            out.append(Message("assistant", text))
        elif role == "user":
            out.extend(_person_or_harness(text))
        elif role in ("tool", "function"):
            out.append(Message("tool", text))
        elif role in ("system", "developer"):
            out.append(Message("system", text))
    return out


def _anthropic_messages(request: Mapping[str, Any]) -> list[Message]:
    out = []
    system = _text_of(request.get("system"))
    if system:
        out.append(Message("system", system))
    for message in request.get("messages") or []:
        if not isinstance(message, Mapping):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "system":  # Claude Code puts its environment block here
            out.append(Message("system", _text_of(content)))
        elif role == "assistant":
            out.append(Message("assistant", _anthropic_blocks(content)))
        elif role == "user":
            out.extend(_user_blocks(content))
    return out


def _anthropic_blocks(content: Any) -> str:
    if not isinstance(content, list):
        return _text_of(content)
    parts = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            arguments = json.dumps(block.get("input"), ensure_ascii=False)
            parts.append(f"[tool call {block.get('name')}({arguments})]")
    return "\n".join(p for p in parts if p)


# -- what the harness wrote into user-role messages ------------------------------------------------
#
# Claude Code (2.1.332; tests/fixtures/claude_code_2.1.332/ holds real requests) sends a user-role
# message as text blocks, not all of them the person's.  In its own transcript the ones it wrote
# are ``isMeta``; in the request they are told apart by their shape:
#
# * ``<system-reminder>…</system-reminder>``: CLAUDE.md and rules ("Contents of …/CLAUDE.md
#   (project instructions, checked into the codebase)"), commit attribution, todo and file notices.
#   Hook ``additionalContext`` and the environment block come in a ``role: "system"`` message.
# * a slash command the person typed: ``<command-message>review</command-message>
#   <command-name>/review</command-name><command-args>src/app.py</command-args>`` (a local
#   command writes ``<command-name>`` first).  The person typed exactly ``/review src/app.py``,
#   so that is their words; the plain block after it is the command file's expanded prompt
#   (``isMeta``), the harness's.  A local command adds ``<local-command-caveat>…`` before and
#   ``<local-command-stdout>…`` after; ``!cmd`` is ``<bash-input>cmd</bash-input>``, the person's,
#   then ``<bash-stdout>…</bash-stdout><bash-stderr>…</bash-stderr>``, the harness's.
# * a plain block after a ``tool_result`` in the same message: what the harness attached to the
#   result, e.g. the body of a skill the model loaded with its Skill tool.  A message the person
#   types mid-turn is sent that way too, as Claude Code's own text ("The user sent a new message
#   while you were working: …", read from the binary, not captured), so it is labelled harness:
#   erring that way never lets a file's words pass for the person's.
#
# pi and the OpenAI-format clients write none of this; a ``<system-reminder>`` in an OpenAI-format
# user message is still labelled harness (no person types one), the wrappers are Claude Code's only.

_REMINDER = re.compile(r"<system-reminder>.*?(?:</system-reminder>|\Z)", re.DOTALL)
_COMMAND = ("<command-message>", "<command-name>")
_SHELL = "<bash-input>"
#: blocks the harness writes whole: a local command's caveat and output, a shell command's
#: output, a background task's notice
_HARNESS = (
    "<local-command-caveat>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<bash-exit-code>",
    "<task-notification>",
)


def _tag(text: str, name: str) -> str | None:
    found = re.search(rf"<{name}>(.*?)</{name}>", text, re.DOTALL)
    return found.group(1).strip() if found else None


def _typed_command(wrapper: str) -> str | None:
    """What the person typed for a command wrapper (``/review src/app.py``), if it names one."""
    name = _tag(wrapper, "command-name") or _tag(wrapper, "command-message")
    if not name:
        return None
    name = name if name.startswith("/") else f"/{name}"
    return f"{name} {_tag(wrapper, 'command-args') or ''}".strip()


def _split_reminders(text: str) -> Iterator[tuple[bool, str]]:
    """``text`` cut into (is a reminder, piece), in order; a text with none comes back whole."""
    if "<system-reminder>" not in text:
        yield False, text
        return
    at = 0
    for found in _REMINDER.finditer(text):
        yield False, text[at : found.start()].strip()
        yield True, found.group().strip()
        at = found.end()
    yield False, text[at:].strip()


def _person_or_harness(text: str) -> list[Message]:
    """A user message's text (OpenAI format): its reminders are the harness's, the rest the person's."""
    if "<system-reminder>" not in text:
        return [Message("user", text)]  # as ever, even when empty (an image alone, say)
    return _joined((("harness" if reminder else "user"), piece) for reminder, piece in _split_reminders(text))


def _user_blocks(content: Any) -> list[Message]:
    """An Anthropic user-role message, block by block and in order: tool results are ``tool``,
    the person's words ``user``, what the harness wrote ``harness`` (see above)."""
    pieces: list[tuple[str, str]] = []
    after_result = False  # a tool_result came before in this message
    expansion = False  # the piece before was a slash command's wrapper
    for block in content if isinstance(content, list) else [content]:
        if isinstance(block, Mapping) and block.get("type") == "tool_result":
            pieces.append(("tool", _text_of(block.get("content"))))
            after_result, expansion = True, False
            continue
        for reminder, piece in _split_reminders(_text_of([block])):
            head = piece.lstrip()
            if not head:
                continue
            if reminder:
                pieces.append(("harness", piece))
            elif head.startswith(_COMMAND):
                typed = None if after_result else _typed_command(head)
                pieces.append(("harness", piece) if typed is None else ("user", typed))
                expansion = True
            elif head.startswith(_SHELL):
                pieces.append(("user", f"!{_tag(head, 'bash-input') or ''}"))
                expansion = False
            elif head.startswith(_HARNESS) or expansion or after_result:
                pieces.append(("harness", piece))
                expansion = False
            else:
                pieces.append(("user", piece))
    return _joined(pieces)


def _joined(pieces: Iterable[tuple[str, str]]) -> list[Message]:
    """Messages from (source, text) pieces: runs of one source joined by newlines, empty text left
    out (a tool's output is kept even when empty: the call was answered)."""
    out: list[Message] = []
    for source, text in pieces:
        if not text.strip() and source != "tool":
            continue
        if out and out[-1].source == source:
            out[-1] = Message(source, f"{out[-1].text}\n{text}")
        else:
            out.append(Message(source, text))
    return out


def request_messages(record: Mapping[str, Any]) -> list[Message]:
    """The conversation a record's request carried, oldest first."""
    request = record.get("request")
    if not isinstance(request, Mapping):
        return []
    if record.get("client_format") == "anthropic":
        return _anthropic_messages(request)
    if record.get("client_format") == "responses":  # read as the chat request it translates to
        try:
            chat = responses_request_to_chat(dict(request), strict=False)
        except InvalidInput:
            return []
        return _openai_messages(chat["messages"])
    return _openai_messages(request.get("messages") or [])


def answer_text(record: Mapping[str, Any]) -> str:
    """The answer the client got, as text (tool calls shown as ``[tool call …]``)."""
    response = record.get("response")
    if not isinstance(response, Mapping):
        return ""
    if record.get("client_format") == "anthropic":
        return _anthropic_blocks(response.get("content"))
    if record.get("client_format") == "responses":
        chat = response_to_chat_message(dict(response))
        response = {"choices": [{"message": chat}]} if chat is not None else {}
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return ""
    message = choices[0].get("message") or {}
    if not isinstance(message, Mapping):
        return ""
    text = _text_of(message.get("content"))
    return "\n".join([t for t in [text, *_tool_calls(message.get("tool_calls"))] if t])


def conversation(record: Mapping[str, Any]) -> list[Message]:
    """A record's whole conversation: what its request carried, then its answer."""
    messages = request_messages(record)
    answer = answer_text(record)
    if answer:
        messages.append(Message("assistant", answer))
    return messages


def is_aside(record: Mapping[str, Any]) -> bool:
    """Whether the record is a harness's errand beside the session (tagged :data:`ASIDE_TAG`)."""
    tags = record.get("tags")
    return isinstance(tags, Mapping) and bool(tags.get(ASIDE_TAG))


def opens_turn(record: Mapping[str, Any]) -> bool:
    """Whether the record's request ends with the user's own words (not a tool's output): the
    last message that is neither ``system`` nor ``harness`` is the person's; an aside opens none."""
    if is_aside(record):
        return False
    messages = [m for m in request_messages(record) if m.source not in _NOT_SAID]
    return bool(messages) and messages[-1].source == "user"


# -- sessions --------------------------------------------------------------------------------------


@dataclass
class Turn:
    user: str  # the user's message that opened it
    records: list[str] = field(default_factory=list)
    answer: str = ""  # the answer of its last record

    def to_json(self) -> dict[str, Any]:
        return {"user": _excerpt(self.user), "answer": _excerpt(self.answer), "records": list(self.records)}


@dataclass
class Session:
    id: str
    records: list[str] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)  # the releases that served it, in order
    started_at: str = ""
    ended_at: str = ""
    #: its first record seen already carried an answer of the model: the session began before
    #: the items it was grouped from (a page read ``after`` a cursor inside it)
    continues: bool = False

    @property
    def explicit(self) -> list[dict[str, Any]]:
        return [r for r in self.reports if is_explicit(r)]

    @property
    def judged(self) -> list[dict[str, Any]]:
        return [r for r in self.reports if not is_explicit(r)]

    @property
    def score(self) -> float | None:
        """The mean explicit score, else the mean judged one, else None."""
        for reports in (self.explicit, self.judged):
            scores = [float(r["score"]) for r in reports if isinstance(r.get("score"), (int, float))]
            if scores:
                return sum(scores) / len(scores)
        return None

    @property
    def feedback(self) -> list[str]:
        """The feedback texts a person wrote on the session."""
        return [
            str(r["feedback"]) for r in self.explicit if isinstance(r.get("feedback"), str) and r["feedback"]
        ]

    @property
    def negative(self) -> bool:
        score = self.score
        return (score is not None and score < _NEGATIVE) or bool(self.feedback)

    def add_record(self, item: Item) -> None:
        data = item.data
        if not self.records:
            self.continues = any(m.source == "assistant" for m in request_messages(data))
        self.records.append(item.id)
        self.started_at = self.started_at or item.created_at
        self.ended_at = item.created_at or self.ended_at
        release = served_release(data)
        if release is not None and (not self.releases or self.releases[-1] != release):
            self.releases.append(release)
        if is_aside(data):
            return
        if opens_turn(data) or not self.turns:
            messages = [m for m in request_messages(data) if m.source == "user"]
            self.turns.append(Turn(user=messages[-1].text if messages else ""))
        turn = self.turns[-1]
        turn.records.append(item.id)
        turn.answer = answer_text(data)

    def to_json(self) -> dict[str, Any]:
        score = self.score
        return {
            "session": self.id,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "continues": self.continues,
            "records": list(self.records),
            "releases": list(self.releases),
            "turns": [t.to_json() for t in self.turns],
            "reports": [_report_summary(r) for r in self.reports],
            "score": None if score is None else round(score, 4),
            "scored_by": "person" if self.explicit else ("judge" if self.judged else None),
            "negative": self.negative,
        }


def _excerpt(text: str, limit: int = _EXCERPT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _report_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    metadata = report.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    feedback = report.get("feedback")
    return {
        "id": report.get("id"),
        "score": report.get("score"),
        "feedback": _excerpt(feedback) if isinstance(feedback, str) else feedback,
        "source": "judge" if not is_explicit(report) else str(metadata.get("source") or "person"),
        "references": len(report.get("references") or []),
    }


def group_sessions(items: Iterable[Item]) -> list[Session]:
    """Records (and the reports on them) grouped by session, ordered by each one's first record.

    ``items`` come in the order they were written; records without a session tag belong to no
    session.  A report joins every session one of its references (or its
    ``metadata.session``) belongs to; reports on records not among ``items`` are left out.
    """
    sessions: dict[str, Session] = {}
    owner: dict[str, str] = {}  # receipt -> session
    for item in items:
        if item.kind == "record":
            name = session_of(item.data)
            if name is None:
                continue
            session = sessions.get(name)
            if session is None:
                session = sessions[name] = Session(name)
            session.add_record(item)
            owner[item.id] = name
        elif item.kind == "report":
            named = {owner[ref] for ref in item.data.get("references") or [] if ref in owner}
            metadata = item.data.get("metadata")
            if isinstance(metadata, Mapping) and metadata.get("session") in sessions:
                named.add(str(metadata["session"]))
            for name in sorted(named):
                sessions[name].reports.append(item.data)
    return list(sessions.values())


def page_sessions(items: Iterable[Item], limit: int) -> tuple[list[Session], str | None]:
    """The first ``limit`` sessions among ``items`` (by first record), and the next page's cursor.

    Records of the sessions left out are passed over as they stream by, so what is held is one
    page, not the history.  The cursor (None when nothing was left out) is the id of the item
    just before the first record of the first session left out: items read after it start with
    that session whole.  A session of this page that goes on past the cursor appears again on
    the next page with its later records only, marked :attr:`Session.continues`.
    """
    if limit < 1:
        raise ValueError("a page holds at least one session")
    kept: set[str] = set()
    cursor: str | None = None  # set once a session is left out
    previous: str | None = None

    def on_page() -> Iterator[Item]:
        nonlocal cursor, previous
        for item in items:
            name = session_of(item.data) if item.kind == "record" else None
            left_out = name is not None and name not in kept and len(kept) == limit
            if left_out and cursor is None:
                cursor = previous
            elif name is not None and not left_out:
                kept.add(name)
            previous = item.id
            if not left_out:
                yield item

    sessions = group_sessions(on_page())
    return sessions, cursor
