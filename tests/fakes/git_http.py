"""Bare repositories served over smart HTTP by the real ``git http-backend``, on loopback.

The shape follows what git and libgit2 need from a server (found the hard way, see the issue 20
notes, commit 2):

* HTTP/1.1 with **chunked answers**: libgit2 cannot read an HTTP/1.0 body that ends at close;
* request bodies de-chunked here: git sends a chunked POST above ``http.postBuffer``, and the
  CGI wants the plain body with its length;
* ``REMOTE_USER`` set: http-backend enables ``receive-pack`` (push) only for a user;
* optional Basic auth (``auth="user:pass"``): a 401 without it, as a forge answers;
* no git-lfs API: ``…/info/lfs/objects/batch`` reaches http-backend, which answers 404, which
  is what "this remote cannot take LFS objects" looks like;
* :meth:`GitHttpServer.stop` and :meth:`GitHttpServer.start` again on the same port: a remote
  that goes down and comes back.
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["GitHttpServer"]


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address: tuple[str, int], root: Path, auth: str | None) -> None:
        self.root = root
        self.auth = auth
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._cgi()

    def do_POST(self) -> None:
        self._cgi()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _cgi(self) -> None:
        user = "anonymous"
        auth = self.server.auth
        body = self._body() if self.command == "POST" else b""
        if auth:
            if self.headers.get("Authorization", "") != "Basic " + base64.b64encode(auth.encode()).decode():
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            user = auth.split(":")[0]
        url = urlsplit(self.path)
        env = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "REQUEST_METHOD": self.command,
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": user,  # http-backend enables receive-pack for an authenticated user
            "REMOTE_ADDR": self.client_address[0],
        }
        for header in ("Content-Encoding", "Git-Protocol"):
            if self.headers.get(header):
                env["HTTP_" + header.upper().replace("-", "_")] = self.headers[header]
        proc = subprocess.Popen(
            ["git", "http-backend"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert proc.stdin is not None and proc.stdout is not None
        stdin = proc.stdin

        def feed() -> None:
            # http-backend may answer (an error) without reading the whole body
            with contextlib.suppress(BrokenPipeError):
                try:
                    stdin.write(body)
                finally:
                    stdin.close()

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        status, headers = "200 OK", []
        while True:
            line = proc.stdout.readline().rstrip(b"\r\n")
            if not line:
                break
            key, _, value = line.decode("latin-1").partition(":")
            if key.lower() == "status":
                status = value.strip()
            else:
                headers.append((key, value.strip()))
        code, _, reason = status.partition(" ")
        self.send_response(int(code), reason)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while chunk := proc.stdout.read1(65536):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")
        feeder.join()
        proc.wait()


class GitHttpServer:
    """``git http-backend`` serving the bare repositories under ``root`` at ``http://127.0.0.1:port``.

    ``auth`` (``"user:pass"``) makes every request need those Basic credentials.
    """

    def __init__(self, root: Path, *, auth: str | None = None, port: int = 0) -> None:
        self.root = Path(root)
        self.auth = auth
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> GitHttpServer:
        """Listen (again, on the same port once it had one)."""
        if self._server is None:
            self._server = _Server(("127.0.0.1", self.port), self.root, self.auth)
            self.port = self._server.server_address[1]
            self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering: the port refuses connections until :meth:`start`."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def url(self, repository: str, *, user: str | None = None) -> str:
        """The URL of ``root/<repository>`` (with a user name, never a password, if given)."""
        who = f"{user}@" if user else ""
        return f"http://{who}127.0.0.1:{self.port}/{repository}"

    def __enter__(self) -> GitHttpServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
