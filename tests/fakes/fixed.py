"""A loopback HTTP server that answers every GET and POST with the same bytes.

For a test that needs another origin or another upstream and nothing more: the page a browser
opens from another site (``tests/daemon/test_browsers.py``), an upstream whose one answer is the
point (a gzip bomb, ``tests/daemon/test_limits.py``).  A request's body is read and dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FixedServer"]


class FixedServer:
    """``body`` with ``headers`` (``Content-Length`` added) to every request, on 127.0.0.1 and a
    free port; use as a context manager, or :meth:`close`."""

    def __init__(self, body: bytes, headers: Mapping[str, str]) -> None:
        fixed = {**headers, "Content-Length": str(len(body))}

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                for name, value in fixed.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> FixedServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
