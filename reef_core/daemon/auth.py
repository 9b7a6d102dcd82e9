"""Bearer-token auth: when tokens are configured, every route but ``/healthz`` needs one.

Clients send ``Authorization: Bearer <token>``; Anthropic clients may send ``x-api-key``.
Tokens are compared in constant time against every configured token, and never logged.
HTML pages opened from a browser link carry a page key (``?key=``, an HMAC of the scenario
under a token) instead: it opens that scenario's pages and nothing else.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from reef_core.errors import Unauthorized
from reef_core.release.pages import page_key

__all__ = ["OPEN_PATHS", "auth_middleware"]

OPEN_PATHS = frozenset({"/healthz"})


def presented_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    key = request.headers.get("x-api-key")
    return key.strip() if key else None


def _matches(presented: str, tokens: Sequence[str]) -> bool:
    try:
        given = presented.encode()
    except UnicodeEncodeError:  # a header that was not UTF-8 (aiohttp keeps such bytes as surrogates)
        return False  # no token is: it matches none
    found = False
    for token in tokens:  # no early exit: the time taken does not depend on which one matched
        found |= hmac.compare_digest(given, token.encode())
    return found


def _page_key_opens(request: web.Request, tokens: Sequence[str]) -> bool:
    if request.method != "GET" or not request.path.startswith("/reef/harness/"):
        return False
    if not request.path.endswith("/page"):
        return False
    key, scenario = request.query.get("key"), request.query.get("scenario")
    if not key or not scenario or "x-reef-scenario" in request.headers:
        return False
    return _matches(key, [page_key(token, scenario) for token in tokens])


def auth_middleware(tokens: Sequence[str]) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def check(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        if tokens and request.path not in OPEN_PATHS and not _page_key_opens(request, tokens):
            presented = presented_token(request)
            if presented is None:
                raise Unauthorized("this reef requires a token: send Authorization: Bearer <token>")
            if not _matches(presented, tokens):
                raise Unauthorized("the token is not valid for this reef")
        return await handler(request)

    return check
