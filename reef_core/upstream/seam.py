"""The seam between the daemon and whatever answers it: an HTTP upstream or a model in-process.

Both :class:`~reef_core.upstream.client.UpstreamClient` and the in-process engines
(:class:`~reef_core.upstream.engine.Engine`) are an :class:`Answerer`, so the daemon's
translation, relaying and recording have no special case for either.  The daemon calls
:meth:`Answerer.request` and :meth:`Answerer.stream`; each answerer implements them once, for an
:class:`Ask` (the request as one value), as ``_request`` and ``_stream``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["AnswerStream", "Answerer", "Ask", "UpstreamReply"]


class Answerer(ABC):
    """What answers the daemon's model requests: the daemon's two calls are defined here, once;
    an answerer implements ``_request`` and ``_stream`` for an :class:`Ask`, and ``close``."""

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
    ) -> UpstreamReply:
        """Send a request and read the whole answer; a 4xx raises
        :class:`~reef_core.errors.UpstreamRejected`."""
        return await self._request(Ask(method, path, headers, body, query, scenario))

    async def stream(
        self,
        path: str,
        *,
        headers: Mapping[str, str],
        body: bytes,
        query: str = "",
        scenario: str | None = None,
    ) -> AnswerStream:
        """POST and return the open answer once its headers arrived (status checked)."""
        return await self._stream(Ask("POST", path, headers, body, query, scenario))

    @abstractmethod
    async def _request(self, ask: Ask) -> UpstreamReply: ...

    @abstractmethod
    async def _stream(self, ask: Ask) -> AnswerStream: ...

    @abstractmethod
    async def close(self) -> None: ...


@dataclass(frozen=True)
class UpstreamReply:
    """A whole answer: its status, content type and body."""

    status: int
    content_type: str
    body: bytes
    #: what a local engine knows beyond the wire answer (token ids, log-probs, weight version)
    extras: dict[str, Any] | None = None


@dataclass(frozen=True)
class Ask:
    """One request the daemon sends on: ``path`` with its ``query`` (no ``?``), the headers to
    send, the body; ``scenario`` is for engines that serve per-scenario weights (an HTTP upstream
    ignores it)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes | None = None
    query: str = ""
    scenario: str | None = None


class AnswerStream(Protocol):
    """An open answer: its raw chunks, then :meth:`close`; ``extras`` as for
    :attr:`UpstreamReply.extras` (an engine fills it once the answer is complete)."""

    status: int

    @property
    def extras(self) -> dict[str, Any] | None: ...

    def chunks(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...
