"""Records in the original Reef's shape, made into reef's items.

The original Reef (PyPI ``reef-infra``) keeps each exchange as one JSON payload: the request
body as forwarded, with the upstream's answer under ``response`` and the client's tags under
``metadata.tags``; its record import routes take the same payloads; a report lists the ids it
judges under ``references``.  Its ids are the client's own (``sample-1``) or 32 hex digits,
which reef cannot take as item ids (those are issued in time order by the writer), so an
imported item keeps its original id as its idempotency key (``idempotency_key``, the field a
client's ``agent_record_id`` fills on live reports and asks) and in a ``Reef-Source-Id``
trailer, which ``git log data`` shows; references to original ids are translated to the
receipts they became.  Used by the record import routes and by ``reef import``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from reef_core.daemon.inference import validate_chat
from reef_core.daemon.reports import parse_report
from reef_core.errors import InvalidInput
from reef_core.wire.anthropic import MessageStreamAssembler
from reef_core.wire.openai import ChatStreamAssembler
from reef_core.wire.sse import SSEDecoder

__all__ = ["MAX_SOURCE_ID", "SOURCE_TRAILER", "Item", "inference_item", "report_item", "source_id"]

#: the trailer naming an imported item's original id
SOURCE_TRAILER = "Source-Id"
MAX_SOURCE_ID = 200

#: an item to append: kind, body, commit summary, trailers
Item = tuple[str, dict[str, Any], str, dict[str, str]]


def source_id(value: Any, *, field: str = "agent_record_id") -> str:
    """An original id, checked: a string of 1-200 characters on one line."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_SOURCE_ID:
        raise InvalidInput(f"{field} must be a string of 1-{MAX_SOURCE_ID} characters", field=field)
    if any(c in value for c in "\r\n\0"):
        raise InvalidInput(f"{field} must be on one line", field=field)
    return value


def inference_item(
    payload: Any,
    *,
    key: str,
    release: str | None = None,
    imported: Mapping[str, Any] | None = None,
    where: str = "payload",
) -> Item:
    """A record for an original inference payload: the request (``messages`` for chat or
    Anthropic Messages, ``input`` for the Responses API), and the answer if it has one.

    ``release``: the reef release that served it, if known; ``imported``: what the record
    says about where it came from (the original time, store, row).
    """
    if not isinstance(payload, dict):
        raise InvalidInput(f"{where} must be a JSON object", field=where)
    request = {k: v for k, v in payload.items() if k != "response"}
    tags = _tags(request, where)
    _validate_request(request, where)
    response = payload.get("response")
    if response is not None and not isinstance(response, dict):
        raise InvalidInput(f"{where}.response must be a JSON object", field=f"{where}.response")
    route, client_format = _route(request, response)
    stream = bool(request.get("stream"))
    status, complete, error = 200, True, None
    if isinstance(response, dict) and response.get("stream") is True and "body" in response:
        status = _int(response.get("status"), 200)
        complete = response.get("complete") is not False
        error = response.get("error") if isinstance(response.get("error"), str) else None
        response = _assembled(response, client_format)
    model = request.get("model") if isinstance(request.get("model"), str) else None
    document = {
        "route": route,
        "client_format": client_format,
        "upstream_format": client_format,
        "model": model,
        "upstream_model": model,
        "stream": stream,
        "status": status,
        "complete": complete,
        "error": error,
        "release": release,
        "tags": tags,
        "timings": {"total_ms": None, "ttfb_ms": None},
        "request": request,
        "response": response,
        "idempotency_key": key,
        **({"imported": dict(imported)} if imported else {}),
    }
    summary = f"{route} model={model or '?'} {status} imported {key}"
    return "record", document, summary, {"Status": str(status), "Route": route, SOURCE_TRAILER: key}


