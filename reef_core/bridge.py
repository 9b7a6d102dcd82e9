"""The sandbox's one way out: a unix-socket bridge to the daemon's inference routes.

Outside the sandbox, :class:`LoopbackBridge` is the only thing that talks to the daemon for the
code inside (:mod:`reef_core.sandbox` starts it, per run, in :class:`~reef_core.sandbox.Confinement`).
It reads each connection's request head first: only ``POST`` to :data:`BRIDGE_ROUTES` passes,
one request per connection, carrying the run's own credential; the bridge swaps it for the
daemon's token, which never enters the sandbox, and sets ``Host``, ``x-reef-scenario`` (the
run's scenario) and ``x-reef-capture: false`` whatever the sandbox sent, so the code can neither
reach reef's other routes nor record into the scenario's data.

Standard library only, like :mod:`reef_core.sandbox`.
"""

from __future__ import annotations

import json
import secrets
import selectors
import socket
import threading
from pathlib import Path

__all__ = ["BRIDGE_ROUTES", "LoopbackBridge"]

#: the daemon routes sandboxed code may call (the harnesses talk to these)
BRIDGE_ROUTES = frozenset(
    {"/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses"}
)
_MAX_HEAD = 64 * 1024
_MAX_BODY = 32 * 1024 * 1024
_CHUNK = 64 * 1024
_CONNECT_TIMEOUT = 10.0
# headers the bridge sets itself; the sandbox's own values for them are dropped
_DROPPED = frozenset(
    {
        "authorization",
        "connection",
        "expect",
        "host",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
        "x-api-key",
        "x-reef-capture",
        "x-reef-scenario",
    }
)


