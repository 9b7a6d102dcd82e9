"""The HTTP client for the configured upstream model endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from reef_core.errors import UpstreamRejected, UpstreamTimeout, UpstreamUnavailable
from reef_core.upstream.lean import LeanHTTP, LeanStream, too_large
from reef_core.upstream.seam import Answerer, Ask, UpstreamReply

__all__ = ["UpstreamClient", "UpstreamNotImplemented", "UpstreamStream", "origin"]

_BODY_PREVIEW = 300


class UpstreamNotImplemented(UpstreamUnavailable):
    """The upstream answered 501: it does not implement that route.  Answered like any 5xx
    (a 502); a route that can do without it (``/v1/responses``) may ask another way."""


class UpstreamStream:
    """An open streaming response; iterate its raw chunks, then :meth:`close`."""

    extras: dict[str, Any] | None = None

    def __init__(self, response: aiohttp.ClientResponse, most: int | None = None) -> None:
        self._response = response
        self._most = most
        self.status = response.status

    async def chunks(self) -> AsyncIterator[bytes]:
        left = self._most
        try:
            async for chunk in self._response.content.iter_any():
                if left is not None:
                    left -= len(chunk)
                    if left < 0:
                        raise too_large(self._most or 0)
                yield chunk
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError) as exc:
            raise UpstreamUnavailable(f"upstream stream broke: {_describe(exc)}") from exc
        except TimeoutError as exc:
            raise UpstreamTimeout("upstream stream stalled past the read timeout") from exc

    def close(self) -> None:
        self._response.close()


class UpstreamClient(Answerer):
    """One pooled aiohttp session for the daemon's lifetime."""

    def __init__(
        self,
        base_url: str | None,
        *,
        timeout_s: float,
        connect_timeout_s: float = 10.0,
        lean: bool = True,
        max_answer_bytes: int | None = None,
    ) -> None:
        """``max_answer_bytes``: the most of one answer read (decoded), a whole answer or a
        stream's bytes together; past it :class:`UpstreamTooLarge` (``inference.max-answer-bytes``)."""
        self._most = max_answer_bytes
        self.base_url = _normalise(base_url) if base_url else None
        #: the upstream as error messages name it: scheme, host and port, never credentials
        self.name = origin(self.base_url) if self.base_url else "(none configured)"
        self._secret = (urlsplit(self.base_url).password or "") if self.base_url else ""
        #: routes this upstream was found not to serve (the daemon notes ``/v1/responses``
        #: answered 404, 405 or 501 here, and asks for chat completions from then on)
        self.lacking: set[str] = set()
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_read=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        # POSTs to a plain-http upstream skip aiohttp (see lean.py)
        self._lean: LeanHTTP | None = None
        self._prefix = ""
        parts = urlsplit(self.base_url) if self.base_url and lean else None
        if parts is not None and parts.scheme == "http" and parts.hostname and "@" not in parts.netloc:
            self._lean = LeanHTTP(
                parts.hostname,
                parts.port or 80,
                authority=parts.netloc,
                connect_timeout_s=connect_timeout_s,
                read_timeout_s=timeout_s,
                max_answer_bytes=max_answer_bytes,
            )
            self._prefix = parts.path.rstrip("/")

    def _describe(self, exc: BaseException) -> str:
        """The exception's text, with the URL's password blanked should aiohttp quote the URL."""
        text = _describe(exc)
        return text.replace(self._secret, "***") if self._secret else text

    @property
    def configured(self) -> bool:
        return self.base_url is not None

    def _url(self, path: str, query: str = "") -> str:
        if self.base_url is None:
            raise UpstreamUnavailable(
                "no upstream is configured: set --inference.upstream-url (or REEF_UPSTREAM_URL)"
            )
        return f"{self.base_url}{path}" + (f"?{query}" if query else "")

    def _ensure(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, auto_decompress=True
            )
        return self._session

    async def close(self) -> None:
        if self._lean is not None:
            await self._lean.close()
        if self._session is not None:
            await self._session.close()

    async def _request(self, ask: Ask) -> UpstreamReply:
        target = self._prefix + ask.path + (f"?{ask.query}" if ask.query else "")
        lean = self._lean
        if (
            lean is not None
            and ask.method == "POST"
            and ask.body is not None
            and LeanHTTP.accepts(target, ask.headers)
        ):
            answer = await lean.post(target, ask.headers, ask.body)
            content_type = answer.headers.get("content-type", "")
            _raise_for_status(answer.status, answer.body, content_type)
            return UpstreamReply(answer.status, content_type, answer.body)
        url = self._url(ask.path, ask.query)
        try:
            async with self._ensure().request(
                ask.method, url, data=ask.body, headers=dict(ask.headers)
            ) as response:
                data = await self._read_whole(response)
        except TimeoutError as exc:
            raise UpstreamTimeout(f"upstream {self.name} did not answer {ask.path} in time") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamUnavailable(f"upstream {self.name} unreachable: {self._describe(exc)}") from exc
        _raise_for_status(response.status, data, response.headers.get("Content-Type", ""))
        return UpstreamReply(response.status, response.headers.get("Content-Type", ""), data)

    async def _stream(self, ask: Ask) -> UpstreamStream | LeanStream:
        target = self._prefix + ask.path + (f"?{ask.query}" if ask.query else "")
        body = ask.body or b""
        lean = self._lean
        if lean is not None and LeanHTTP.accepts(target, ask.headers):
            answer = await lean.stream(target, ask.headers, body)
            if answer.status >= 400:
                try:
                    data = await answer.read()
                except (UpstreamTimeout, UpstreamUnavailable):
                    data = b""
                finally:
                    answer.close()
                _raise_for_status(answer.status, data, answer.content_type)
            return answer
        url = self._url(ask.path, ask.query)
        try:
            response = await self._ensure().post(url, data=body, headers=dict(ask.headers))
        except TimeoutError as exc:
            raise UpstreamTimeout(f"upstream {self.name} did not answer {ask.path} in time") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamUnavailable(f"upstream {self.name} unreachable: {self._describe(exc)}") from exc
        if response.status >= 400:
            try:
                data = await response.read()
            except (TimeoutError, aiohttp.ClientError):
                data = b""
            finally:
                response.close()
            _raise_for_status(response.status, data, response.headers.get("Content-Type", ""))
        return UpstreamStream(response, self._most)

    async def _read_whole(self, response: aiohttp.ClientResponse) -> bytes:
        """The whole answer, read no further than ``max_answer_bytes``."""
        most = self._most
        if most is None:
            return await response.read()
        pieces: list[bytes] = []
        size = 0
        async for piece in response.content.iter_any():
            size += len(piece)
            if size > most:
                raise too_large(most)
            pieces.append(piece)
        return b"".join(pieces)


def _raise_for_status(status: int, body: bytes, content_type: str) -> None:
    if status < 400:
        return
    preview = body[:_BODY_PREVIEW].decode("utf-8", "replace")
    if status < 500:
        raise UpstreamRejected(
            f"upstream refused the request ({status}): {preview}",
            status=status,
            body=body,
            content_type=content_type,
        )
    if status == 501:
        raise UpstreamNotImplemented(f"upstream failed ({status}): {preview}")
    raise UpstreamUnavailable(f"upstream failed ({status}): {preview}")


def _normalise(url: str) -> str:
    """Accept ``http://host:port``, ``…/`` or ``…/v1``: routes are appended as ``/v1/…``."""
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def origin(url: str) -> str:
    """``http://user:pw@host:8080/v1?key=k`` → ``http://host:8080``: an upstream named in a
    message or a log line, without its user, password, path or query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    try:
        port = parts.port
    except ValueError:  # a port that is not a number: leave it out rather than fail on a message
        port = None
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