def report_item(
    payload: Any,
    *,
    key: str,
    resolve: Callable[[str], str | None],
    imported: Mapping[str, Any] | None = None,
    strict: bool = True,
    where: str = "payload",
) -> Item:
    """A report for an original report payload, its references translated by ``resolve``
    (an original id or a receipt → the receipt, or None).

    ``strict``: a reference that resolves to nothing is an error naming it; else (a migration,
    where the original may have evicted what a report judged) it is kept under
    ``imported.unresolved_references``.
    """
    if not isinstance(payload, dict):
        raise InvalidInput(f"{where} must be a JSON object", field=where)
    references = payload.get("references", [])
    if not isinstance(references, list):
        raise InvalidInput(f"{where}.references must be a list of ids", field=f"{where}.references")
    translated: list[str] = []
    unresolved: list[str] = []
    for i, ref in enumerate(references):
        name = source_id(ref, field=f"{where}.references[{i}]")
        receipt = resolve(name)
        if receipt is None:
            if strict:
                raise InvalidInput(
                    f"{where}.references[{i}]: {name!r} is not a record of this scenario "
                    "(an imported report must follow the records it references)",
                    field=f"{where}.references[{i}]",
                )
            unresolved.append(name)
        elif receipt not in translated:
            translated.append(receipt)
    body = {k: v for k, v in payload.items() if k != "agent_record_id"}
    body["references"] = translated
    if body.get("score") is None and body.get("feedback") is None:
        # the original took reports with neither; reef's learners need one of them
        raise InvalidInput(f"{where}: a report needs a score or feedback", field=f"{where}.score")
    report = parse_report(body)
    origin = dict(imported or {})
    if unresolved:
        origin["unresolved_references"] = unresolved
    document = {**report.content(), "idempotency_key": key, **({"imported": origin} if origin else {})}
    return "report", document, f"{report.summary()} imported {key}", {SOURCE_TRAILER: key}


def _tags(request: dict[str, Any], where: str) -> dict[str, str]:
    """The original's tags (``metadata.tags``), taken out of the request they were merged into."""
    metadata = request.get("metadata")
    if not isinstance(metadata, dict) or "tags" not in metadata:
        return {}
    tags = metadata["tags"]
    if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
        raise InvalidInput(f"{where}.metadata.tags must map names to strings", field=f"{where}.metadata.tags")
    rest = {k: v for k, v in metadata.items() if k != "tags"}
    if rest:
        request["metadata"] = rest
    else:
        del request["metadata"]
    return {str(k).lower(): v for k, v in tags.items()}


def _validate_request(request: dict[str, Any], where: str) -> None:
    """A request checked as the live routes check it: Responses by its ``input``, else chat."""
    if "input" in request and "messages" not in request:
        if not isinstance(request["input"], (str, list)) or not request["input"]:
            raise InvalidInput(f"{where}.input must be a non-empty string or list", field=f"{where}.input")
        if "model" in request and not isinstance(request["model"], str):
            raise InvalidInput(f"{where}.model must be a string", field=f"{where}.model")
    else:
        validate_chat(request, where=f"{where}.")


def _route(request: dict[str, Any], response: Any) -> tuple[str, str]:
    """Which API an exchange spoke (the original stored no route): Responses by its ``input``
    or answer object, Anthropic by its answer or stream events, else chat completions."""
    answer = response if isinstance(response, dict) else {}
    body = str(answer.get("body", ""))[:2000] if answer.get("stream") is True else ""
    if ("input" in request and "messages" not in request) or answer.get("object") == "response":
        return "responses", "responses"
    if answer.get("type") == "message" or "message_start" in body or "system" in request:
        return "messages", "anthropic"
    if "response.created" in body:
        return "responses", "responses"
    return "chat.completions", "openai"


def _assembled(response: dict[str, Any], client_format: str) -> Any:
    """A streamed answer as one message, from the raw stream the original kept; its own
    ``message`` (text turns only) when the stream cannot be read back."""
    events = SSEDecoder()
    parsed = [*events.feed(str(response.get("body", "")).encode()), *events.flush()]
    try:
        if client_format == "openai":
            chat = ChatStreamAssembler()
            for event in parsed:
                if event.data.strip() not in ("", "[DONE]"):
                    chat.feed(json.loads(event.data))
            return chat.result()
        if client_format == "anthropic":
            messages = MessageStreamAssembler()
            for event in parsed:
                if event.data.strip():
                    data = json.loads(event.data)
                    messages.feed(event.event or str(data.get("type", "")), data)
            return messages.result()
        for event in reversed(parsed):  # Responses: the terminal event holds the whole answer
            data = json.loads(event.data) if event.data.strip() else {}
            if isinstance(data.get("response"), dict):
                return data["response"]
    except (ValueError, InvalidInput):
        pass
    return response.get("message")


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
