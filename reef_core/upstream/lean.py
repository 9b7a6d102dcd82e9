"""Keep-alive HTTP/1.1 for the common case: a whole answer from a plain-``http`` upstream.

A local engine (SGLang, vLLM, Ollama) on loopback answers a short request in well under a
millisecond, and aiohttp's client spends about 150 us of Python on each request (a task to
write the body, request and response objects, tracing hooks); on the recording path that is
a sixth of reef's added latency.  This client does only what that case needs: one POST with
a body, the whole answer read (``Content-Length``, chunked, or to the close), connections
kept open and reused.  Streams, other methods and ``https`` stay with aiohttp.

A request that fails on a reused connection before a byte of the answer came back is sent
once more on a new one: the server closed an idle connection, so it never saw the request.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from reef_core import __version__
from reef_core.errors import UpstreamTimeout, UpstreamUnavailable

__all__ = ["LeanHTTP", "LeanReply"]

_HEAD_LIMIT = 64 * 1024
_IDLE_KEPT = 32


@dataclass(frozen=True)
class LeanReply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes


class _Stale(Exception):
    """A reused connection was closed before any of the answer arrived."""


class LeanHTTP:
    def __init__(
        self, host: str, port: int, *, authority: str, connect_timeout_s: float, read_timeout_s: float
    ) -> None:
        self._host = host
        self._port = port
        self._authority = authority.encode()
        self._connect_timeout = connect_timeout_s
        self._read_timeout = read_timeout_s
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    @staticmethod
    def accepts(target: str, headers: Mapping[str, str]) -> bool:
        """A request this client can send as it is: an ASCII target (aiohttp quotes the rest)
        and no line breaks anywhere."""
        texts = [target, *headers.keys(), *headers.values()]
        return target.isascii() and not any("\r" in t or "\n" in t for t in texts)

    async def post(self, target: str, headers: Mapping[str, str], body: bytes) -> LeanReply:
        """POST ``body`` to ``target`` (path and query); raises UpstreamUnavailable or
        UpstreamTimeout as the aiohttp path does."""
        lines = [b"POST " + target.encode() + b" HTTP/1.1", b"Host: " + self._authority]
        lines += [f"{name}: {value}".encode() for name, value in headers.items()]
        lines += [b"User-Agent: reef/" + __version__.encode(), b"Content-Length: %d" % len(body)]
        request = b"\r\n".join(lines) + b"\r\n\r\n" + body
        if self._idle:
            reader, writer = self._idle.pop()
            try:
                return await self._exchange(reader, writer, request, reused=True)
            except _Stale:
                pass  # the server had closed it: this request never reached it
        reader, writer = await self._connect()
        try:
            return await self._exchange(reader, writer, request, reused=False)
        except _Stale as exc:  # cannot happen on a fresh connection; kept for the type checker
            raise UpstreamUnavailable("upstream closed the connection") from exc

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            async with asyncio.timeout(self._connect_timeout):
                return await asyncio.open_connection(self._host, self._port, limit=_HEAD_LIMIT)
        except TimeoutError as exc:
            seconds = self._connect_timeout
            raise UpstreamTimeout(f"upstream did not accept a connection in {seconds:g}s") from exc
        except OSError as exc:
            raise UpstreamUnavailable(f"upstream unreachable: {exc.strerror or exc}") from exc

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, *, reused: bool
    ) -> LeanReply:
        keep = False
        try:
            try:
                writer.write(request)
                await writer.drain()
                async with asyncio.timeout(self._read_timeout):
                    head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if reused and not exc.partial:
                    raise _Stale from exc
                raise UpstreamUnavailable("upstream closed the connection before answering") from exc
            except ConnectionError as exc:
                if reused:
                    raise _Stale from exc
                raise
            status, headers, version = _parse_head(head)
            body = await self._body(reader, headers)
            keep = _keeps_alive(version, headers) and not reader.at_eof()
            return LeanReply(status, headers, _decoded(body, headers.get("content-encoding", "")))
        except TimeoutError as exc:
            raise UpstreamTimeout("upstream did not answer in time") from exc
        except asyncio.LimitOverrunError as exc:
            raise UpstreamUnavailable("upstream sent an oversized response head") from exc
        except asyncio.IncompleteReadError as exc:
            raise UpstreamUnavailable("upstream closed the connection mid-answer") from exc
        except (ValueError, zlib.error) as exc:
            raise UpstreamUnavailable(f"upstream sent an unreadable answer: {exc}") from exc
        except (ConnectionError, OSError) as exc:
            raise UpstreamUnavailable(f"upstream connection failed: {exc}") from exc
        finally:
            if keep and len(self._idle) < _IDLE_KEPT:
                self._idle.append((reader, writer))
            else:  # unknown state (error, cancellation) or not reusable: never back in the pool
                writer.close()

    async def _body(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        async with asyncio.timeout(self._read_timeout):
            if "chunked" in headers.get("transfer-encoding", "").lower():
                parts: list[bytes] = []
                while True:
                    size_line = await reader.readuntil(b"\r\n")
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                    if size == 0:
                        while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                            pass
                        return b"".join(parts)
                    parts.append(await reader.readexactly(size))
                    await reader.readexactly(2)
            length = headers.get("content-length")
            if length is not None:
                return await reader.readexactly(int(length))
            return await reader.read()  # delimited by the close


def _parse_head(head: bytes) -> tuple[int, dict[str, str], str]:
    try:
        text = head.decode("latin-1")
        status_line, *lines = text.split("\r\n")
        version, code, *_ = status_line.split(" ", 2)
        status = int(code)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UpstreamUnavailable(f"upstream sent an unreadable status line: {head[:80]!r}") from exc
    if status < 200:  # 1xx: never asked for (no Expect header); not worth supporting
        raise UpstreamUnavailable(f"upstream answered {status} before its answer")
    headers = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return status, headers, version


def _keeps_alive(version: str, headers: dict[str, str]) -> bool:
    connection = headers.get("connection", "").lower()
    if version == "HTTP/1.0":
        return "keep-alive" in connection
    return "close" not in connection


def _decoded(body: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompress(body)
    raise UpstreamUnavailable(f"upstream sent a {encoding!r}-encoded answer")
