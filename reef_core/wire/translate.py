"""Translation between the OpenAI Chat Completions and Anthropic Messages dialects.

Owns: requests, non-streaming responses and streams, in both directions.  This is what lets
Claude Code run on an OpenAI-compatible upstream and an OpenAI client on an Anthropic one.
Does not own: the SSE framing (``sse``), stream assembly (``openai``/``anthropic``) or which
direction a route needs (the daemon decides).

Choices made where the two APIs differ, kept in one place so they stay consistent:

* An assistant's several text blocks become one string joined with a blank line, in
  requests, responses and streams alike: OpenAI-compatible servers handle a plain string best.
  A user's several text blocks stay separate content parts.
* OpenAI counts cached prompt tokens inside ``prompt_tokens``; Anthropic counts them apart
  (``cache_read_input_tokens``, ``cache_creation_input_tokens``), so usage adds or subtracts.
* OpenAI allows temperature up to 2, Anthropic up to 1: the value is clamped, not refused.
* Anthropic has no ``n``; more than one choice is refused rather than silently dropped.
* Fields one side has no equivalent for (``thinking``, ``top_k``, ``response_format``…)
  are dropped: the upstream would reject them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from reef_core.errors import InvalidInput, UpstreamError
from reef_core.wire.anthropic import parse_tool_input
from reef_core.wire.openai import guess_tool_index

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "AnthropicToOpenAIStream",
    "OpenAIToAnthropicStream",
    "UpstreamStreamError",
    "anthropic_request_to_openai",
    "anthropic_response_to_openai",
    "openai_request_to_anthropic",
    "openai_response_to_anthropic",
]

#: Anthropic requires max_tokens; OpenAI clients often leave it out
DEFAULT_MAX_TOKENS = 4096

_FINISH_TO_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    # Anthropic's "refusal" makes Claude Code treat the turn as refused; a filtered OpenAI
    # reply is better shown as whatever text it carried
    "content_filter": "end_turn",
}
_STOP_TO_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)((?:;[^,;]*)*);base64,(.*)$", re.DOTALL)
_TEXT_JOIN = "\n\n"
# what the Anthropic side may hold that an OpenAI upstream never produced nor understands
_ASSISTANT_DROPPED = {"thinking", "redacted_thinking", "server_tool_use", "mcp_tool_use", "container_upload"}
_TOOL_IMAGE_NOTE = "[image: see the next user message]"


class UpstreamStreamError(UpstreamError):
    """The upstream reported an error in the middle of a stream it had already started."""

    code = "upstream_error"

    def __init__(self, message: str, *, error_type: str = "api_error") -> None:
        super().__init__(message)
        self.error_type = error_type


# ---------------------------------------------------------------- requests: OpenAI -> Anthropic


def openai_request_to_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions request body as a Messages request body."""
    body = _obj(body, "body")
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(_list(body.get("messages"), "messages")):
        where = f"messages[{i}]"
        message = _obj(message, where)
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
        out["temperature"] = min(max(_number(body["temperature"], "temperature"), 0.0), 1.0)
    if body.get("top_p") is not None:
        out["top_p"] = _number(body["top_p"], "top_p")
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else _list(stop, "stop")
        if not all(isinstance(s, str) for s in stops):
            raise InvalidInput("stop must be a string or a list of strings", field="stop")
        out["stop_sequences"] = stops
    if "stream" in body:
        out["stream"] = bool(body["stream"])
    metadata: dict[str, Any] = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
    user_id = body.get("user") or metadata.get("user")
    if user_id:
        out["metadata"] = {"user_id": str(user_id)}
    tools = [_openai_tool(t, f"tools[{i}]") for i, t in enumerate(_list(body.get("tools") or [], "tools"))]
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
    for j, part in enumerate(_list(content, where)):
        part = _obj(part, f"{where}[{j}]")
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
    for k, call in enumerate(_list(calls, f"{where}.tool_calls")):
        at = f"{where}.tool_calls[{k}]"
        call = _obj(call, at)
        function = _obj(call.get("function"), f"{at}.function")
        call_id, name = call.get("id"), function.get("name")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInput("a tool call needs an id", field=f"{at}.id")
        if not isinstance(name, str) or not name:
            raise InvalidInput("a tool call needs a function name", field=f"{at}.function.name")
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
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidInput("a tool message needs a tool_call_id", field=f"{where}.tool_call_id")
    content = message.get("content")
    if content is None:
        content = ""
    result = content if isinstance(content, str) else _to_blocks(content, f"{where}.content")
    return {"type": "tool_result", "tool_use_id": call_id, "content": result}


