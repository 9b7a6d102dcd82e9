"""A Chat Completions request body as a Messages request body, for an Anthropic upstream.

Owns: ``openai_request_to_anthropic`` and the ``max_tokens`` it fills in when the client
left it out.  Choices made where the two APIs differ:

* Anthropic requires user and assistant turns to alternate: a run of one role becomes one turn.
* OpenAI allows temperature up to 2, Anthropic up to 1: the value is clamped, not refused.
* Anthropic has no ``n``; more than one choice is refused rather than silently dropped.
* Fields Anthropic has no equivalent for (``response_format``, ``seed``…) are dropped: the
  upstream would reject them.
* Images and files must travel inline (base64 ``data:`` URLs) or, for images, by http(s) URL:
  a ``file_id`` names a file stored at OpenAI, which an Anthropic upstream cannot reach.

Does not own: the other direction (``requests_to_openai``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from reef_core.errors import InvalidInput
from reef_core.wire.shapes import expect_array, expect_name, expect_number, expect_object

__all__ = ["DEFAULT_MAX_TOKENS", "openai_request_to_anthropic"]

#: Anthropic requires max_tokens; OpenAI clients often leave it out
DEFAULT_MAX_TOKENS = 4096

_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)((?:;[^,;]*)*);base64,(.*)$", re.DOTALL)


def openai_request_to_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions request body as a Messages request body."""
    body = expect_object(body, "body")
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(expect_array(body.get("messages"), "messages")):
        where = f"messages[{i}]"
        message = expect_object(message, where)
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend(_to_blocks(message.get("content"), f"{where}.content", system=True))
        elif role == "user":
            content = message.get("content")
            user = content if isinstance(content, str) else _to_blocks(content, f"{where}.content")
            _add_turn(turns, "user", user)
        elif role == "assistant":
            _add_turn(turns, "assistant", _openai_assistant(message, where))
        elif role == "tool":
            _add_turn(turns, "user", [_openai_tool_result(message, where)])
        else:
            raise InvalidInput(f"unsupported message role {role!r}", field=f"{where}.role")
    out: dict[str, Any] = {}
    if "model" in body:
        out["model"] = body["model"]
    if system:
        plain = len(system) == 1 and set(system[0]) == {"type", "text"}
        out["system"] = system[0]["text"] if plain else system
    out["messages"] = turns
    out["max_tokens"] = _max_tokens(body)
    if body.get("n") not in (None, 1):
        raise InvalidInput("Anthropic upstreams return one choice; n must be 1", field="n")
    if body.get("temperature") is not None:
        out["temperature"] = min(max(expect_number(body["temperature"], "temperature"), 0.0), 1.0)
    if body.get("top_p") is not None:
        out["top_p"] = expect_number(body["top_p"], "top_p")
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else expect_array(stop, "stop")
        if not all(isinstance(s, str) for s in stops):
            raise InvalidInput("stop must be a string or a list of strings", field="stop")
        out["stop_sequences"] = stops
    if "stream" in body:
        out["stream"] = bool(body["stream"])
    metadata: dict[str, Any] = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
    user_id = body.get("user") or metadata.get("user")
    if user_id:
        out["metadata"] = {"user_id": str(user_id)}
    tools = [
        _openai_tool(t, f"tools[{i}]") for i, t in enumerate(expect_array(body.get("tools") or [], "tools"))
    ]
    if tools:
        out["tools"] = tools
        choice = _openai_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
        if choice is not None:
            out["tool_choice"] = choice
    return out


def _add_turn(turns: list[dict[str, Any]], role: str, content: str | list[dict[str, Any]]) -> None:
    # Anthropic requires user and assistant to alternate: a run of one role becomes one turn
    if isinstance(content, list) and not content:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"] = _as_blocks(turns[-1]["content"]) + _as_blocks(content)
    else:
        turns.append({"role": role, "content": content})


def _as_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return content


def _to_blocks(content: Any, where: str, *, system: bool = False) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for j, part in enumerate(expect_array(content, where)):
        part = expect_object(part, f"{where}[{j}]")
        kind = part.get("type")
        if kind in ("text", "refusal") or (system and kind is None):
            text = part.get(kind or "text")
            if not isinstance(text, str):
                raise InvalidInput(f"a {kind} part needs a string", field=f"{where}[{j}].{kind}")
            if text:  # Anthropic rejects empty text blocks
                block: dict[str, Any] = {"type": "text", "text": text}
                if isinstance(part.get("cache_control"), dict):
                    block["cache_control"] = part["cache_control"]
                blocks.append(block)
        elif kind == "image_url" and not system:
            blocks.append(_openai_image(part.get("image_url"), f"{where}[{j}].image_url"))
        elif kind == "file" and not system:
            blocks.append(_openai_file(part.get("file"), f"{where}[{j}].file"))
        else:
            raise InvalidInput(f"unsupported content part type {kind!r}", field=f"{where}[{j}].type")
    return blocks


