"""The OpenAI Responses API (``POST /v1/responses``) as Chat Completions, and back.

Owns: a Responses request as a Chat Completions request (``responses_request_to_chat``), a
``chat.completion`` as the Response object the client asked for (``chat_to_response``), the
pieces a Response is built from (``response_object``, ``response_usage``) and the assistant
turn a stored Response stands for (``response_to_chat_message``), for readers of records.

What translates: messages (``developer`` becomes ``system``), ``instructions``, text, image and
inline file parts, function tools, ``function_call`` items and their ``function_call_output``,
``tool_choice``, ``text.format``, ``reasoning.effort`` and the sampling fields.

What a harness sends that a chat upstream has no form for, and what happens to it (Codex sends
all of these on its first request; :func:`left_out` lists them for the record):

* a ``namespace`` tool (a group of function tools, Codex's ``multi_agent_v1``): each of its
  tools is offered as the plain function ``<namespace>__<name>`` (:func:`tool_names`), and a
  call to one is given back under its own ``name`` with its ``namespace``, as OpenAI does;
* a hosted tool (``web_search``, ``file_search``, ``code_interpreter``…, any type but
  ``function`` and ``namespace``) runs on OpenAI's servers only, and a freeform ``custom``
  tool has no function form: left out, as are the hosted tools' past calls in ``input``;
* settings about OpenAI's own storage and caching (``include``, ``store``,
  ``prompt_cache_key``, ``client_metadata``, ``metadata``…): dropped;
* a ``reasoning`` item the upstream wrote (its ``reasoning_content``, given back to the
  harness as ``reasoning_text``) goes back as the next assistant turn's ``reasoning_content``,
  which reasoning servers ask to see again within a tool loop; an encrypted one, from OpenAI,
  is dropped.

A request is refused only when what is left cannot be served: ``previous_response_id``,
``conversation``, ``prompt``, ``background`` and item references need OpenAI's server-side
state, and a ``tool_choice`` that names a left-out tool cannot be honoured.
Does not own: streams (``responses_stream``) or the Anthropic leg (``requests_to_anthropic``,
``responses``), which a chat request or answer goes through when the upstream is Anthropic.
"""

from __future__ import annotations

from typing import Any

from reef_core.errors import InvalidInput
from reef_core.wire.content import TEXT_JOIN
from reef_core.wire.shapes import expect_array, expect_name, expect_object

__all__ = [
    "chat_to_response",
    "check_responses_request",
    "function_call_item",
    "item_id",
    "left_out",
    "message_item",
    "reasoning_item",
    "response_object",
    "response_to_chat_message",
    "response_usage",
    "responses_request_to_chat",
    "text_part",
    "tool_names",
]

# fields that need state or tools only OpenAI's own Responses endpoint has
_STATEFUL = ("previous_response_id", "conversation", "prompt")
_KEPT = ("model", "temperature", "top_p", "user", "parallel_tool_calls", "service_tier", "seed")
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
# what the translation reads: every other field of a request is dropped, and noted (left_out)
_READ = {*_KEPT, "input", "instructions", "tools", "tool_choice", "stream", "max_output_tokens"}
_READ |= {"reasoning", "top_logprobs", "text", "background", *_STATEFUL}
_NAMESPACE_JOIN = "__"  # a namespaced tool's chat name: ``<namespace>__<name>``
_HOSTED_WHY = "runs only on OpenAI's servers, which this upstream is not"
_CUSTOM_WHY = "a freeform tool (its input is not JSON) has no chat-completions form"


def check_responses_request(body: dict[str, Any]) -> None:
    """The checks every ``/v1/responses`` body passes, forwarded or translated."""
    body = expect_object(body, "body")
    if "model" in body and not isinstance(body["model"], str):
        raise InvalidInput("model must be a string", field="model")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise InvalidInput("stream must be true or false", field="stream")
    if "input" in body and not isinstance(body["input"], str | list):
        raise InvalidInput("input must be a string or a list of items", field="input")
    if "instructions" in body and not isinstance(body["instructions"], str | None):
        raise InvalidInput("instructions must be a string", field="instructions")