def _openai_tool(tool: Any, where: str) -> dict[str, Any]:
    tool = _obj(tool, where)
    if tool.get("type", "function") != "function":
        raise InvalidInput(f"unsupported tool type {tool.get('type')!r}", field=f"{where}.type")
    function = _obj(tool.get("function"), f"{where}.function")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput("a tool needs a function name", field=f"{where}.function.name")
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
        name = choice["function"].get("name")
        if not isinstance(name, str) or not name:
            raise InvalidInput("a named tool_choice needs a name", field="tool_choice.function.name")
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


# ---------------------------------------------------------------- requests: Anthropic -> OpenAI


def anthropic_request_to_openai(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages request body as a Chat Completions request body."""
    body = _obj(body, "body")
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": _anthropic_text(body["system"], "system")})
    for i, message in enumerate(_list(body.get("messages"), "messages")):
        where = f"messages[{i}]"
        message = _obj(message, where)
        role, content = message.get("role"), message.get("content")
        if role == "system":  # Claude Code sends these; the real API accepts them
            messages.append({"role": "system", "content": _anthropic_text(content, f"{where}.content")})
        elif role == "user":
            messages.extend(_anthropic_user(content, f"{where}.content"))
        elif role == "assistant":
            assistant = _anthropic_assistant(content, f"{where}.content")
            if assistant is not None:
                messages.append(assistant)
        else:
            raise InvalidInput(f"unsupported message role {role!r}", field=f"{where}.role")
    out: dict[str, Any] = {}
    if "model" in body:
        out["model"] = body["model"]
    out["messages"] = messages
    for key in ("max_tokens", "temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    if body.get("stop_sequences"):
        out["stop"] = list(_list(body["stop_sequences"], "stop_sequences"))
    if "stream" in body:
        out["stream"] = bool(body["stream"])
        if out["stream"]:  # without it OpenAI never reports usage on a stream
            out["stream_options"] = {"include_usage": True}
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and metadata.get("user_id"):
        out["user"] = str(metadata["user_id"])
    converted = (_anthropic_tool(t, i) for i, t in enumerate(_list(body.get("tools") or [], "tools")))
    tools = [tool for tool in converted if tool is not None]
    if tools:
        out["tools"] = tools
        _anthropic_tool_choice(body.get("tool_choice"), out)
    return out


def _anthropic_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for j, block in enumerate(_list(content, where)):
        block = _obj(block, f"{where}[{j}]")
        if block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise InvalidInput("only text blocks are allowed here", field=f"{where}[{j}]")
        texts.append(block["text"])
    return _TEXT_JOIN.join(t for t in texts if t)


def _anthropic_user(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results: list[dict[str, Any]] = []
    # images a tool returned: OpenAI tool messages hold text only, so they follow as user content
    carried: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(_list(content, where)):
        at = f"{where}[{j}]"
        block = _obj(block, at)
        kind = block.get("type")
        if kind == "tool_result":
            results.append(_anthropic_tool_result(block, at, carried))
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            parts.append(_anthropic_part(block, at))
    parts = carried + parts
    if not parts:
        return results or [{"role": "user", "content": ""}]
    if len(parts) == 1 and parts[0]["type"] == "text":
        return [*results, {"role": "user", "content": parts[0]["text"]}]
    return [*results, {"role": "user", "content": parts}]


def _anthropic_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise InvalidInput("a text block needs text", field=f"{where}.text")
        return {"type": "text", "text": block["text"]}
    source = block.get("source")
    source = _obj(source, f"{where}.source") if kind in ("image", "document") else {}
    if kind == "image" and source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        return {"type": "image_url", "image_url": {"url": url}}
    if kind == "image" and source.get("type") == "url":
        return {"type": "image_url", "image_url": {"url": source.get("url")}}
    if kind == "document" and source.get("type") == "base64":
        data = f"data:{source.get('media_type')};base64,{source.get('data')}"
        return {"type": "file", "file": {"file_data": data, "filename": block.get("title") or "document"}}
    if kind == "document" and source.get("type") == "text":
        return {"type": "text", "text": str(source.get("data", ""))}
    detail = f" with a {source.get('type')!r} source" if source else ""
    raise InvalidInput(f"unsupported content block {kind!r}{detail}", field=f"{where}.type")


def _anthropic_tool_result(
    block: dict[str, Any], where: str, carried: list[dict[str, Any]]
) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidInput("a tool_result needs a tool_use_id", field=f"{where}.tool_use_id")
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        texts = []
        for k, inner in enumerate(_list(content, f"{where}.content")):
            part = _anthropic_part(_obj(inner, f"{where}.content[{k}]"), f"{where}.content[{k}]")
            if part["type"] == "text":
                texts.append(part["text"])
            else:
                texts.append(_TOOL_IMAGE_NOTE)
                carried.append(part)
        text = "\n".join(texts)
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _anthropic_assistant(content: Any, where: str) -> dict[str, Any] | None:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts, calls = [], []
    for j, block in enumerate(_list(content, where)):
        at = f"{where}[{j}]"
        block = _obj(block, at)
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            calls.append(_tool_call(block, at))
        elif kind in _ASSISTANT_DROPPED or str(kind).endswith("_tool_result"):
            continue  # server-side tools ran at Anthropic; an OpenAI upstream has no such thing
        else:
            raise InvalidInput(f"unsupported assistant content block {kind!r}", field=f"{at}.type")
    text = _TEXT_JOIN.join(t for t in texts if t)
    if not text and not calls:
        return None  # only thinking: nothing an OpenAI upstream could use
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_call(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id, name = block.get("id"), block.get("name")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidInput("a tool_use block needs an id", field=f"{where}.id")
    if not isinstance(name, str) or not name:
        raise InvalidInput("a tool_use block needs a name", field=f"{where}.name")
    arguments = _compact(block.get("input") if block.get("input") is not None else {})
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _anthropic_tool(tool: Any, i: int) -> dict[str, Any] | None:
    tool = _obj(tool, f"tools[{i}]")
    if tool.get("input_schema") is None:
        return None  # a server tool (web_search_20250305, …): Anthropic runs it, OpenAI cannot
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput("a tool needs a name", field=f"tools[{i}].name")
    function: dict[str, Any] = {"name": name}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool["input_schema"]
    return {"type": "function", "function": function}


def _anthropic_tool_choice(choice: Any, out: dict[str, Any]) -> None:
    if choice is None:
        return
    choice = _obj(choice, "tool_choice")
    kind = choice.get("type")
    if kind in ("auto", "none"):
        out["tool_choice"] = kind
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidInput("a tool choice of type tool needs a name", field="tool_choice.name")
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise InvalidInput(f"unsupported tool_choice type {kind!r}", field="tool_choice.type")
    if choice.get("disable_parallel_tool_use") and kind != "none":
        out["parallel_tool_calls"] = False


# ---------------------------------------------------------------- responses


def anthropic_response_to_openai(body: dict[str, Any], *, created: int = 0) -> dict[str, Any]:
    """A non-streaming Messages response as a ``chat.completion``."""
    body = _obj(body, "body")
    texts, calls = [], []
    for j, block in enumerate(_list(body.get("content") or [], "content")):
        block = _obj(block, f"content[{j}]")
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append(_tool_call(block, f"content[{j}]"))
        # thinking and server-tool blocks have no Chat Completions form
    message: dict[str, Any] = {"role": "assistant", "content": _TEXT_JOIN.join(t for t in texts if t) or None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": body.get("id", ""),
        "object": "chat.completion",
        "created": created,
        "model": body.get("model", ""),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish(body.get("stop_reason")),
            }
        ],
        "usage": _usage_to_openai(body.get("usage")),
    }


def openai_response_to_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` as a Messages response (first choice only)."""
    body = _obj(body, "body")
    choices = _list(body.get("choices") or [], "choices")
    choice = _obj(choices[0], "choices[0]") if choices else {}
    message = _obj(choice.get("message") or {}, "choices[0].message")
    content: list[dict[str, Any]] = []
    text = _openai_text(message.get("content")) or message.get("refusal") or ""
    if text:
        content.append({"type": "text", "text": text})
    calls = list(message.get("tool_calls") or [])
    if isinstance(message.get("function_call"), dict):  # the pre-tools API, still served by some
        calls.append({"function": message["function_call"]})
    for k, call in enumerate(calls):
        at = f"choices[0].message.tool_calls[{k}]"
        function = _obj(_obj(call, at).get("function"), f"{at}.function")
        arguments = function.get("arguments")
        tool_input = arguments if isinstance(arguments, dict) else parse_tool_input(str(arguments or ""))
        call_id = call.get("id") or _tool_id(str(body.get("id", "")), k)
        content.append(
            {"type": "tool_use", "id": call_id, "name": function.get("name", ""), "input": tool_input}
        )
    return {
        "id": body.get("id", ""),
        "type": "message",
        "role": "assistant",
        "model": body.get("model", ""),
        "content": content,
        "stop_reason": _stop(choice.get("finish_reason")),
        "stop_sequence": None,
        "usage": _usage_to_anthropic(body.get("usage")),
    }


def _openai_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _finish(stop_reason: Any) -> str | None:
    return None if stop_reason is None else _STOP_TO_FINISH.get(stop_reason, "stop")


def _stop(finish_reason: Any) -> str | None:
    return None if finish_reason is None else _FINISH_TO_STOP.get(finish_reason, "end_turn")


def _usage_to_openai(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    cached = _count(usage.get("cache_read_input_tokens"))
    prompt = _count(usage.get("input_tokens")) + cached + _count(usage.get("cache_creation_input_tokens"))
    completion = _count(usage.get("output_tokens"))
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def _usage_to_anthropic(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    out = {
        "input_tokens": max(_count(usage.get("prompt_tokens")) - cached, 0),
        "output_tokens": _count(usage.get("completion_tokens")),
    }
    if cached:
        out["cache_read_input_tokens"] = cached
    return out


# ---------------------------------------------------------------- streams


@dataclass
class _Block:
    """An Anthropic content block being relayed (mutable: the relay updates it per delta)."""

    kind: str  # "text", "tool" or "skip"
    tool: int = 0
    start_input: Any = None
    sent_text: bool = False
    sent_arguments: bool = False


class AnthropicToOpenAIStream:
    """Messages stream events in, ``chat.completion.chunk`` dicts out."""

    def __init__(self, model: str, created: int = 0) -> None:
        self._model = model
        self._created = created
        self._id = ""
        self._started = False
        self._blocks: dict[int, _Block] = {}
        self._tools = 0
        self._wrote_text = False
        self._usage: dict[str, Any] = {}
        self._finished = False
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        data = _obj(data, "data")
        if event == "error":
            raise _upstream_error(data.get("error"))
        if self._done or event not in _ANTHROPIC_EVENTS:
            return []  # ping, and event types newer than this code
        out: list[dict[str, Any]] = []
        if event == "message_start":
            started = _obj(data.get("message"), "message")
            self._id = str(started.get("id") or "")
            self._merge_usage(started.get("usage"))
        if not self._started:
            self._started = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        if event == "content_block_start":
            self._block_start(_stream_index(data), _obj(data.get("content_block"), "content_block"), out)
        elif event == "content_block_delta":
            self._block_delta(_stream_index(data), _obj(data.get("delta"), "delta"), out)
        elif event == "content_block_stop":
            self._block_stop(_stream_index(data), out)
        elif event == "message_delta":
            self._merge_usage(data.get("usage"))
            delta: dict[str, Any] = data["delta"] if isinstance(data.get("delta"), dict) else {}
            if delta.get("stop_reason") and not self._finished:
                self._finished = True
                out.append(self._chunk({}, _finish(delta["stop_reason"])))
        elif event == "message_stop":
            out.append(self._usage_chunk())
            self._done = True
        return out

    def finish(self) -> list[dict[str, Any]]:
        """At the end of the upstream stream: the usage chunk, if it was owed and never sent."""
        if self._done:
            return []
        self._done = True
        return [self._usage_chunk()] if self._finished else []

    def _block_start(self, index: int, block: dict[str, Any], out: list[dict[str, Any]]) -> None:
        kind = block.get("type")
        if kind == "text":
            self._blocks[index] = _Block("text")
            self._text(self._blocks[index], str(block.get("text") or ""), out)
        elif kind == "tool_use":
            tool = self._blocks[index] = _Block("tool", self._tools, block.get("input"))
            self._tools += 1
            function = {"name": block.get("name", ""), "arguments": ""}
            call = {"index": tool.tool, "id": block.get("id", ""), "type": "function", "function": function}
            out.append(self._chunk({"tool_calls": [call]}))
        else:
            self._blocks[index] = _Block("skip")  # thinking and server-tool blocks

    def _block_delta(self, index: int, delta: dict[str, Any], out: list[dict[str, Any]]) -> None:
        block = self._blocks.get(index)
        if block is None:
            raise InvalidInput(f"a delta for block {index}, which never started", field="index")
        if block.kind == "text" and delta.get("type") == "text_delta":
            self._text(block, str(delta.get("text") or ""), out)
        elif block.kind == "tool" and delta.get("type") == "input_json_delta":
            fragment = str(delta.get("partial_json") or "")
            if fragment:
                block.sent_arguments = True
                out.append(self._arguments(block.tool, fragment))

    def _block_stop(self, index: int, out: list[dict[str, Any]]) -> None:
        block = self._blocks.get(index)
        if block is not None and block.kind == "tool" and not block.sent_arguments:
            # no input_json_delta came: the input (usually {}) was whole in the start event
            start = block.start_input if block.start_input is not None else {}
            out.append(self._arguments(block.tool, _compact(start)))
            block.sent_arguments = True

    def _text(self, block: _Block, text: str, out: list[dict[str, Any]]) -> None:
        if not text:
            return
        if self._wrote_text and not block.sent_text:
            text = _TEXT_JOIN + text  # the same separator the non-streaming translation uses
        block.sent_text = self._wrote_text = True
        out.append(self._chunk({"content": text}))

    def _arguments(self, tool: int, fragment: str) -> dict[str, Any]:
        return self._chunk({"tool_calls": [{"index": tool, "function": {"arguments": fragment}}]})

    def _merge_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**self._head(), "choices": [choice]}

    def _usage_chunk(self) -> dict[str, Any]:
        return {**self._head(), "choices": [], "usage": _usage_to_openai(self._usage)}

    def _head(self) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
        }


_ANTHROPIC_EVENTS = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
}


