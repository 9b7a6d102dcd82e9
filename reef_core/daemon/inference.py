"""The inference routes: ``/v1/chat/completions``, ``/v1/messages``, ``/v1/responses``,
``/v1/embeddings`` and their companions, each also under ``/s/<scenario>/`` (a client that can
set only a base URL names its scenario there; the ``x-reef-scenario`` header beats the path,
and the path beats ``reef.default-scenario``).

Each exchange is forwarded to the configured upstream (translated when the client speaks
another format than the upstream), answered, and recorded; the answer carries the receipt.
``/v1/responses`` goes to an OpenAI upstream as it is, unless that upstream has no such route
(it said so once: 404, 405 or 501) or ``inference.responses`` says ``translate``; then, and
always for the embedded model and Anthropic upstreams, it is translated to chat completions.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from reef_core import jsonio
from reef_core.daemon.auth import presented_token
from reef_core.daemon.context import Daemon, daemon_of
from reef_core.daemon.errors import status_of
from reef_core.daemon.headers import captured, harness_of, tags_of
from reef_core.daemon.install_routes import note_use
from reef_core.daemon.logs import REQUEST_ID_HEADER, note_receipt, request_id
from reef_core.daemon.metrics import METRICS, note_upstream
from reef_core.daemon.parsing import inference_scenario, json_body
from reef_core.daemon.recording import Exchange, commit_record, verbatim
from reef_core.daemon.relay import ResponsesRelay, StreamRelay, make_relay
from reef_core.daemon.tracing import span, trace_id
from reef_core.errors import (
    DiskFull,
    InvalidInput,
    ReefError,
    UpstreamError,
    UpstreamRejected,
    UpstreamUnavailable,
)
from reef_core.learning.canary import canary_key
from reef_core.sessions import request_messages, session_of
from reef_core.store import Scenario
from reef_core.upstream import AnswerStream, UpstreamClient
from reef_core.upstream.client import UpstreamNotImplemented
from reef_core.wire import translate
from reef_core.wire.models import (
    anthropic_models_to_openai,
    estimate_input_tokens,
    openai_models_to_anthropic,
)
from reef_core.wire.responses_api import (
    chat_to_response,
    check_responses_request,
    left_out,
    responses_request_to_chat,
)
from reef_core.wire.sse import SSEDecoder

__all__ = ["routes"]

log = logging.getLogger(__name__)

RECEIPT_HEADER = "x-reef-agent-record-id"
RELEASE_HEADER = "x-reef-release-id"
_UPSTREAM_PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
_RESPONSES_PATH = "/v1/responses"
# each route's name on the record: its path (answered as it is and under ``/s/<scenario>``, the
# scenario in the URL) and the format its client speaks
_ROUTES = {
    "chat.completions": ("/v1/chat/completions", "openai"),
    "messages": ("/v1/messages", "anthropic"),
    "responses": ("/v1/responses", "responses"),
    "embeddings": ("/v1/embeddings", "openai"),
}
# A stream's status and headers wait this long for its first event, to go out in one send
# with it; an upstream slower than that to start answering gets them sent on their own.
_HEADERS_WAIT_S = 0.01

routes = web.RouteTableDef()


# -- reading the request -------------------------------------------------------------------


def _validate(route: str, body: dict[str, Any], daemon: Daemon) -> None:
    if route == "responses":
        check_responses_request(body)
    elif route == "embeddings":
        _validate_embeddings(body, daemon)
    else:
        validate_chat(body)


def _validate_embeddings(body: dict[str, Any], daemon: Daemon) -> None:
    if daemon.upstream_format == "anthropic":
        raise InvalidInput(
            "the upstream speaks anthropic, which has no embeddings: /v1/embeddings needs an "
            "OpenAI-compatible upstream (inference.upstream-api openai)",
            field="inference.upstream-api",
        )
    if not isinstance(body.get("input"), str | list):
        raise InvalidInput("input must be a string or a list", field="input")
    if "model" in body and not isinstance(body["model"], str):
        raise InvalidInput("model must be a string", field="model")


def validate_chat(body: dict[str, Any], *, where: str = "") -> None:
    """A chat or Messages request's shape, as the routes check it (``where``: the prefix of
    the field names in errors, for a request inside another body: ``records[2].payload.``)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidInput(f"{where}messages must be a non-empty list", field=f"{where}messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidInput(
                f"{where}messages[{i}] must be an object with a role", field=f"{where}messages[{i}]"
            )
    if "model" in body and not isinstance(body["model"], str):
        raise InvalidInput(f"{where}model must be a string", field=f"{where}model")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise InvalidInput(f"{where}stream must be true or false", field=f"{where}stream")