def responses_request_to_chat(body: dict[str, Any], *, strict: bool = True) -> dict[str, Any]:
    """A Responses request body as a Chat Completions request body.

    ``strict=False`` reads a stored request: what has no chat form is left out, not refused.
    """
    check_responses_request(body)
    if strict:
        for key in _STATEFUL:
            if body.get(key) is not None:
                raise InvalidInput(
                    f"{key} needs state kept by OpenAI's Responses API, which this upstream does not "
                    "have (reef translates /v1/responses to chat completions for it): send the "
                    "whole conversation in input instead",
                    field=key,
                )
        if body.get("background") is True:
            raise InvalidInput("background responses need OpenAI's Responses API", field="background")
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        messages.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif given is None:
        if strict:
            raise InvalidInput("input is required", field="input")
    else:
        for i, item in enumerate(given):
            _add_item(messages, expect_object(item, f"input[{i}]"), f"input[{i}]", strict)
    chat: dict[str, Any] = {key: body[key] for key in _KEPT if body.get(key) is not None}
    chat["messages"] = _with_reasoning(messages)
    tools = _tools(body)
    if tools:
        chat["tools"] = tools
    choice = _tool_choice(body.get("tool_choice"), bool(body.get("tools")) and not tools, strict)
    if choice is not None:
        chat["tool_choice"] = choice
    _limits(body, chat)
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _add_item(messages: list[dict[str, Any]], item: dict[str, Any], where: str, strict: bool) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = _ROLES.get(item.get("role"))  # type: ignore[arg-type]
        if role is None:
            raise InvalidInput(f"unsupported role {item.get('role')!r}", field=f"{where}.role")
        content = _content(item.get("content"), role, where, strict)
        last = messages[-1] if messages else None
        if role == "assistant" and last is not None and _thought_only(last):
            last["content"] = content  # the answer its reasoning item stood before
        else:
            messages.append({"role": role, "content": content})
    elif kind == "function_call":
        call_id = expect_name(item.get("call_id"), f"{where}.call_id", "a function_call needs a call_id")
        name = expect_name(item.get("name"), f"{where}.name", "a function_call needs a name")
        if isinstance(item.get("namespace"), str) and item["namespace"]:
            name = _flat(item["namespace"], name)
        arguments = item.get("arguments")
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else "{}"},
        }
        last = messages[-1] if messages else None
        if last is None or last["role"] != "assistant":  # calls after text join that turn
            last = {"role": "assistant", "content": None}
            messages.append(last)
        last.setdefault("tool_calls", []).append(call)
    elif kind == "function_call_output":
        call_id = expect_name(
            item.get("call_id"), f"{where}.call_id", "a function_call_output needs a call_id"
        )
        output = _tool_output(item.get("output"), f"{where}.output", strict)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
    elif kind == "reasoning":
        thought = _thought(item)
        if thought:  # the upstream's own reasoning, given back before the turn it led to
            messages.append({"role": "assistant", "content": None, "reasoning_content": thought})
    elif kind == "item_reference" and strict:
        raise InvalidInput(
            "an item_reference needs OpenAI's Responses API (its stored items); send the item "
            "itself in input instead",
            field=f"{where}.type",
        )
    # any other item records a hosted or freeform tool's run: left out with its tool (left_out)


def _thought(item: dict[str, Any]) -> str:
    """The readable text of a reasoning item (none when OpenAI encrypted it)."""
    content = item.get("content")
    parts = content if isinstance(content, list) else []
    return TEXT_JOIN.join(
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"]
    )


def _thought_only(message: dict[str, Any]) -> bool:
    return message["role"] == "assistant" and message.get("content") is None and "tool_calls" not in message