class LoopbackBridge:
    """A unix-socket server that passes inference requests carrying ``credential`` on to the
    daemon at ``host:port``, with ``token`` (the daemon's, or None) in its place.

    Use as a context manager: the socket exists (at ``socket_path``) between enter and exit.
    """

    def __init__(
        self,
        socket_path: Path,
        *,
        host: str,
        port: int,
        scenario: str,
        credential: str,
        token: str | None = None,
    ) -> None:
        if not credential:
            raise ValueError("a bridge needs a credential for the code it serves")
        self.socket_path = socket_path
        self.host = host
        self.port = port
        self.scenario = scenario
        self.credential = credential
        self._token = token  # the daemon's: sent on by the bridge, never into the sandbox
        self.refused: list[str] = []  # request lines the bridge turned away, for notes and tests
        self._server: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._live: set[socket.socket] = set()  # open connections, cut when the bridge closes

    def __enter__(self) -> LoopbackBridge:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.socket_path))
        server.listen(64)
        self._server = server
        self._thread = threading.Thread(target=self._accept, name="reef-bridge", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        server, self._server = self._server, None
        if server is not None:
            try:
                server.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            server.close()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            live = list(self._live)
        for conn in live:
            # wakes the thread serving it (a daemon still thinking would otherwise hold it)
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.socket_path.unlink(missing_ok=True)

    def _accept(self) -> None:
        while True:
            server = self._server
            if server is None:
                return
            try:
                client, _ = server.accept()
            except OSError:
                return  # closed by __exit__
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            self._track(client, True)
            try:
                self._pass_on(client)
            except OSError:
                pass  # either side went away; nothing to tell anyone
            finally:
                self._track(client, False)

    def _track(self, conn: socket.socket, live: bool) -> None:
        with self._lock:
            if live:
                self._live.add(conn)
            else:
                self._live.discard(conn)

    def _pass_on(self, client: socket.socket) -> None:
        client.settimeout(_CONNECT_TIMEOUT * 6)
        head, rest = _read_head(client)
        if head is None:
            _answer(client, 431, "the request head is too large or incomplete")
            return
        lines = head.decode("latin-1").split("\r\n")
        request_line = lines[0]
        method, _, target = request_line.partition(" ")
        path = target.split(" ", 1)[0].split("?", 1)[0]
        if method != "POST" or path not in BRIDGE_ROUTES:
            self._refuse(request_line)
            _answer(client, 403, f"the sandbox may only POST to {', '.join(sorted(BRIDGE_ROUTES))}")
            return
        headers, length, problem = _filter_headers(lines[1:], self.credential)
        if problem is not None:
            self._refuse(request_line)
            _answer(client, *problem)
            return
        headers += [
            f"host: [{self.host}]:{self.port}" if ":" in self.host else f"host: {self.host}:{self.port}",
            f"x-reef-scenario: {self.scenario}",
            "x-reef-capture: false",
            "connection: close",
        ]
        if self._token:
            headers.append(f"authorization: Bearer {self._token}")
        body = rest[:length]
        while len(body) < length:
            more = client.recv(min(_CHUNK, length - len(body)))
            if not more:
                return
            body += more
        with socket.create_connection((self.host, self.port), timeout=_CONNECT_TIMEOUT) as daemon:
            self._track(daemon, True)
            try:
                daemon.settimeout(None)
                daemon.sendall("\r\n".join([request_line, *headers, "", ""]).encode("latin-1") + body)
                _relay_answer(daemon, client)
            finally:
                self._track(daemon, False)

    def _refuse(self, request_line: str) -> None:
        with self._lock:
            self.refused.append(request_line[:200])


def _read_head(conn: socket.socket) -> tuple[bytes | None, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > _MAX_HEAD:
            return None, b""
        more = conn.recv(_CHUNK)
        if not more:
            return None, b""
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _filter_headers(lines: list[str], credential: str) -> tuple[list[str], int, tuple[int, str] | None]:
    """The headers to pass on, the body's length, or (status, why) when the request is refused
    (one without ``credential`` as its bearer or ``x-api-key`` among them)."""
    kept: list[str] = []
    lengths: list[str] = []
    presented = False
    for line in lines:
        name, sep, value = line.partition(":")
        key = name.lower()
        if not sep or not key or key != key.strip():
            return [], 0, (400, f"malformed header line {line[:80]!r}")
        given = value.strip()
        if key == "authorization" and given[:7].lower() == "bearer ":
            given = given[7:].strip()
        if key in ("authorization", "x-api-key") and secrets.compare_digest(
            given.encode(), credential.encode()
        ):
            presented = True
        if key == "transfer-encoding":
            return [], 0, (411, "the bridge needs a Content-Length, not Transfer-Encoding")
        if key == "content-length":
            lengths.append(value.strip())
        if key not in _DROPPED:
            kept.append(line)
    if not presented:
        return [], 0, (401, "the sandbox's requests carry the credential it was given (REEF_API_KEY)")
    if len(lengths) != 1 or not lengths[0].isdigit():
        return [], 0, (411, "the bridge needs exactly one Content-Length")
    length = int(lengths[0])
    if length > _MAX_BODY:
        return [], 0, (413, f"the request body is over {_MAX_BODY} bytes")
    return kept, length, None


def _relay_answer(daemon: socket.socket, client: socket.socket) -> None:
    """The daemon's answer to the client until the daemon closes; whatever else the client sends
    (a second, pipelined request) is dropped, and a client that hangs up ends the exchange."""
    selector = selectors.DefaultSelector()
    selector.register(daemon, selectors.EVENT_READ)
    selector.register(client, selectors.EVENT_READ)
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj is daemon:
                    data = daemon.recv(_CHUNK)
                    if not data:
                        return
                    client.sendall(data)
                else:
                    if not client.recv(_CHUNK):
                        # a half-close after the request is allowed; a gone client shows on send
                        selector.unregister(client)
    finally:
        selector.close()


def _answer(client: socket.socket, status: int, message: str) -> None:
    reasons = {
        400: "Bad Request",
        401: "Unauthorized",
        403: "Forbidden",
        411: "Length Required",
        413: "Content Too Large",
        431: "Request Header Fields Too Large",
    }
    body = json.dumps({"error": {"message": message, "type": "reef_sandbox"}}).encode()
    head = (
        f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    client.sendall(head.encode("latin-1") + body)
