"""A Messages request body as a Chat Completions request body, for an OpenAI-compatible upstream.

Owns: ``anthropic_request_to_openai``.  Choices made where the two APIs differ:

* Fields OpenAI has no equivalent for (``thinking``, ``top_k``…) are dropped: the upstream
  would reject them.  So are thinking blocks, server tools and their blocks: they ran at
  Anthropic, and an OpenAI upstream has no such thing.
* OpenAI tool messages hold text only: images a tool returned follow the tool messages as
  user content, with a note where they were.
* A streamed request asks for usage (``stream_options.include_usage``), which OpenAI
  otherwise never reports on a stream.

Does not own: the other direction (``requests_to_anthropic``), the text and tool-call
conventions shared with responses and streams (``content``).
"""

from __future__ import annotations

from typing import Any

from reef_core.errors import InvalidInput
from reef_core.wire.content import TEXT_JOIN, tool_use_as_call
from reef_core.wire.shapes import expect_array, expect_name, expect_object

__all__ = ["anthropic_request_to_openai"]

# what the Anthropic side may hold that an OpenAI upstream never produced nor understands
_ASSISTANT_DROPPED = {"thinking", "redacted_thinking", "server_tool_use", "mcp_tool_use", "container_upload"}
_TOOL_IMAGE_NOTE = "[image: see the next user message]"


def anthropic_request_to_openai(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages request body as a Chat Completions request body."""
    body = expect_object(body, "body")
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": _anthropic_text(body["system"], "system")})
    for i, message in enumerate(expect_array(body.get("messages"), "messages")):
        where = f"messages[{i}]"
        message = expect_object(message, where)
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
        out["stop"] = list(expect_array(body["stop_sequences"], "stop_sequences"))
    if "stream" in body:
        out["stream"] = bool(body["stream"])
        if out["stream"]:  # without it OpenAI never reports usage on a stream
            out["stream_options"] = {"include_usage": True}
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and metadata.get("user_id"):
        out["user"] = str(metadata["user_id"])
    converted = (_anthropic_tool(t, i) for i, t in enumerate(expect_array(body.get("tools") or [], "tools")))
    tools = [tool for tool in converted if tool is not None]
    if tools:
        out["tools"] = tools
        _anthropic_tool_choice(body.get("tool_choice"), out)
    return out


def _anthropic_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for j, block in enumerate(expect_array(content, where)):
        block = expect_object(block, f"{where}[{j}]")
        if block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise InvalidInput("only text blocks are allowed here", field=f"{where}[{j}]")
        texts.append(block["text"])
    return TEXT_JOIN.join(t for t in texts if t)


def _anthropic_user(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results: list[dict[str, Any]] = []
    # images a tool returned: OpenAI tool messages hold text only, so they follow as user content
    carried: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(expect_array(content, where)):
        at = f"{where}[{j}]"
        block = expect_object(block, at)
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
    source = expect_object(source, f"{where}.source") if kind in ("image", "document") else {}
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
    call_id = expect_name(
        block.get("tool_use_id"), f"{where}.tool_use_id", "a tool_result needs a tool_use_id"
    )
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        texts = []
        for k, inner in enumerate(expect_array(content, f"{where}.content")):
            part = _anthropic_part(expect_object(inner, f"{where}.content[{k}]"), f"{where}.content[{k}]")
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
    for j, block in enumerate(expect_array(content, where)):
        at = f"{where}[{j}]"
        block = expect_object(block, at)
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            calls.append(tool_use_as_call(block, at))
        elif kind in _ASSISTANT_DROPPED or str(kind).endswith("_tool_result"):
            continue  # server-side tools ran at Anthropic; an OpenAI upstream has no such thing
        else:
            raise InvalidInput(f"unsupported assistant content block {kind!r}", field=f"{at}.type")
    text = TEXT_JOIN.join(t for t in texts if t)
    if not text and not calls:
        return None  # only thinking: nothing an OpenAI upstream could use
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _anthropic_tool(tool: Any, i: int) -> dict[str, Any] | None:
    tool = expect_object(tool, f"tools[{i}]")
    if tool.get("input_schema") is None:
        return None  # a server tool (web_search_20250305, …): Anthropic runs it, OpenAI cannot
    name = expect_name(tool.get("name"), f"tools[{i}].name", "a tool needs a name")
    function: dict[str, Any] = {"name": name}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool["input_schema"]
    return {"type": "function", "function": function}


def _anthropic_tool_choice(choice: Any, out: dict[str, Any]) -> None:
    if choice is None:
        return
    choice = expect_object(choice, "tool_choice")
    kind = choice.get("type")
    if kind in ("auto", "none"):
        out["tool_choice"] = kind
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "tool":
        name = expect_name(choice.get("name"), "tool_choice.name", "a tool choice of type tool needs a name")
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise InvalidInput(f"unsupported tool_choice type {kind!r}", field="tool_choice.type")
    if choice.get("disable_parallel_tool_use") and kind != "none":
        out["parallel_tool_calls"] = False
