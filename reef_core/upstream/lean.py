"""Keep-alive HTTP/1.1 for the common case: a POST to a plain-``http`` upstream.

A local engine (SGLang, vLLM, Ollama) on loopback answers a short request in well under a
millisecond, and aiohttp's client spends about 150 us of Python on each request (a task to
write the body, request and response objects, tracing hooks); on the recording path that is
a sixth of reef's added latency.  This client does only what that case needs: one POST with
a body, the answer read whole (:meth:`LeanHTTP.post`) or as it arrives (:meth:`LeanHTTP.stream`,
for server-sent events), framed by ``Content-Length``, chunked encoding or the close, and
connections kept open and reused once an answer was read to its end.  Other methods and
``https`` stay with aiohttp.

A request that fails on a reused connection before a byte of the answer came back is sent
once more on a new one: the server closed an idle connection, so it never saw the request.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from reef_core import __version__
from reef_core.errors import UpstreamTimeout, UpstreamTooLarge, UpstreamUnavailable

__all__ = ["LeanHTTP", "LeanReply", "LeanStream", "too_large"]

_HEAD_LIMIT = 64 * 1024
_IDLE_KEPT = 256  # idle connections kept per upstream: a burst of this many reuses them all
_HIGH_WATER = 256 * 1024  # bytes buffered before a connection stops reading
# an answer left before its end is read to it in the background, within these bounds, so its
# connection can be kept (a stream's caller stops at its last event, before the chunked
# encoding's closing line, which has almost always arrived with it)
_DRAIN_S = 1.0
_DRAIN_MAX = 64 * 1024


@dataclass(frozen=True)
class LeanReply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes


class _Stale(Exception):
    """A reused connection was closed before any of the answer arrived."""


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _Connection(asyncio.Protocol):
    """One connection to the upstream: the bytes as they arrive, taken in whatever pieces
    they came in.  A protocol rather than asyncio's streams: a read is one future and at most
    one timer, where a ``StreamReader`` read under ``asyncio.timeout`` costs several times
    that, for every event of every stream."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self.eof = False  # the upstream closed its side, or the connection is gone
        self._error: BaseException | None = None

    # -- protocol callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) > _HIGH_WATER and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self._error = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- for the client --------------------------------------------------------------------

    @property
    def idle_ok(self) -> bool:
        """Open, nothing unread: fit to carry the next request."""
        return not self.eof and not self._buffer and self._transport is not None

    def write(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def read(self, deadline: float | None, most: int | None = None) -> bytes:
        """What has arrived (at most ``most`` bytes), waiting until ``deadline`` (the loop's
        clock) for something; ``b""`` once the upstream closed its side."""
        if not self._buffer:
            await self._wait(deadline)
            if not self._buffer:
                return b""
        buffer = self._buffer
        if most is None or most >= len(buffer):
            data = bytes(buffer)
            buffer.clear()
        else:
            data = bytes(buffer[:most])
            del buffer[:most]
        if self._paused and len(buffer) <= _HIGH_WATER // 4 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return data

    async def read_head(self, deadline: float | None) -> bytes:
        """The answer's status line and headers, through the blank line that ends them."""
        while True:
            end = self._buffer.find(b"\r\n\r\n", 0, _HEAD_LIMIT)
            if end >= 0:
                return await self.read(None, end + 4)
            if len(self._buffer) >= _HEAD_LIMIT:
                raise asyncio.LimitOverrunError("the response head is too long", len(self._buffer))
            if self.eof:
                raise asyncio.IncompleteReadError(bytes(self._buffer), None)
            await self._wait(deadline)

    async def _wait(self, deadline: float | None) -> None:
        """Until more bytes arrive or the connection ends; raises the connection's error
        once nothing is left to read, and TimeoutError past ``deadline``."""
        if not self.eof:
            waiter = self._waiter = self._loop.create_future()
            timer = None if deadline is None else self._loop.call_at(deadline, _expire, waiter)
            if self._paused and self._transport is not None:  # someone is reading: let it flow
                self._paused = False
                self._transport.resume_reading()
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        if self.eof and not self._buffer and self._error is not None:
            raise self._error


class LeanHTTP:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        authority: str,
        connect_timeout_s: float,
        read_timeout_s: float,
        max_answer_bytes: int | None = None,
    ) -> None:
        self._host = host
        #: the most bytes of one answer read, decoded (``inference.max-answer-bytes``)
        self.max_answer = max_answer_bytes
        self._port = port
        self._authority = authority.encode()
        self.name = f"http://{authority}"  # what errors call it (lean is plain http, no userinfo)
        self._connect_timeout = connect_timeout_s
        self.read_timeout = read_timeout_s
        self._idle: list[_Connection] = []
        self._draining: set[asyncio.Task[None]] = set()

    @staticmethod
    def accepts(target: str, headers: Mapping[str, str]) -> bool:
        """A request this client can send as it is: an ASCII target (aiohttp quotes the rest)
        and no line breaks anywhere."""
        texts = [target, *headers.keys(), *headers.values()]
        return target.isascii() and not any("\r" in t or "\n" in t for t in texts)

    async def post(self, target: str, headers: Mapping[str, str], body: bytes) -> LeanReply:
        """POST ``body`` to ``target`` (path and query) and read the whole answer; raises
        UpstreamUnavailable or UpstreamTimeout as the aiohttp path does."""
        answer = await self.stream(target, headers, body)
        try:
            return LeanReply(answer.status, answer.headers, await answer.read())
        finally:
            answer.close()

    async def stream(self, target: str, headers: Mapping[str, str], body: bytes) -> LeanStream:
        """POST ``body`` and return once the answer's head arrived; read it with
        :meth:`LeanStream.chunks` or :meth:`LeanStream.read`, then :meth:`LeanStream.close`."""
        lines = [b"POST " + target.encode() + b" HTTP/1.1", b"Host: " + self._authority]
        lines += [f"{name}: {value}".encode() for name, value in headers.items()]
        lines += [b"User-Agent: reef/" + __version__.encode(), b"Content-Length: %d" % len(body)]
        request = b"\r\n".join(lines) + b"\r\n\r\n" + body
        while self._idle:
            connection = self._idle.pop()
            if not connection.idle_ok:  # the server closed it while it waited
                connection.close()
                continue
            try:
                return await self._start(connection, request, reused=True)
            except _Stale:
                break  # the server had closed it: this request never reached it
        connection = await self._connect()
        try:
            return await self._start(connection, request, reused=False)
        except _Stale as exc:  # cannot happen on a fresh connection; kept for the type checker
            raise UpstreamUnavailable("upstream closed the connection") from exc

    async def close(self) -> None:
        for task in list(self._draining):
            task.cancel()
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _drain_later(self, answer: LeanStream) -> None:
        task = asyncio.get_running_loop().create_task(answer.drain())
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)

    def _release(self, connection: _Connection, reusable: bool) -> None:
        if reusable and connection.idle_ok and len(self._idle) < _IDLE_KEPT:
            self._idle.append(connection)
        else:  # unknown state (error, cancellation, unread answer, bytes past its end)
            connection.close()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                made = await loop.create_connection(lambda: _Connection(loop), self._host, self._port)
                return made[1]
        except TimeoutError as exc:
            seconds = self._connect_timeout
            raise UpstreamTimeout(
                f"upstream {self.name} did not accept a connection in {seconds:g}s"
            ) from exc
        except OSError as exc:
            raise UpstreamUnavailable(f"upstream {self.name} unreachable: {exc.strerror or exc}") from exc

    async def _start(self, connection: _Connection, request: bytes, *, reused: bool) -> LeanStream:
        """Send ``request`` and read the answer's head; on any failure the connection is closed."""
        try:
            try:
                connection.write(request)
                head = await connection.read_head(asyncio.get_running_loop().time() + self.read_timeout)
            except asyncio.IncompleteReadError as exc:
                if reused and not exc.partial:
                    raise _Stale from exc
                raise UpstreamUnavailable("upstream closed the connection before answering") from exc
            except ConnectionError as exc:
                if reused:
                    raise _Stale from exc
                raise
            status, headers, version = _parse_head(head)
            return LeanStream(self, connection, status, headers, version)
        except BaseException as exc:
            connection.close()
            if not isinstance(exc, Exception) or isinstance(exc, (_Stale, UpstreamUnavailable)):
                raise  # cancellation and interpreter exits included
            raise _mapped(exc, timed_out="upstream did not answer in time") from exc