# -- talking to the upstream ---------------------------------------------------------------


def _upstream_headers(
    request: web.Request, daemon: Daemon, client_format: str, stream: bool
) -> dict[str, str]:
    settings = daemon.settings
    upstream_format = daemon.upstream_format
    headers = {"Content-Type": "application/json"}
    key = settings.inference.upstream_api_key
    if key is None and not settings.reef.tokens:
        # no key of reef's own and reef is open: the client's own key goes through, as sent
        key = presented_token(request)
    if upstream_format == "openai":
        if key:
            headers["Authorization"] = f"Bearer {key}"
    else:
        if key:
            headers["x-api-key"] = key
        headers["anthropic-version"] = request.headers.get("anthropic-version", "2023-06-01")
        beta = request.headers.get("anthropic-beta")
        if beta and client_format == "anthropic":
            headers["anthropic-beta"] = beta
    if stream:
        headers["Accept"] = "text/event-stream"
    headers.update(settings.inference.upstream_headers)  # an operator's own: they win, and are never kept
    return headers


def _upstream_body(raw: bytes, body: dict[str, Any], client_format: str, daemon: Daemon) -> bytes:
    upstream_format = daemon.upstream_format
    override = daemon.settings.inference.upstream_model
    if client_format == upstream_format and not override:
        return raw  # forwarded exactly as sent
    if client_format == upstream_format:
        translated = dict(body)
    elif client_format == "openai":
        translated = translate.openai_request_to_anthropic(body)
    else:
        translated = translate.anthropic_request_to_openai(body)
    if override:
        translated["model"] = override
    return jsonio.dumps(translated)


@dataclass(frozen=True)
class _Leg:
    """How one exchange goes upstream: the path, the body as sent there, the query, and what
    the upstream speaks on that path (``openai``, ``anthropic`` or ``responses``)."""

    path: str
    body: bytes
    speaks: str
    query: str = ""
    #: what of the request this upstream is not sent, and why (``responses_api.left_out``)
    left_out: tuple[dict[str, str], ...] = ()


def _leg(
    request: web.Request,
    daemon: Daemon,
    route: str,
    raw: bytes,
    body: dict[str, Any],
    *,
    as_chat: bool = False,
) -> _Leg:
    upstream_format = daemon.upstream_format
    if route == "embeddings":  # as sent, model included: an embedding model is not the chat one
        return _Leg("/v1/embeddings", raw, "openai")
    if route != "responses":
        client_format = _ROUTES[route][1]
        query = (
            request.query_string if upstream_format == "anthropic" and client_format == "anthropic" else ""
        )
        forward = _upstream_body(raw, body, client_format, daemon)
        return _Leg(_UPSTREAM_PATHS[upstream_format], forward, upstream_format, query)
    override = daemon.settings.inference.upstream_model
    if not as_chat and _forwards_responses(daemon):
        forward = jsonio.dumps({**body, "model": override}) if override else raw
        return _Leg(_RESPONSES_PATH, forward, "responses")
    chat = responses_request_to_chat(body)
    if override:
        chat["model"] = override
    omitted = tuple(left_out(body))
    if upstream_format == "anthropic":
        anthropic = translate.openai_request_to_anthropic(chat)
        return _Leg(_UPSTREAM_PATHS["anthropic"], jsonio.dumps(anthropic), "anthropic", left_out=omitted)
    return _Leg(_UPSTREAM_PATHS["openai"], jsonio.dumps(chat), "openai", left_out=omitted)


def _forwards_responses(daemon: Daemon) -> bool:
    """Whether ``/v1/responses`` goes upstream as it is: only to an OpenAI HTTP upstream."""
    mode = daemon.settings.inference.responses
    upstream = daemon.upstream
    if mode == "translate" or daemon.upstream_format != "openai" or not isinstance(upstream, UpstreamClient):
        return False
    return mode == "forward" or _RESPONSES_PATH not in upstream.lacking