def _openai_image(image: Any, where: str) -> dict[str, Any]:
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        raise InvalidInput("image_url needs a url", field=f"{where}.url")
    if url.startswith("data:"):
        match = _DATA_URL.match(url)
        if not match:
            raise InvalidInput("only base64 data: URLs are supported", field=f"{where}.url")
        source = {"type": "base64", "media_type": match[1], "data": match[3]}
        return {"type": "image", "source": source}
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise InvalidInput("an image url must be http(s) or a data: URL", field=f"{where}.url")


def _openai_file(file: Any, where: str) -> dict[str, Any]:
    data = file.get("file_data") if isinstance(file, dict) else None
    match = _DATA_URL.match(data) if isinstance(data, str) else None
    if not match:
        # a file_id names a file stored at OpenAI, which an Anthropic upstream cannot reach
        raise InvalidInput("only inline base64 file_data is supported", field=f"{where}.file_data")
    return {"type": "document", "source": {"type": "base64", "media_type": match[1], "data": match[3]}}


def _openai_assistant(message: dict[str, Any], where: str) -> list[dict[str, Any]]:
    content = message.get("content")
    blocks = [] if content is None else _to_blocks(content, f"{where}.content")
    calls = message.get("tool_calls") or []
    for k, call in enumerate(expect_array(calls, f"{where}.tool_calls")):
        at = f"{where}.tool_calls[{k}]"
        call = expect_object(call, at)
        function = expect_object(call.get("function"), f"{at}.function")
        call_id = expect_name(call.get("id"), f"{at}.id", "a tool call needs an id")
        name = expect_name(function.get("name"), f"{at}.function.name", "a tool call needs a function name")
        tool_input = _parse_arguments(function.get("arguments"), f"{at}.function.arguments")
        blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": tool_input})
    return blocks


def _parse_arguments(arguments: Any, where: str) -> dict[str, Any]:
    if isinstance(arguments, dict):  # some clients send the object itself
        return arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if not isinstance(arguments, str):
        raise InvalidInput("arguments must be a JSON string", field=where)
    try:
        parsed = json.loads(arguments)
    except ValueError as exc:
        raise InvalidInput(f"arguments are not valid JSON: {exc}", field=where) from exc
    if not isinstance(parsed, dict):
        raise InvalidInput("arguments must be a JSON object", field=where)
    return parsed


def _openai_tool_result(message: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = expect_name(
        message.get("tool_call_id"), f"{where}.tool_call_id", "a tool message needs a tool_call_id"
    )
    content = message.get("content")
    if content is None:
        content = ""
    result = content if isinstance(content, str) else _to_blocks(content, f"{where}.content")
    return {"type": "tool_result", "tool_use_id": call_id, "content": result}


def _openai_tool(tool: Any, where: str) -> dict[str, Any]:
    tool = expect_object(tool, where)
    if tool.get("type", "function") != "function":
        raise InvalidInput(f"unsupported tool type {tool.get('type')!r}", field=f"{where}.type")
    function = expect_object(tool.get("function"), f"{where}.function")
    name = expect_name(function.get("name"), f"{where}.function.name", "a tool needs a function name")
    out: dict[str, Any] = {"name": name}
    if function.get("description"):
        out["description"] = function["description"]
    # Anthropic requires a schema; a function without parameters takes none
    out["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
    return out


def _openai_tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    out: dict[str, Any] | None
    if choice is None:
        out = None
    elif choice in ("auto", "none"):
        out = {"type": choice}
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = expect_name(
            choice["function"].get("name"), "tool_choice.function.name", "a named tool_choice needs a name"
        )
        out = {"type": "tool", "name": name}
    else:
        raise InvalidInput(f"unsupported tool_choice {choice!r}", field="tool_choice")
    if parallel is False and (out is None or out["type"] != "none"):
        out = out or {"type": "auto"}
        out["disable_parallel_tool_use"] = True
    return out


def _max_tokens(body: dict[str, Any]) -> int:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{key} must be a positive integer", field=key)
            return value
    return DEFAULT_MAX_TOKENS