class LeanStream:
    """One answer on a kept-alive connection, read as it arrives; implements the daemon's
    ``AnswerStream``.  The connection goes back to the pool only if the answer was read to
    its end."""

    extras: dict[str, Any] | None = None

    def __init__(
        self, owner: LeanHTTP, connection: _Connection, status: int, headers: dict[str, str], version: str
    ) -> None:
        self._owner = owner
        self._connection = connection
        self.status = status
        self.headers = headers  # lower-case names
        self._version = version
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._dechunker = _Dechunker() if chunked else None
        length = headers.get("content-length")
        self._left = int(length) if length is not None and not chunked else None
        self._finished = False
        self._closed = False

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    async def read(self) -> bytes:
        """The whole (decoded) answer; the read timeout covers all of it."""
        deadline = asyncio.get_running_loop().time() + self._owner.read_timeout
        most = self._owner.max_answer
        try:
            body = b"".join([piece async for piece in self._pieces(lambda: deadline)])
            body = _decoded(body, self.headers.get("content-encoding", ""), most)
            if most is not None and len(body) > most:
                raise too_large(most)
        except (UpstreamUnavailable, asyncio.CancelledError):
            raise
        except Exception as exc:
            raise _mapped(exc, timed_out="upstream did not answer in time", cut=_CUT, broke=_BROKE) from exc
        self._finished = True
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        """The answer's (decoded) pieces as they arrive; the read timeout applies to each wait."""
        decoder = _decoder(self.headers.get("content-encoding", ""))
        loop = asyncio.get_running_loop()
        each = self._owner.read_timeout
        left = self._owner.max_answer
        try:
            async for piece in self._pieces(lambda: loop.time() + each):
                if decoder is not None:
                    # at most one byte past what is left: a small compressed piece can be huge
                    piece = decoder.decompress(piece, 0 if left is None else left + 1)
                if left is not None:
                    left -= len(piece)
                    if left < 0:
                        raise too_large(self._owner.max_answer or 0)
                if piece:
                    yield piece
            if decoder is not None and (rest := decoder.flush()):
                yield rest
        except (UpstreamUnavailable, asyncio.CancelledError):
            raise
        except Exception as exc:
            timed_out = "upstream stream stalled past the read timeout"
            raise _mapped(exc, timed_out=timed_out, cut=_STREAM_BROKE, broke=_STREAM_BROKE) from exc
        self._finished = True

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._finished and self._received_all:
            # left at its last event, but its end came in the same read: nothing to drain
            self._finished = True
        if not self._finished and self._reusable:
            self._owner._drain_later(self)
        else:
            self._owner._release(self._connection, self._finished and self._reusable)

    async def drain(self) -> None:
        """Read what is left of the answer (bounded), then pool the connection or close it."""
        drained = False
        deadline = asyncio.get_running_loop().time() + _DRAIN_S
        try:
            seen = 0
            async for piece in self._pieces(lambda: deadline):
                seen += len(piece)
                if seen > _DRAIN_MAX:
                    break
            else:
                drained = True
        except Exception:
            pass  # anything odd: the connection is simply not kept
        finally:
            self._owner._release(self._connection, drained and self._reusable)

    @property
    def _received_all(self) -> bool:
        return self._dechunker.done if self._dechunker is not None else self._left == 0

    @property
    def _reusable(self) -> bool:
        """The connection can serve another request once this answer is read to its end."""
        framed = self._left is not None if self._dechunker is None else not self._dechunker.extra
        return framed and _keeps_alive(self._version, self.headers)

    async def _pieces(self, deadline: Callable[[], float]) -> AsyncIterator[bytes]:
        """The body's bytes in the pieces they arrive in (each wait until ``deadline()``):
        chunked coding undone (every read's complete chunks come out as one piece), or
        framed by ``Content-Length``, or by the close."""
        connection = self._connection
        chunks = self._dechunker
        most = self._owner.max_answer
        seen = 0
        while not self._received_all:
            raw = await connection.read(deadline(), self._left)
            seen += len(raw)
            if most is not None and seen > most:
                raise too_large(most)
            if not raw:
                if chunks is None and self._left is None:
                    return  # delimited by the close
                raise asyncio.IncompleteReadError(b"", None)
            if chunks is not None:
                raw = chunks.feed(raw)
            elif self._left is not None:
                self._left -= len(raw)
            if raw:
                yield raw


