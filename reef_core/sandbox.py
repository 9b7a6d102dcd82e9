"""The agent proposer's sandbox: a bubblewrap command line, and a bridge to the daemon's port.

Owns: whether bwrap can isolate on this host (:func:`bwrap_problem`), the bwrap command line
(:func:`bwrap_command`), and the one way out of the sandbox's network namespace, which holds
nothing but its own loopback:

    pi ─▶ 127.0.0.1:<port> (inside) ─▶ unix socket (bind-mounted) ─▶ LoopbackBridge ─▶ daemon

Inside, :func:`main` (run as ``python -I -B sandbox.py --port P --socket S -- cmd …``) listens on
127.0.0.1:<port>, starts the command, and copies bytes between each connection and the socket.
Outside, :class:`LoopbackBridge` is the only thing that talks to the daemon, and it reads each
connection's request head first: only ``POST`` to the inference routes passes, one request per
connection, with ``x-reef-scenario`` set to the step's scenario and ``x-reef-capture: false``
whatever the sandbox sent, so the agent can neither reach reef's other routes with the token it
holds nor record into the scenario's data.

This module imports the standard library only: it is also the program that runs inside.  The
bwrap probe, which runs only outside, starts bwrap with :func:`reef_core.procs.run_brief`, imported
when it runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import selectors
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "BRIDGE_ROUTES",
    "LoopbackBridge",
    "bwrap_command",
    "bwrap_problem",
    "forwarder_command",
    "main",
]

#: the daemon routes a sandboxed agent may call (pi and the harness it tries talk to these)
BRIDGE_ROUTES = frozenset({"/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens"})
_MAX_HEAD = 64 * 1024
_MAX_BODY = 32 * 1024 * 1024
_CHUNK = 64 * 1024
_CONNECT_TIMEOUT = 10.0
_PROBE_TIMEOUT = 15.0
# headers the bridge sets itself; the sandbox's own values for them are dropped
_DROPPED = frozenset(
    {
        "connection",
        "expect",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
        "x-reef-capture",
        "x-reef-scenario",
    }
)


# ------------------------------------------------------------------------------------------ bwrap


def _bwrap() -> str | None:
    return shutil.which("bwrap")


def bwrap_problem() -> str | None:
    """Why bwrap cannot isolate the agent here, or None when it can (probed once per binary)."""
    found = _bwrap()
    if found is None:
        return "bwrap is not installed (Debian: apt-get install bubblewrap)"
    return _probe(os.path.realpath(found))


@functools.lru_cache(maxsize=4)
def _probe(bwrap: str) -> str | None:
    # the same namespaces and mounts the agent gets: containers often refuse one of them
    from reef_core.procs import run_brief  # outside only (module docstring)

    argv = bwrap_command(["/bin/true"], writable=(), bwrap=bwrap)
    try:
        probe = run_brief(argv, timeout=_PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot create namespaces here: {exc}"
    if probe.returncode != 0:
        said = " ".join(probe.stderr.split())[:300] or f"exit {probe.returncode}"
        return f"bwrap cannot create namespaces here: {said}"
    return None


def bwrap_command(
    inner: Sequence[str],
    *,
    writable: Sequence[Path],
    readonly: Sequence[tuple[Path, Path]] = (),
    chdir: Path | None = None,
    bwrap: str | None = None,
) -> list[str]:
    """``bwrap … -- inner``: the host read-only, a private ``/tmp``, ``writable`` bound read-write
    at their own paths, each ``(source, target)`` of ``readonly`` bound read-only, every namespace
    unshared (the network one holds only loopback), no capabilities, killed with its parent."""
    argv = [bwrap or _bwrap() or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    # /tmp first: binds below it are created inside the private tmpfs, not hidden by it
    argv += ["--tmpfs", "/tmp"]
    for path in _runtime_under_tmp():  # a checkout or venv under /tmp (CI) must stay visible
        argv += ["--ro-bind", str(path), str(path)]
    for path in writable:
        argv += ["--bind", str(path), str(path)]
    for source, target in readonly:
        argv += ["--ro-bind", str(source), str(target)]
    # as root, bwrap keeps every capability unless told: a root with CAP_SYS_ADMIN could remount
    argv += ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if chdir is not None:
        argv += ["--chdir", str(chdir)]
    return [*argv, "--", *inner]


def _runtime_under_tmp() -> list[Path]:
    """What the sandbox runs from (this project, the Python environment) when it lives below
    ``/tmp``, which the sandbox otherwise replaces with an empty tmpfs; outermost paths only."""
    tmp = Path("/tmp")
    wanted = {
        Path(__file__).resolve().parents[2],  # the project: recipes, adapters, .cache/tools (pi)
        Path(sys.prefix).resolve(),
        Path(sys.executable).resolve().parent,
    }
    under = sorted(p for p in wanted if p != tmp and p.is_relative_to(tmp))
    return [p for p in under if not any(p != q and p.is_relative_to(q) for q in under)]


def forwarder_command(port: int, socket_path: str, inner: Sequence[str]) -> list[str]:
    """The command that runs ``inner`` inside the sandbox behind a 127.0.0.1:``port`` forwarder."""
    script = str(Path(__file__).resolve())
    return [sys.executable, "-I", "-B", script, "--port", str(port), "--socket", socket_path, "--", *inner]


# ------------------------------------------------------------------------------ outside: the bridge


class LoopbackBridge:
    """A unix-socket server that passes inference requests on to the daemon at ``host:port``.

    Use as a context manager: the socket exists (at ``socket_path``) between enter and exit.
    """

    def __init__(self, socket_path: Path, *, host: str, port: int, scenario: str) -> None:
        self.socket_path = socket_path
        self.host = host
        self.port = port
        self.scenario = scenario
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
        headers, length, problem = _filter_headers(lines[1:])
        if problem is not None:
            self._refuse(request_line)
            _answer(client, *problem)
            return
        headers += [
            f"x-reef-scenario: {self.scenario}",
            "x-reef-capture: false",
            "connection: close",
        ]
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


def _filter_headers(lines: list[str]) -> tuple[list[str], int, tuple[int, str] | None]:
    """The headers to pass on, the body's length, or (status, why) when the request is refused."""
    kept: list[str] = []
    lengths: list[str] = []
    for line in lines:
        name, sep, value = line.partition(":")
        key = name.lower()
        if not sep or not key or key != key.strip():
            return [], 0, (400, f"malformed header line {line[:80]!r}")
        if key == "transfer-encoding":
            return [], 0, (411, "the bridge needs a Content-Length, not Transfer-Encoding")
        if key == "content-length":
            lengths.append(value.strip())
        if key not in _DROPPED:
            kept.append(line)
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