def _lacks_responses(daemon: Daemon, leg: _Leg, error: UpstreamError) -> bool:
    """Whether the upstream just said it has no ``/v1/responses`` (and ``auto`` may translate);
    noted on the upstream, so later requests go straight to chat completions."""
    if leg.speaks != "responses" or daemon.settings.inference.responses != "auto":
        return False
    if isinstance(error, UpstreamRejected):
        # a 404 can also be OpenAI's "model not found", which chat completions would repeat
        if error.status not in (404, 405) or b"model_not_found" in error.body:
            return False
    elif not isinstance(error, UpstreamNotImplemented):
        return False
    if isinstance(daemon.upstream, UpstreamClient):
        daemon.upstream.lacking.add(_RESPONSES_PATH)
    log.info("the upstream has no %s: translating it to chat completions from now on", _RESPONSES_PATH)
    return True


def _translate_answer(answer: Any, exchange: Exchange, body: dict[str, Any], response_id: str) -> Any:
    client_format, upstream_format = exchange.client_format, exchange.upstream_format
    if client_format == upstream_format or not isinstance(answer, dict):
        return answer
    if client_format == "responses":
        now = int(time.time())
        chat = (
            translate.anthropic_response_to_openai(answer, created=now)
            if upstream_format == "anthropic"
            else answer
        )
        return chat_to_response(chat, body, response_id=response_id, created_at=now, completed_at=now)
    if upstream_format == "anthropic":
        return translate.anthropic_response_to_openai(answer, created=int(time.time()))
    return translate.openai_response_to_anthropic(answer)


# -- the routes ----------------------------------------------------------------------------


def _add_route(route: str, path: str) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await _inference(request, route)

    handle.__name__ = route.replace(".", "_")
    routes.post(path)(handle)
    routes.post("/s/{scenario}" + path)(handle)


for _route, (_path, _) in _ROUTES.items():
    _add_route(_route, _path)


async def _inference(request: web.Request, route: str) -> web.StreamResponse:
    daemon = daemon_of(request)
    daemon.inference_in_flight += 1
    try:
        return await _answer(request, daemon, route)
    finally:
        daemon.inference_in_flight -= 1


async def _answer(request: web.Request, daemon: Daemon, route: str) -> web.StreamResponse:
    name = inference_scenario(request, daemon.settings.reef.default_scenario)
    capture = captured(request)
    with span(request, "parse"):
        raw, body = await json_body(request)
        _validate(route, body, daemon)
        leg = _leg(request, daemon, route, raw, body)  # what cannot be translated is refused here
    if not capture:
        return await _exchange(request, daemon, route, name, raw, body, leg, None)
    async with daemon.scenarios.use(name) as scenario:  # kept open until the record is written
        return await _exchange(request, daemon, route, name, raw, body, leg, scenario)