class OpenAIToAnthropicStream:
    """``chat.completion.chunk`` dicts in, Messages stream ``(event, data)`` pairs out.

    Only choice 0 is relayed (Anthropic has one).  The end (message_delta, message_stop) is
    held back after finish_reason until usage arrives, since OpenAI sends usage last.
    """

    def __init__(self, model: str) -> None:
        self._model = model
        self._id = ""
        self._started = False
        self._next_index = 0
        self._open: int | None = None
        self._open_text = False
        self._tool_blocks: dict[int, int] = {}
        self._tool_ids: dict[int, str] = {}
        self._stop_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        chunk = _obj(chunk, "chunk")
        if chunk.get("error"):  # some OpenAI-compatible servers report failures in-stream
            raise _upstream_error(chunk["error"])
        if self._done:
            return []
        out: list[tuple[str, dict[str, Any]]] = []
        self._start(str(chunk.get("id") or ""), out)
        for i, choice in enumerate(_list(chunk.get("choices") or [], "choices")):
            choice = _obj(choice, f"choices[{i}]")
            if choice.get("index", 0) != 0:
                continue
            delta = _obj(choice.get("delta") or {}, f"choices[{i}].delta")
            text = "".join(delta[k] for k in ("content", "refusal") if isinstance(delta.get(k), str))
            if text:
                self._text(text, out)
            calls = _list(delta.get("tool_calls") or [], f"choices[{i}].delta.tool_calls")
            for j, call in enumerate(calls):
                self._tool(_obj(call, f"choices[{i}].delta.tool_calls[{j}]"), out)
            if choice.get("finish_reason"):
                self._close(out)
                self._stop_reason = _stop(choice["finish_reason"])
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
            if self._stop_reason is not None:
                self._end(out)
        return out

    def finish(self) -> list[tuple[str, dict[str, Any]]]:
        """At ``[DONE]`` (or the end of the body): close what is open and end the message."""
        if self._done:
            return []
        out: list[tuple[str, dict[str, Any]]] = []
        self._start("", out)
        self._close(out)
        if self._stop_reason is None:  # a server that never sent finish_reason
            self._stop_reason = "tool_use" if self._tool_blocks else "end_turn"
        self._end(out)
        return out

    def _start(self, chunk_id: str, out: list[tuple[str, dict[str, Any]]]) -> None:
        if self._started:
            return
        self._started = True
        self._id = f"msg_{chunk_id or 'reef'}"
        message: dict[str, Any] = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        out.append(("message_start", {"type": "message_start", "message": message}))

    def _text(self, text: str, out: list[tuple[str, dict[str, Any]]]) -> None:
        if self._open is None or not self._open_text:
            self._open_block({"type": "text", "text": ""}, out)
            self._open_text = True
        delta = {"type": "text_delta", "text": text}
        out.append(
            ("content_block_delta", {"type": "content_block_delta", "index": self._open, "delta": delta})
        )

    def _tool(self, call: dict[str, Any], out: list[tuple[str, dict[str, Any]]]) -> None:
        tool = call["index"] if "index" in call else guess_tool_index(self._tool_ids, call.get("id"))
        function: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
        if tool not in self._tool_blocks:
            call_id = call.get("id") or _tool_id(self._id, len(self._tool_blocks))
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": call_id,
                "name": function.get("name") or "",
                "input": {},
            }
            self._tool_blocks[tool] = self._open_block(block, out)
            self._tool_ids[tool] = call_id
            self._open_text = False
        fragment = function.get("arguments")
        if isinstance(fragment, str) and fragment:
            index = self._tool_blocks[tool]
            if index != self._open:
                # Anthropic blocks cannot reopen; OpenAI sends each call's arguments in one run
                raise InvalidInput(f"arguments for tool call {tool} after it ended", field="tool_calls")
            delta = {"type": "input_json_delta", "partial_json": fragment}
            out.append(
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            )

    def _open_block(self, block: dict[str, Any], out: list[tuple[str, dict[str, Any]]]) -> int:
        self._close(out)
        index = self._open = self._next_index
        self._next_index += 1
        out.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})
        )
        return index

    def _close(self, out: list[tuple[str, dict[str, Any]]]) -> None:
        if self._open is not None:
            out.append(("content_block_stop", {"type": "content_block_stop", "index": self._open}))
            self._open = None

    def _end(self, out: list[tuple[str, dict[str, Any]]]) -> None:
        usage = _usage_to_anthropic(self._usage) if self._usage is not None else {"output_tokens": 0}
        delta = {"stop_reason": self._stop_reason, "stop_sequence": None}
        out.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(("message_stop", {"type": "message_stop"}))
        self._done = True


# ---------------------------------------------------------------- small shared checks


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput("expected a JSON object", field=where)
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInput("expected a JSON array", field=where)
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput("expected a number", field=where)
    return float(value)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _stream_index(data: dict[str, Any]) -> int:
    index = data.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise InvalidInput("index must be a non-negative integer", field="index")
    return index


def _upstream_error(error: Any) -> UpstreamStreamError:
    if not isinstance(error, dict):
        error = {"message": str(error)}
    message = str(error.get("message") or "the upstream stream failed")
    return UpstreamStreamError(message, error_type=str(error.get("type") or "api_error"))


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _tool_id(message_id: str, k: int) -> str:
    # Anthropic accepts only [A-Za-z0-9_-] in a tool_use id, and it comes back in the next turn
    return f"call_{re.sub(r'[^A-Za-z0-9_-]', '', message_id)}_{k}"