# ------------------------------------------------------------------------------ inside: forwarder


def _pump(tcp: socket.socket, unix_path: str) -> None:
    """Copy bytes both ways between one loopback connection and the bridge, half-closes included."""
    with tcp, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bridge:
        try:
            bridge.connect(unix_path)
        except OSError:
            return
        selector = selectors.DefaultSelector()
        peers = {tcp: bridge, bridge: tcp}
        for sock in peers:
            selector.register(sock, selectors.EVENT_READ, data=sock)
        open_reads = 2
        try:
            while open_reads:
                for key, _ in selector.select():
                    conn: socket.socket = key.data
                    try:
                        data = conn.recv(_CHUNK)
                    except OSError:
                        return
                    if data:
                        try:
                            peers[conn].sendall(data)
                        except OSError:
                            return
                        continue
                    selector.unregister(conn)
                    open_reads -= 1
                    try:
                        peers[conn].shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
        finally:
            selector.close()


def _serve_loopback(listener: socket.socket, unix_path: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_pump, args=(conn, unix_path), daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    """Inside the sandbox: listen on 127.0.0.1:``--port``, run the command, exit with its code."""
    parser = argparse.ArgumentParser(prog="reef-sandbox-forwarder")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", args.port))
    except OSError as exc:
        # taken: this is not a network namespace of its own, so the daemon's port is right here
        print(f"reef sandbox: cannot listen on 127.0.0.1:{args.port}: {exc}", file=sys.stderr)
        return 125
    listener.listen(64)
    threading.Thread(target=_serve_loopback, args=(listener, args.socket), daemon=True).start()
    try:
        return subprocess.call(command)
    except OSError as exc:
        print(f"reef sandbox: cannot start {command[0]}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