async def _exchange(
    request: web.Request,
    daemon: Daemon,
    route: str,
    name: str,
    raw: bytes,
    body: dict[str, Any],
    leg: _Leg,
    scenario: Scenario | None,
) -> web.StreamResponse:
    release = scenario.releases.tip() if scenario is not None else None
    served = release.name if release else None
    tags = tags_of(request)
    key = name  # the engine key whose weights answer: the scenario's, or its canary's
    canary = daemon.learners.canary(name) if scenario is not None else None
    if canary is not None and canary.running is not None and canary.running["kind"] == "weights":
        arm = canary.arm(session_of({"tags": tags}), opens=not _answered({"route": route, "request": body}))
        if arm is not None and arm[0] == "canary":
            key, served = canary_key(name), arm[1]
    client_format = _ROUTES[route][1]
    stream = bool(body.get("stream")) and route != "embeddings"
    exchange = Exchange(
        route=route,
        client_format=client_format,
        upstream_format=leg.speaks,
        request=body,
        request_bytes=len(raw),
        request_raw=verbatim(raw),
        stream=stream,
        tags=tags,
        harness=harness_of(request),
        release=served,
        upstream_model=daemon.settings.inference.upstream_model,
        trace_id=trace_id(request),
        left_out=leg.left_out,
    )
    if scenario is not None:  # a harness's first recorded request notes its install (install_routes)
        await note_use(request, name, exchange.harness)
    headers = _upstream_headers(request, daemon, client_format, stream)
    response_headers = {RELEASE_HEADER: served} if served else {}
    # the id of a Response made here (translated); a forwarded one keeps the upstream's
    response_id = f"resp_{uuid.uuid4().hex}" if client_format == "responses" else ""
    asked = time.perf_counter()  # the upstream's time, for /metrics: to the answer's last byte
    while True:
        try:
            if stream:
                with span(request, "upstream connect"):
                    opened = await daemon.upstream.stream(
                        leg.path, headers=headers, body=leg.body, query=leg.query, scenario=key
                    )
            else:
                with span(request, "upstream"):
                    reply = await daemon.upstream.request(
                        "POST", leg.path, headers=headers, body=leg.body, query=leg.query, scenario=key
                    )
        except UpstreamError as exc:
            if _lacks_responses(daemon, leg, exc):
                leg = _leg(request, daemon, route, raw, body, as_chat=True)
                exchange.upstream_format, exchange.left_out = leg.speaks, leg.left_out
                continue
            await _record_failure(scenario, exchange, exc)
            raise
        break
    if stream:
        relay: StreamRelay | ResponsesRelay
        if client_format == "responses":
            relay = ResponsesRelay(leg.speaks, body, response_id=response_id, created_at=int(time.time()))
        else:
            relay = make_relay(client_format, leg.speaks, exchange.model or "")
        return await _stream(request, daemon, scenario, exchange, opened, relay, response_headers, asked)
    note_upstream(request, time.perf_counter() - asked)
    exchange.mark_first_byte()
    exchange.status = reply.status
    exchange.tokens = reply.extras
    with span(request, "relay"):
        try:
            answer: Any = jsonio.loads(reply.body)
        except ValueError:
            answer = reply.body.decode("utf-8", "replace")
        client_answer = _translate_answer(answer, exchange, body, response_id)
    exchange.response = client_answer
    exchange.complete = True
    if scenario is not None:
        with span(request, "record"):
            response_headers[RECEIPT_HEADER] = await commit_record(
                scenario, exchange, alone=daemon.inference_in_flight == 1
            )
        request.app[METRICS].recorded(scenario.name)
        note_receipt(response_headers[RECEIPT_HEADER])
    if client_answer is answer:
        return web.Response(
            body=reply.body,
            status=reply.status,
            headers=response_headers,
            content_type=reply.content_type.split(";")[0] or "application/json",
        )
    return web.json_response(client_answer, status=reply.status, headers=response_headers)


def _answered(record: dict[str, Any]) -> bool:
    """The request already holds an answer of the model: its session began earlier."""
    return any(m.source == "assistant" for m in request_messages(record))


async def _record_failure(scenario: Scenario | None, exchange: Exchange, error: UpstreamError) -> None:
    """A failed exchange is on the record too, with the status the client was given."""
    exchange.status = status_of(error)
    exchange.error = error.message
    if scenario is not None:
        await commit_record(scenario, exchange)


class _EventStream(web.StreamResponse):
    """An SSE answer whose headers are held for its first event (by the aiohttp versions
    that can buffer them; older ones send them at once, as before)."""

    _send_headers_immediately = False


def _send_headers(writer: Any) -> None:
    """Timer callback: the headers a stream still holds go out on their own."""
    try:
        send = getattr(writer, "send_headers", None)
        if send is not None:
            send()
    except (ConnectionResetError, ConnectionError):
        pass  # the client left; the stream's next write finds out


