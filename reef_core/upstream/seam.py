"""The seam between the daemon and whatever answers it: an HTTP upstream or the embedded model.

Both :class:`~reef_core.upstream.client.UpstreamClient` and the local engine implement it, so
the daemon's translation, relaying and recording have no special case for either.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from reef_core.errors import UpstreamRejected
from reef_core.upstream.client import UpstreamReply

__all__ = ["AnswerStream", "Answerer", "local_route"]


class AnswerStream(Protocol):
    status: int
    extras: dict[str, Any] | None

    def chunks(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...


class Answerer(Protocol):
    base_url: str | None

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None = None,
        query: str = "",
        scenario: str | None = None,
    ) -> UpstreamReply: ...

    async def stream(
        self,
        path: str,
        *,
        headers: Mapping[str, str],
        body: bytes,
        query: str = "",
        scenario: str | None = None,
    ) -> AnswerStream: ...

    async def close(self) -> None: ...


def local_route(method: str, path: str, model_name: str, engine: str) -> UpstreamReply | None:
    """What an in-process engine answers besides chat completions: its model listing for
    ``GET /v1/models``, a 404 (:class:`UpstreamRejected`) for any other route; None for
    ``POST /v1/chat/completions``, which the engine answers itself.  ``engine`` names it in the
    404's message ("the embedded model")."""
    if method == "GET" and path == "/v1/models":
        listing = {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "reef"}],
        }
        return UpstreamReply(200, "application/json", json.dumps(listing).encode())
    if method != "POST" or path != "/v1/chat/completions":
        raise UpstreamRejected(
            f"{engine} does not serve {method} {path}",
            status=404,
            body=b'{"error": {"message": "not found", "type": "not_found_error"}}',
        )
    return None
