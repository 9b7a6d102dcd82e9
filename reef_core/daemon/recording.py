"""What one proxied exchange becomes on the data branch.

A record holds the request as the client sent it, the answer as the client saw it (a
stream assembled into one message), the status, timings, the models on both sides, the
release that served it, the client's tags and, when a translation left part of the request
out of what the upstream was sent (Codex's hosted tools on a chat upstream), what and why.
It is committed through the scenario's group-commit writer; the receipt is returned only
once the commit is on the branch.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field
from typing import Any

from reef_core.store import RawJSON, Scenario

__all__ = ["Exchange", "commit_record", "verbatim"]

# requests above this are serialised off the event loop (unless stored as sent: nothing to do)
_BIG = 512 * 1024


@dataclass
class Exchange:
    route: str  # "chat.completions", "messages", "responses" or "embeddings"
    client_format: str
    upstream_format: str
    request: dict[str, Any]
    request_bytes: int
    stream: bool
    tags: dict[str, str]
    release: str | None
    upstream_model: str | None
    harness: str = "unknown"  # which harness sent it (``headers.harness_of``)
    started: float = field(default_factory=time.perf_counter)
    ttfb_ms: float | None = None
    status: int = 0
    response: Any = None
    complete: bool = False
    error: str | None = None
    tokens: dict[str, Any] | None = None  # token ids, log-probs, weight version (local engine)
    #: the request's bytes as the client sent them, when they can go into the record as they
    #: are (:func:`verbatim`); else the record holds ``request`` serialised again
    request_raw: bytes | None = None
    trace_id: str | None = None  # the request's trace, when traces are on (ops.otlp-endpoint)
    #: what of the request the upstream was not sent, and why (a translated Responses request)
    left_out: tuple[dict[str, str], ...] = ()

    @property
    def model(self) -> str | None:
        value = self.request.get("model")
        return value if isinstance(value, str) else None

    def mark_first_byte(self) -> None:
        if self.ttfb_ms is None:
            self.ttfb_ms = round((time.perf_counter() - self.started) * 1000, 2)

    def document(self) -> dict[str, Any]:
        total_ms = round((time.perf_counter() - self.started) * 1000, 2)
        return {
            "route": self.route,
            "client_format": self.client_format,
            "upstream_format": self.upstream_format,
            "model": self.model,
            "upstream_model": self.upstream_model or self.model,
            "stream": self.stream,
            "status": self.status,
            "complete": self.complete,
            "error": self.error,
            "release": self.release,
            "tags": self.tags,
            "harness": self.harness,
            "timings": {"total_ms": total_ms, "ttfb_ms": self.ttfb_ms},
            "request": self.request if self.request_raw is None else RawJSON(self.request_raw),
            "response": self.response,
            **({"tokens": self.tokens} if self.tokens is not None else {}),
            **({"trace_id": self.trace_id} if self.trace_id is not None else {}),
            **({"left_out": list(self.left_out)} if self.left_out else {}),
        }

    def summary(self, total_ms: float) -> str:
        parts = [self.route, f"model={self.model or '?'}", str(self.status), f"{total_ms:.0f}ms"]
        if self.stream:
            parts.append("stream")
        if self.release:
            parts.append(self.release)
        if not self.complete:
            parts.append("incomplete")
        return " ".join(parts)


def verbatim(raw: bytes) -> bytes | None:
    """``raw`` (a body ``json.loads`` accepted) if it can be stored as it is: UTF-8 without a
    byte-order mark (what json.loads decoded it as), on one line (a record is one line)."""
    if raw[:3] == b"\xef\xbb\xbf" or raw[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\0" in raw[:4]:
        return None
    if b"\n" in raw or b"\r" in raw:
        return None
    return raw


async def commit_record(scenario: Scenario, exchange: Exchange, *, alone: bool = False) -> str:
    """Append the exchange; resolves to the receipt once it is committed.

    ``alone``: no other exchange is being answered, so nobody waits on the event loop and a
    small record is written right here when the writer is idle (a few hundred microseconds),
    rather than handed to the writer thread and back.
    """
    document = exchange.document()
    summary = exchange.summary(document["timings"]["total_ms"])
    trailers = {"Status": str(exchange.status), "Route": exchange.route}
    if exchange.model:
        trailers["Model"] = exchange.model
    if exchange.request_bytes > _BIG and exchange.request_raw is None:
        # serialised in a worker thread, so the loop keeps serving meanwhile
        loop = asyncio.get_running_loop()
        append = functools.partial(scenario.append_in_loop, loop=loop, summary=summary, trailers=trailers)
        waiting = await asyncio.to_thread(append, "record", document)
    else:
        waiting = scenario.append_in_loop("record", document, summary=summary, trailers=trailers, now=alone)
        if waiting.done():
            return waiting.result()
    # a client that goes away cancels only this wait: the record is written all the same
    return await waiting