async def _stream(
    request: web.Request,
    daemon: Daemon,
    scenario: Scenario | None,
    exchange: Exchange,
    upstream: AnswerStream,
    relay: StreamRelay | ResponsesRelay,
    response_headers: dict[str, str],
    asked: float,
) -> web.StreamResponse:
    exchange.status = upstream.status
    exchange.tokens = upstream.extras
    response = _EventStream(
        status=200,
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            REQUEST_ID_HEADER: request_id(),
            **response_headers,
        },
    )
    client_gone = False
    flush = None
    # the chunks read from the upstream and relayed as they come
    with span(request, "relay"):
        try:
            writer = await response.prepare(request)
            flush = asyncio.get_running_loop().call_later(_HEADERS_WAIT_S, _send_headers, writer)
            decoder = SSEDecoder()
            async for chunk in upstream.chunks():
                # every event this chunk completes goes out in one write: nothing waits for more
                # data, and a burst of events costs one send instead of one each
                ready: list[bytes] = []
                try:
                    for event in decoder.feed(chunk):
                        ready.extend(out.encode() for out in relay.feed(event))
                finally:  # events before a broken one still reach the client, as recorded
                    if ready:
                        await response.write(b"".join(ready))
                        exchange.mark_first_byte()
                if relay.terminal_seen:
                    break
            if not relay.complete:
                exchange.error = "the upstream ended the stream without its final event"
        except (ConnectionResetError, ConnectionError) as exc:
            client_gone = True
            exchange.error = f"client disconnected: {exc or type(exc).__name__}"
        except ReefError as exc:  # the upstream broke mid-stream, or sent an error event
            exchange.error = exc.message
        except ValueError as exc:
            exchange.error = f"the upstream sent an unreadable event: {exc}"
        finally:
            if flush is not None:
                flush.cancel()
            upstream.close()
            note_upstream(request, time.perf_counter() - asked)
    exchange.complete = relay.complete and exchange.error is None
    try:
        exchange.response = relay.assembled()
    except Exception as exc:  # an early break leaves little to assemble; keep what is known
        exchange.response = None
        exchange.complete = False  # a record without its answer is never a complete one
        exchange.error = exchange.error or f"the stream could not be assembled into one answer: {exc}"
        where = scenario.name if scenario is not None else "(not recorded)"
        log.warning(
            "%s: a stream could not be assembled into one answer (recorded incomplete): %s", where, exc
        )
    alone = daemon.inference_in_flight == 1
    try:
        with span(request, "record"):
            receipt = await commit_record(scenario, exchange, alone=alone) if scenario is not None else None
        if scenario is not None and receipt is not None:
            request.app[METRICS].recorded(scenario.name)
            note_receipt(receipt)
    except DiskFull as exc:  # the answer went out whole, but it could not be recorded: say so
        receipt = None
        exchange.complete, exchange.error = False, exc.message
    if client_gone:
        return response
    try:
        if exchange.complete:
            await response.write_eof(relay.terminal(receipt))
        else:
            await response.write_eof(relay.error_event(exchange.error or "stream failed", receipt))
    except (ConnectionResetError, ConnectionError):
        log.info("client left before the end of its stream (receipt %s)", receipt)
    return response


@routes.post("/v1/messages/count_tokens")
@routes.post("/s/{scenario}/v1/messages/count_tokens")
async def count_tokens(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    raw, body = await json_body(request)
    if daemon.upstream_format == "anthropic":
        headers = _upstream_headers(request, daemon, "anthropic", False)
        reply = await daemon.upstream.request(
            "POST", "/v1/messages/count_tokens", headers=headers, body=raw, query=request.query_string
        )
        return web.Response(body=reply.body, status=reply.status, content_type="application/json")
    # an OpenAI-compatible upstream has no such endpoint: an estimate, marked as one
    return web.json_response(
        {"input_tokens": estimate_input_tokens(body)}, headers={"x-reef-estimate": "true"}
    )


@routes.get("/v1/models")
@routes.get("/s/{scenario}/v1/models")
async def models(request: web.Request) -> web.Response:
    daemon = daemon_of(request)
    client_format = "anthropic" if "anthropic-version" in request.headers else "openai"
    upstream_format = daemon.upstream_format
    headers = _upstream_headers(request, daemon, client_format, False)
    headers.pop("Content-Type", None)
    reply = await daemon.upstream.request("GET", "/v1/models", headers=headers)
    if client_format == upstream_format:
        return web.Response(body=reply.body, status=reply.status, content_type="application/json")
    try:
        listing = jsonio.loads(reply.body)
    except ValueError as exc:
        raise UpstreamUnavailable(f"the upstream's model list is not JSON: {exc}") from None
    if upstream_format == "openai":
        return web.json_response(openai_models_to_anthropic(listing))
    return web.json_response(anthropic_models_to_openai(listing))
