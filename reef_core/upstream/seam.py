"""The seam between the daemon and whatever answers it: an HTTP upstream or the embedded model.

Both :class:`~reef_core.upstream.client.UpstreamClient` and the local engine implement it, so
the daemon's translation, relaying and recording have no special case for either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from reef_core.upstream.client import UpstreamReply

__all__ = ["AnswerStream", "Answerer"]


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