class _Dechunker:
    """Undoes chunked transfer coding incrementally: :meth:`feed` what arrived, get the data
    of the chunks it completes (or partly carries); :attr:`done` after the last chunk and its
    trailers.  Bytes after that mean the connection is in an unknown state (:attr:`extra`)."""

    def __init__(self) -> None:
        self._rest = b""  # an incomplete size line, trailer line or chunk end, kept for more
        self._left = 0  # data bytes of the current chunk still to come
        self._state = "size"  # size -> data -> end -> size ..., then trailers
        self.done = False
        self.extra = False

    def feed(self, raw: bytes) -> bytes:
        if self.done:
            self.extra = True
            return b""
        data = self._rest + raw if self._rest else raw
        self._rest = b""
        size = len(data)
        pos = 0
        out: list[bytes] = []
        while pos < size:
            state = self._state
            if state == "data":
                take = min(self._left, size - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._left -= take
                if self._left == 0:
                    self._state = "end"
            elif state == "end":
                if size - pos < 2:
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise ValueError("a chunk does not end where its size says")
                pos += 2
                self._state = "size"
            else:  # a size line, or a trailer line
                cut = data.find(b"\r\n", pos)
                if cut < 0:
                    if size - pos > _HEAD_LIMIT:
                        raise ValueError("a chunk size or trailer line is too long")
                    break
                line = data[pos:cut]
                pos = cut + 2
                if state == "trailers":
                    if not line:
                        self.done = True
                        self.extra = pos < size
                        return b"".join(out)
                    continue
                length = int(line.split(b";", 1)[0].strip(), 16)
                if length < 0:
                    raise ValueError(f"chunk size {length}")
                self._state, self._left = ("data", length) if length else ("trailers", 0)
        if pos < size:
            self._rest = data[pos:]
        return out[0] if len(out) == 1 else b"".join(out)


_CUT = "upstream closed the connection mid-answer"
_BROKE = "upstream connection failed"
_STREAM_BROKE = "upstream stream broke"


def _mapped(exc: BaseException, *, timed_out: str, cut: str = _CUT, broke: str = _BROKE) -> Exception:
    """The upstream error a failure while talking to the upstream is reported as."""
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(timed_out)
    if isinstance(exc, asyncio.LimitOverrunError):
        return UpstreamUnavailable("upstream sent an oversized response head")
    if isinstance(exc, asyncio.IncompleteReadError):
        return UpstreamUnavailable(cut)
    if isinstance(exc, (ValueError, zlib.error)):
        return UpstreamUnavailable(f"upstream sent an unreadable answer: {exc}")
    if isinstance(exc, (ConnectionError, OSError)):
        return UpstreamUnavailable(f"{broke}: {exc or type(exc).__name__}")
    return UpstreamUnavailable(f"upstream failed: {exc!r}")


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


def _decoder(encoding: str) -> Any:
    """An incremental decoder for the answer's content coding, or None for none."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise UpstreamUnavailable(f"upstream sent a {encoding!r}-encoded answer")


def _decoded(body: bytes, encoding: str, most: int | None = None) -> bytes:
    """``body`` decoded; with ``most``, at most one byte past it (enough to tell it is over)."""
    decoder = _decoder(encoding)
    if decoder is None:
        return body
    if most is None:
        return decoder.decompress(body) + decoder.flush()
    return decoder.decompress(body, most + 1)


def too_large(most: int) -> UpstreamTooLarge:
    return UpstreamTooLarge(
        f"the upstream's answer ran past {most} bytes, the most inference.max-answer-bytes allows: "
        "it was cut off there"
    )