def _with_reasoning(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages without a reasoning that led to no turn (nothing to give it back with)."""
    return [m for m in messages if not (_thought_only(m) and "reasoning_content" in m)]


def _content(content: Any, role: str, where: str, strict: bool) -> str | list[dict[str, Any]] | None:
    if isinstance(content, str) or content is None:
        return content
    parts: list[dict[str, Any]] = []
    for j, raw in enumerate(expect_array(content, f"{where}.content")):
        part = _part(expect_object(raw, f"{where}.content[{j}]"), f"{where}.content[{j}]", strict)
        if part is not None:
            parts.append(part)
    if role != "user" and all(p["type"] == "text" for p in parts):
        # assistant and system turns as one string: what chat servers handle best
        return TEXT_JOIN.join(p["text"] for p in parts if p["text"])
    if role != "user":
        if strict:
            raise InvalidInput(f"a {role} message can carry only text", field=f"{where}.content")
        return TEXT_JOIN.join(p["text"] for p in parts if p["type"] == "text")
    return parts


def _part(part: dict[str, Any], where: str, strict: bool) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text", "refusal"):
        text = part.get("refusal" if kind == "refusal" else "text")
        if not isinstance(text, str):
            raise InvalidInput(f"an {kind} part needs a string", field=f"{where}.text")
        return {"type": "text", "text": text}
    if kind == "input_image":
        url = part.get("image_url")
        if isinstance(url, str) and url:
            image: dict[str, Any] = {"url": url}
            if part.get("detail") is not None:
                image["detail"] = part["detail"]
            return {"type": "image_url", "image_url": image}
        if strict:
            raise InvalidInput(
                "an input_image needs an image_url (a file_id names a file stored at OpenAI)",
                field=f"{where}.image_url",
            )
        return None
    if kind == "input_file" and isinstance(part.get("file_data"), str):
        file = {"file_data": part["file_data"]}
        if isinstance(part.get("filename"), str):
            file["filename"] = part["filename"]
        return {"type": "file", "file": file}
    if strict:
        hint = " inline, as file_data" if kind == "input_file" else ""
        raise InvalidInput(f"unsupported content part {kind!r}{hint}", field=f"{where}.type")
    return None


def _tool_output(output: Any, where: str, strict: bool) -> str:
    if isinstance(output, str):
        return output
    texts = []
    for j, raw in enumerate(expect_array(output, where)):
        part = _part(expect_object(raw, f"{where}[{j}]"), f"{where}[{j}]", strict)
        if part is not None and part["type"] == "text":
            texts.append(part["text"])
        elif part is not None and strict:
            raise InvalidInput("a tool's output can carry only text here", field=f"{where}[{j}].type")
    return TEXT_JOIN.join(texts)


def _flat(namespace: str, name: str) -> str:
    return f"{namespace}{_NAMESPACE_JOIN}{name}"


def tool_names(body: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """``{chat name: (namespace, name)}`` for each function inside a ``namespace`` tool of a
    Responses request: how its calls are named upstream, and how they are given back."""
    names: dict[str, tuple[str, str]] = {}
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict) or tool.get("type") != "namespace":
            continue
        space, inner = tool.get("name"), tool.get("tools")
        if not isinstance(space, str) or not isinstance(inner, list):
            continue
        for member in inner:
            if isinstance(member, dict) and member.get("type") == "function":
                name = member.get("name")
                if isinstance(name, str):
                    names[_flat(space, name)] = (space, name)
    return names


def _tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's function tools in chat's form, each namespace's members among them."""
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(expect_array(body.get("tools") or [], "tools")):
        tool = expect_object(raw, f"tools[{i}]")
        if tool.get("type") == "function":
            out.append(_function(tool, f"tools[{i}]"))
        elif tool.get("type") == "namespace":
            space = expect_name(tool.get("name"), f"tools[{i}].name", "a namespace tool needs a name")
            for j, member in enumerate(expect_array(tool.get("tools") or [], f"tools[{i}].tools")):
                member = expect_object(member, f"tools[{i}].tools[{j}]")
                if member.get("type") == "function":
                    function = _function(member, f"tools[{i}].tools[{j}]")
                    function["function"]["name"] = _flat(space, function["function"]["name"])
                    if isinstance(tool.get("description"), str) and tool["description"]:
                        said = function["function"].get("description") or ""
                        function["function"]["description"] = f"({tool['description']}) {said}".strip()
                    out.append(function)
    return out


def _function(tool: dict[str, Any], where: str) -> dict[str, Any]:
    name = expect_name(tool.get("name"), f"{where}.name", "a function tool needs a name")
    function: dict[str, Any] = {"name": name}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def left_out(body: dict[str, Any]) -> list[dict[str, str]]:
    """What of a Responses request a chat (or Anthropic) upstream is not sent, and why: each
    ``{"field", "kind", "why"}`` (``kind``: the tool's or item's type), for the record."""
    out: list[dict[str, str]] = []
    tools = body.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "namespace":
            inner = tool.get("tools")
            for j, member in enumerate(inner if isinstance(inner, list) else []):
                member_kind = member.get("type") if isinstance(member, dict) else None
                if member_kind != "function":
                    out.append(_left(f"tools[{i}].tools[{j}]", member_kind))
        elif kind != "function":
            out.append(_left(f"tools[{i}]", kind))
    given = body.get("input")
    for i, item in enumerate(given if isinstance(given, list) else []):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "reasoning" and not _thought(item):
            out.append({"field": f"input[{i}]", "kind": kind, "why": "encrypted by OpenAI, for OpenAI alone"})
        elif kind not in ("message", "function_call", "function_call_output", "reasoning", "item_reference"):
            out.append(_left(f"input[{i}]", kind))
    for key in body:
        if key not in _READ:
            out.append(
                {"field": key, "kind": "setting", "why": "OpenAI's own; chat completions has no such setting"}
            )
    return out


def _left(field: str, kind: Any) -> dict[str, str]:
    kind = str(kind)
    freeform = kind == "custom" or kind.startswith("custom_tool_call")
    return {"field": field, "kind": kind, "why": _CUSTOM_WHY if freeform else _HOSTED_WHY}


def _tool_choice(choice: Any, all_left_out: bool, strict: bool) -> Any:
    if choice is None or choice in ("auto", "none"):
        return choice
    if choice == "required":
        if all_left_out and strict:
            raise InvalidInput(
                "tool_choice is required, but none of the tools can run on this upstream: only "
                "function tools can (the others run only on OpenAI's servers)",
                field="tool_choice",
            )
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = expect_name(choice.get("name"), "tool_choice.name", "a function tool_choice needs a name")
        if isinstance(choice.get("namespace"), str) and choice["namespace"]:
            name = _flat(choice["namespace"], name)
        return {"type": "function", "function": {"name": name}}
    if strict:
        kind = choice.get("type") if isinstance(choice, dict) else choice
        raise InvalidInput(
            f"tool_choice {kind!r} cannot be honoured here: this upstream runs function tools only",
            field="tool_choice",
        )
    return None


def _limits(body: dict[str, Any], chat: dict[str, Any]) -> None:
    """Token limits, reasoning effort, log-probs and the output format, in chat's names."""
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    if body.get("top_logprobs") is not None:
        chat["logprobs"] = True
        chat["top_logprobs"] = body["top_logprobs"]
    text = body.get("text")
    if not isinstance(text, dict):
        return
    if text.get("verbosity") is not None:
        chat["verbosity"] = text["verbosity"]
    form = text.get("format")
    if not isinstance(form, dict) or form.get("type") in (None, "text"):
        return
    if form.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    elif form.get("type") == "json_schema":
        schema = {k: form[k] for k in ("name", "schema", "strict", "description") if k in form}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    else:
        raise InvalidInput(f"unsupported text.format {form.get('type')!r}", field="text.format.type")


# -- the answer ------------------------------------------------------------------------------------


def item_id(prefix: str, response_id: str, index: int) -> str:
    """A stable id for output item ``index`` of a response: ``msg_<response>_0``, ``fc_…``."""
    return f"{prefix}_{response_id.removeprefix('resp_')}_{index}"


def response_usage(usage: Any) -> dict[str, Any] | None:
    """Chat ``usage`` as Responses ``usage`` (None when the upstream gave none)."""
    if not isinstance(usage, dict):
        return None
    prompt, completion = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    prompt_details = usage.get("prompt_tokens_details")
    output_details = usage.get("completion_tokens_details")
    cached = _count(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else 0
    reasoning = _count(output_details.get("reasoning_tokens")) if isinstance(output_details, dict) else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": _count(usage.get("total_tokens")) or prompt + completion,
    }


def response_object(
    request: dict[str, Any],
    *,
    response_id: str,
    created_at: int,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    incomplete: str | None = None,
    completed_at: int | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Response object; the request's own settings are echoed, as OpenAI echoes them."""
    reasoning = _object(request.get("reasoning"))
    text = _object(request.get("text"))
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "completed_at": completed_at if status == "completed" else None,
        "model": model,
        "error": error,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": request.get("instructions"),
        "metadata": request.get("metadata") or {},
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "temperature": request.get("temperature"),
        "top_p": request.get("top_p"),
        "max_output_tokens": request.get("max_output_tokens"),
        "previous_response_id": None,
        "reasoning": {"effort": reasoning.get("effort"), "summary": None},
        "text": {"format": {"type": "text"}, **text},
        "truncation": "disabled",
        "user": request.get("user"),
        "output": output,
        "usage": usage,
    }


def chat_to_response(
    chat: dict[str, Any], request: dict[str, Any], *, response_id: str, created_at: int, completed_at: int
) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` (first choice) as the Response to ``request``."""
    chat = expect_object(chat, "body")
    choices = expect_array(chat.get("choices") or [], "choices")
    choice = expect_object(choices[0], "choices[0]") if choices else {}
    message = expect_object(choice.get("message") or {}, "choices[0].message")
    output: list[dict[str, Any]] = []
    thought = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(thought, str) and thought:
        output.append(reasoning_item(item_id("rs", response_id, len(output)), thought))
    parts = []
    if isinstance(message.get("content"), str) and message["content"]:
        parts.append(text_part(message["content"]))
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        parts.append({"type": "refusal", "refusal": message["refusal"]})
    if parts:
        output.append(message_item(item_id("msg", response_id, len(output)), parts))
    names = tool_names(request)
    for k, call in enumerate(expect_array(message.get("tool_calls") or [], "choices[0].message.tool_calls")):
        call = expect_object(call, f"choices[0].message.tool_calls[{k}]")
        function = _object(call.get("function"))
        output.append(
            function_call_item(
                item_id("fc", response_id, len(output)),
                str(call.get("id") or item_id("call", response_id, k)),
                str(function.get("name") or ""),
                str(function.get("arguments") or ""),
                names=names,
            )
        )
    incomplete = _INCOMPLETE.get(choice.get("finish_reason"))  # type: ignore[arg-type]
    return response_object(
        request,
        response_id=response_id,
        created_at=_count(chat.get("created")) or created_at,
        model=str(chat.get("model") or request.get("model") or ""),
        status="incomplete" if incomplete else "completed",
        output=output,
        usage=response_usage(chat.get("usage")),
        incomplete=incomplete,
        completed_at=completed_at,
    )


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(ident: str, content: list[dict[str, Any]], status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": ident, "role": "assistant", "status": status, "content": content}


def function_call_item(
    ident: str,
    call_id: str,
    name: str,
    arguments: str,
    status: str = "completed",
    *,
    names: dict[str, tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """A ``function_call`` item; a call of a namespaced tool (``names``: :func:`tool_names` of
    the request) under the tool's own name and its namespace."""
    item = {"type": "function_call", "id": ident, "call_id": call_id, "name": name}
    if names and name in names:
        item["namespace"], item["name"] = names[name]
    return {**item, "arguments": arguments, "status": status}


def reasoning_item(ident: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "reasoning_text", "text": text}] if text else []
    return {"type": "reasoning", "id": ident, "summary": [], "content": content, "status": status}


def response_to_chat_message(response: Any) -> dict[str, Any] | None:
    """The assistant turn a Response stands for, as a chat message (None when it has none)."""
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        return None
    texts, calls = [], []
    for item in response["output"]:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    texts.append(str(part.get("text") or ""))
        elif item.get("type") == "function_call":
            function = {"name": item.get("name"), "arguments": item.get("arguments") or ""}
            calls.append({"id": item.get("call_id"), "type": "function", "function": function})
    message: dict[str, Any] = {"role": "assistant", "content": TEXT_JOIN.join(t for t in texts if t) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
