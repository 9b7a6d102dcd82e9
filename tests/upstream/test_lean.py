"""The lean upstream client against real sockets: a tiny HTTP server per test that misbehaves
the ways upstreams do (closing idle connections, chunking, cutting answers, hanging)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Awaitable, Callable

import pytest

from reef_core.errors import UpstreamTimeout, UpstreamUnavailable
from reef_core.upstream.client import UpstreamClient
from reef_core.upstream.lean import LeanHTTP

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, dict], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return head, await reader.readexactly(length)


def answer(body: bytes, *extra: bytes) -> bytes:
    lines = [b"HTTP/1.1 200 OK", b"Content-Type: application/json", b"Content-Length: %d" % len(body), *extra]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def run_with(handler: Handler, client_calls: Callable[[LeanHTTP, dict], Awaitable[None]], **timeouts):
    state: dict = {"connections": 0, "requests": []}

    async def on_connect(reader, writer):
        state["connections"] += 1
        try:
            await handler(reader, writer, state)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    lean = LeanHTTP(
        "127.0.0.1",
        port,
        authority=f"127.0.0.1:{port}",
        connect_timeout_s=timeouts.get("connect", 2.0),
        read_timeout_s=timeouts.get("read", 2.0),
    )
    try:
        await client_calls(lean, state)
    finally:
        await lean.close()
        server.close()
        await server.wait_closed()
    return state


def test_one_connection_serves_many_requests_with_the_headers_and_body_as_given():
    async def keep_alive(reader, writer, state):
        while True:
            head, body = await read_request(reader)
            state["requests"].append((head, body))
            writer.write(answer(b'{"n": %d}' % len(state["requests"])))

    async def calls(lean, state):
        for n in range(1, 6):
            headers = {"x-api-key": "k", "Accept": "a"}
            reply = await lean.post("/v1/chat/completions?beta=true", headers, b'{"q":1}')
            assert (reply.status, reply.body) == (200, b'{"n": %d}' % n)
            assert reply.headers["content-type"] == "application/json"

    state = asyncio.run(run_with(keep_alive, calls))
    assert state["connections"] == 1
    head, body = state["requests"][0]
    assert head.startswith(b"POST /v1/chat/completions?beta=true HTTP/1.1\r\n")
    assert b"\r\nx-api-key: k\r\n" in head and b"\r\nContent-Length: 7\r\n" in head and body == b'{"q":1}'


def test_an_idle_connection_the_server_closed_is_replaced_without_the_caller_noticing():
    async def one_per_connection(reader, writer, state):
        state["requests"].append(await read_request(reader))
        writer.write(answer(b"{}"))  # says keep-alive (HTTP/1.1), closes anyway
        await writer.drain()

    async def calls(lean, state):
        for _ in range(3):
            assert (await lean.post("/x", {}, b"{}")).body == b"{}"
            await asyncio.sleep(0.05)  # the close arrives before the next request

    state = asyncio.run(run_with(one_per_connection, calls))
    assert state["connections"] == 3 and len(state["requests"]) == 3  # each sent exactly once


def test_chunked_gzip_and_connection_close_answers():
    async def varied(reader, writer, state):
        await read_request(reader)
        n = len(state["requests"])
        state["requests"].append(n)
        if n == 0:  # chunked, with a trailer
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            writer.write(b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
            await read_request(reader)
            state["requests"].append(1)
            zipped = gzip.compress(b'{"zipped":true}')
            writer.write(answer(zipped, b"Content-Encoding: gzip", b"Connection: close"))
            await writer.drain()
            await reader.read()  # the client closes it, as asked
        else:
            writer.write(answer(b"fresh"))

    async def calls(lean, state):
        assert (await lean.post("/c", {}, b"1")).body == b"hello world"
        assert (await lean.post("/c", {}, b"2")).body == b'{"zipped":true}'
        assert (await lean.post("/c", {}, b"3")).body == b"fresh"

    state = asyncio.run(run_with(varied, calls))
    assert state["connections"] == 2  # reused after the chunked answer, not after "close"


def test_an_answer_cut_short_is_an_error_and_the_next_request_starts_clean():
    async def cut(reader, writer, state):
        await read_request(reader)
        state["requests"].append(1)
        if len(state["requests"]) == 1:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
            await writer.drain()
            return  # and close
        writer.write(answer(b"whole"))

    async def calls(lean, state):
        with pytest.raises(UpstreamUnavailable, match="mid-answer"):
            await lean.post("/c", {}, b"1")
        assert (await lean.post("/c", {}, b"2")).body == b"whole"

    state = asyncio.run(run_with(cut, calls))
    assert len(state["requests"]) == 2  # a cut answer is not retried: the upstream did the work


def test_a_hanging_upstream_times_out_and_a_dead_one_is_unreachable():
    async def hang(reader, writer, state):
        await read_request(reader)
        await asyncio.sleep(5)

    async def calls(lean, state):
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(UpstreamTimeout):
            await lean.post("/c", {}, b"1")
        assert loop.time() - started < 2

    asyncio.run(run_with(hang, calls, read=0.3))

    async def dead() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        lean = LeanHTTP("127.0.0.1", port, authority="x", connect_timeout_s=1, read_timeout_s=1)
        with pytest.raises(UpstreamUnavailable, match=r"^upstream http://x unreachable: "):
            await lean.post("/c", {}, b"1")

    asyncio.run(dead())


def test_the_upstream_client_takes_the_lean_path_only_where_it_can():
    assert UpstreamClient("http://127.0.0.1:9/v1", timeout_s=1)._lean is not None
    assert UpstreamClient("https://api.example.com/v1", timeout_s=1)._lean is None
    assert UpstreamClient("http://user:secret@host:9", timeout_s=1)._lean is None
    assert LeanHTTP.accepts("/v1/messages?beta=true", {"x-api-key": "k"})
    assert not LeanHTTP.accepts("/v1/messages", {"x-api-key": "k\r\nInjected: 1"})
    assert not LeanHTTP.accepts("/v1/messages?q=é", {})


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def streams(
    first: bytes, rest: Callable[[asyncio.StreamWriter], Awaitable[None]], *, end: bool = False
) -> Handler:
    """A server that answers every request on a connection with a chunked stream: ``first``
    as one chunk at once (``end``: with the closing line), then whatever ``rest`` writes."""

    async def handler(reader, writer, state):
        while True:
            await read_request(reader)
            state["requests"].append(1)
            writer.write(CHUNKED_HEAD + chunk(first) + (b"0\r\n\r\n" if end else b""))
            await writer.drain()
            await rest(writer)

    return handler


def test_a_stream_arrives_as_it_is_sent_and_its_connection_serves_the_next_request():
    async def rest(writer):
        await asyncio.sleep(0.15)
        writer.write(chunk(b"data: 2\n\n") + b"0\r\n\r\n")

    async def calls(lean, state):
        loop = asyncio.get_running_loop()
        for _ in range(2):
            answer = await lean.stream("/s", {"Accept": "text/event-stream"}, b"{}")
            assert (answer.status, answer.content_type) == (200, "text/event-stream")  # as sent
            arrivals = [(piece, loop.time()) async for piece in answer.chunks()]
            answer.close()
            assert [piece for piece, _ in arrivals] == [b"data: 1\n\n", b"data: 2\n\n"]
            assert arrivals[1][1] - arrivals[0][1] >= 0.1  # relayed as sent, not gathered

    state = asyncio.run(run_with(streams(b"data: 1\n\n", rest), calls))
    assert state["connections"] == 1


async def stop_at_last_event(lean: LeanHTTP) -> None:
    """What the daemon does with a stream: read it up to its last event, then close it."""
    answer = await lean.stream("/s", {}, b"{}")
    async for piece in answer.chunks():
        assert piece == b"data: [DONE]\n\n"
        break
    answer.close()


@pytest.mark.parametrize("finishes", [True, False])
def test_a_stream_left_at_its_last_event_keeps_its_connection_only_if_the_rest_arrives(monkeypatch, finishes):
    monkeypatch.setattr("reef_core.upstream.lean._DRAIN_S", 0.3)

    async def rest(writer):
        if not finishes:
            await asyncio.sleep(5)  # never sends the closing line
        await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")

    async def calls(lean, state):
        for _ in range(2):
            await stop_at_last_event(lean)
            await asyncio.sleep(0.5)

    state = asyncio.run(run_with(streams(b"data: [DONE]\n\n", rest), calls))
    assert len(state["requests"]) == 2
    assert state["connections"] == (1 if finishes else 2)


def test_a_stream_whose_end_came_with_its_last_event_is_pooled_at_once():
    async def rest(writer):
        return  # the closing line went out with the event, in the same write

    async def calls(lean, state):
        for _ in range(3):
            await stop_at_last_event(lean)
            assert not lean._draining and len(lean._idle) == 1  # no reading left to do

    state = asyncio.run(run_with(streams(b"data: [DONE]\n\n", rest, end=True), calls))
    assert len(state["requests"]) == 3 and state["connections"] == 1


def test_streams_framed_by_length_by_the_close_or_gzipped_read_whole():
    body = b"data: " + b"x" * 100_000 + b"\n\n"

    async def varied(reader, writer, state):
        await read_request(reader)
        n = len(state["requests"])
        state["requests"].append(n)
        if n == 0:
            writer.write(answer(body))
            await read_request(reader)
            zipped = gzip.compress(body)
            head = answer(b"", b"Content-Encoding: gzip").replace(b"Length: 0", b"Length: %d" % len(zipped))
            writer.write(head + zipped[:50])
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(zipped[50:])
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()

    async def calls(lean, state):
        for _ in range(3):
            answer = await lean.stream("/s", {}, b"{}")
            assert b"".join([piece async for piece in answer.chunks()]) == body
            answer.close()

    state = asyncio.run(run_with(varied, calls))
    assert state["connections"] == 1


def test_a_stream_cut_or_stalled_midway_is_an_upstream_error():
    async def cut(reader, writer, state):
        await read_request(reader)
        writer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))
        await writer.drain()
        if state.setdefault("mode", "cut") == "stall":
            await asyncio.sleep(5)

    async def calls(lean, state):
        cases = (("cut", UpstreamUnavailable, "stream broke"), ("stall", UpstreamTimeout, "stalled"))
        for mode, error, words in cases:
            state["mode"] = mode
            answer = await lean.stream("/s", {}, b"{}")
            pieces = []
            with pytest.raises(error, match=words):
                async for piece in answer.chunks():
                    pieces.append(piece)
            answer.close()
            assert pieces == [b"data: 1\n\n"]  # what came before the break still came

    asyncio.run(run_with(cut, calls, read=0.3))


def test_chunked_coding_is_undone_however_the_bytes_are_split():
    from reef_core.upstream.lean import _Dechunker

    wire = chunk(b"data: 1\n\n") + b"a;ext=x\r\n0123456789\r\n" + chunk(b"z" * 300) + b"0\r\nX-T: 1\r\n\r\n"
    expected = b"data: 1\n\n0123456789" + b"z" * 300
    for step in (1, 2, 3, 7, 64, len(wire)):
        dechunker = _Dechunker()
        out = b"".join(dechunker.feed(wire[i : i + step]) for i in range(0, len(wire), step))
        assert (out, dechunker.done, dechunker.extra) == (expected, True, False), step
    dechunker = _Dechunker()
    dechunker.feed(wire + b"HTTP/1.1 200 OK")  # bytes past the end: the connection is not kept
    assert dechunker.done and dechunker.extra
    with pytest.raises(ValueError):
        _Dechunker().feed(b"3\r\nabcdef\r\n")  # longer than its size says


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_large_answers_and_streams_on_either_event_loop(loop):
    # reef serve runs on uvloop, whose transports are not asyncio's classes; an answer
    # larger than what a connection buffers makes it stop and resume reading
    big = bytes(range(256)) * 8192  # 2 MB

    async def handler(reader, writer, state):
        while True:
            await read_request(reader)
            state["requests"].append(1)
            if len(state["requests"]) % 2:
                writer.write(answer(big))
            else:
                writer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n") + chunk(big) + b"0\r\n\r\n")
            await writer.drain()

    async def calls(lean, state):
        for _ in range(2):
            reply = await lean.post("/big", {}, b"{}")
            assert reply.body == big
            stream = await lean.stream("/s", {}, b"x" * 300_000)  # a large request, too
            assert b"".join([piece async for piece in stream.chunks()]) == b"data: 1\n\n" + big
            stream.close()

    factory = None
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        state = runner.run(run_with(handler, calls))
    assert len(state["requests"]) == 4 and state["connections"] == 1


def test_an_answer_with_bytes_past_its_length_does_not_pass_them_to_the_next_request():
    async def sloppy(reader, writer, state):
        while True:
            await read_request(reader)
            state["requests"].append(1)
            # says 2 bytes, sends 9: what follows is not the next answer
            writer.write(answer(b"ok").replace(b"\r\n\r\nok", b"\r\n\r\nokGARBAGE"))
            await writer.drain()

    async def calls(lean, state):
        for _ in range(3):
            assert (await lean.post("/c", {}, b"1")).body == b"ok"
            await asyncio.sleep(0.02)

    state = asyncio.run(run_with(sloppy, calls))
    assert len(state["requests"]) == 3 and state["connections"] == 3  # none reused


def test_a_burst_of_64_concurrent_requests_reuses_its_64_connections_for_the_next():
    async def keep_alive(reader, writer, state):
        while True:
            await read_request(reader)
            state["requests"].append(1)
            await asyncio.sleep(0.01)  # all 64 are in flight at once
            writer.write(answer(b"{}"))

    async def calls(lean, state):
        for _ in range(3):
            replies = await asyncio.gather(*(lean.post("/c", {}, b"{}") for _ in range(64)))
            assert all(reply.body == b"{}" for reply in replies)

    state = asyncio.run(run_with(keep_alive, calls))
    assert len(state["requests"]) == 192 and state["connections"] == 64


def test_an_oversized_or_unfinished_response_head_is_an_upstream_error_and_the_next_request_starts_clean():
    async def bad_heads(reader, writer, state):
        await read_request(reader)
        state["requests"].append(1)
        n = len(state["requests"])
        if n == 1:  # a head past 64 KB
            writer.write(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 70_000 + b"\r\n\r\n{}")
        elif n == 2:  # a head cut off by the close
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Len")
        else:
            writer.write(answer(b"fine"))
        await writer.drain()
        if n < 3:
            return  # and close

    async def calls(lean, state):
        with pytest.raises(UpstreamUnavailable, match="oversized response head"):
            await lean.post("/c", {}, b"1")
        with pytest.raises(UpstreamUnavailable, match="before answering"):
            await lean.post("/c", {}, b"2")
        assert (await lean.post("/c", {}, b"3")).body == b"fine"

    state = asyncio.run(run_with(bad_heads, calls))
    assert len(state["requests"]) == 3 and state["connections"] == 3
