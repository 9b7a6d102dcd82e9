"""Web pages cannot drive the daemon: a request a browser sends on another site's behalf is
refused before auth, with a token configured or not.

This module owns the two checks made on every request (``/healthz`` included) before anything
else reads it:

* **Host** (DNS rebinding): a page at ``http://attacker.example`` can point its own name at
  127.0.0.1; its requests then reach the daemon as same-origin ones, and the page reads the
  answers.  Its requests still say ``Host: attacker.example``.  The daemon answers only to a
  loopback name (``localhost``, 127.0.0.0/8, ``[::1]``), its own listen address, an IP address
  (a name that is an address cannot be rebound), and the names in ``reef.allowed-hosts``
  (``*``: any, for a daemon behind a proxy that checks names itself), each with any port.  A
  request with no ``Host`` (HTTP/1.0 tools; browsers always send one) passes.
* **Origin**: a browser names the page behind every request it sends but a plain navigation or
  ``<img>`` (``Origin``; on every POST, even ``mode: "no-cors"``).  A request whose ``Origin``
  is not the daemon's own (the scheme, host and port it was reached on: reef's own pages) nor one
  of ``reef.allowed-origins`` is refused; ``Origin: null`` (sandboxed frames, ``file:`` pages,
  redirects) is always foreign.  SDKs, ``curl``, the launchers and hooks send no ``Origin`` and
  pass.

Both answer 403 (:class:`~reef_core.errors.ForeignRequest`, reef's usual error body naming the
setting that would allow the request); a 421 for a foreign Host would invite clients to retry
elsewhere, and the answer is the same either way: nothing was read or done.  What a navigation
or ``<img>`` can still send (a GET with no ``Origin``) changes nothing: no GET route writes.
The third guard, JSON routes taking only JSON content types (a page's no-cors POST can only send
``text/plain``, a form or no type), lives in :func:`reef_core.daemon.parsing.json_body`.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from aiohttp import web

from reef_core.errors import ConfigError, ForeignRequest
from reef_core.hosts import is_loopback

__all__ = ["browser_middleware", "origin_of"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_WILDCARDS = ("0.0.0.0", "::", "")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _split_host(value: str) -> tuple[str, int | None]:
    """``"Localhost:8900"`` → ``("localhost", 8900)``; ``"[::1]"`` → ``("::1", None)``.  A port
    that is not a number counts as none (the name alone then decides)."""
    value = value.strip().lower()
    port = ""
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        name, _, port = value.partition(":")
    else:
        name = value
    return name.rstrip("."), int(port) if port.isdigit() else None


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def origin_of(value: str) -> tuple[str, str, int] | None:
    """``scheme://host[:port]`` as (scheme, host, port), the port filled in for http(s); None
    for anything else (``null``, other schemes, paths)."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or parts.username or parts.password:
        return None
    return scheme, parts.hostname.lower().rstrip("."), port or _DEFAULT_PORTS[scheme]


def _allowed_origins(configured: Sequence[str]) -> frozenset[tuple[str, str, int]]:
    allowed = set()
    for value in configured:
        origin = origin_of(value)
        if origin is None:
            raise ConfigError(
                f"reef.allowed-origins: {value!r} is not an origin: write scheme://host[:port], "
                "such as http://localhost:3000",
                field="reef.allowed_origins",
            )
        allowed.add(origin)
    return frozenset(allowed)


def _allowed_hosts(configured: Sequence[str], listen: str) -> tuple[bool, frozenset[tuple[str, int | None]]]:
    """Whether any Host goes (``*``), and the (name, port or None for any) pairs allowed."""
    hosts = {_split_host(value) for value in configured if value.strip() != "*"}
    if listen.strip() not in _WILDCARDS:
        hosts.add((_split_host(listen)[0], None))
    return any(value.strip() == "*" for value in configured), frozenset(hosts)


def browser_middleware(
    listen_host: str, allowed_hosts: Sequence[str], allowed_origins: Sequence[str]
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The Host and Origin checks (see the module's docstring); a bad origin setting is a
    :class:`ConfigError` here, at start."""
    any_host, hosts = _allowed_hosts(allowed_hosts, listen_host)
    origins = _allowed_origins(allowed_origins)

    # a client sends the same Host on every request: the answer is kept per header value (3 us
    # of parsing an address, on every request of the proxy's path, becomes a dict look-up)
    @functools.lru_cache(maxsize=256)
    def host_allowed(header: str) -> bool:
        name, port = _split_host(header)
        if any_host or is_loopback(name) or _is_address(name.strip("[]")):
            return True
        return (name, None) in hosts or (name, port) in hosts

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host")
        if host is not None and not host_allowed(host):
            name = _split_host(host)[0]
            raise ForeignRequest(
                f"this reef does not answer to the name {name!r} (the request's Host): a web page can "
                "point a name of its own at this machine (DNS rebinding) and read the answers. To reach "
                "reef under that name on purpose, add it to reef.allowed-hosts "
                f"(--reef.allowed-hosts {name})",
                field="host",
            )
        origin = request.headers.get("Origin")
        if origin is not None:
            parsed = origin_of(origin)
            own = origin_of(f"{request.scheme}://{host}") if host else None
            if parsed is None:
                raise ForeignRequest(
                    f"refused a request from a web page with no origin of its own (Origin: {origin[:100]}: "
                    "a sandboxed frame, a local file or a redirect): a web page may not drive this reef, "
                    "and no setting allows such a page; clients that are not browsers send no Origin",
                    field="origin",
                )
            if parsed != own and parsed not in origins:
                shown = origin.strip()[:200]
                raise ForeignRequest(
                    f"refused a request from the web page at {shown} (the request's Origin): a page on "
                    "another site may not drive this reef. To let that page in on purpose, add it to "
                    f"reef.allowed-origins (--reef.allowed-origins {shown})",
                    field="origin",
                )
        return await handler(request)

    return check
