"""Bearer-token auth: when tokens are configured, every route but ``/healthz`` needs one.

Clients send ``Authorization: Bearer <token>``; Anthropic clients may send ``x-api-key``.
Tokens are compared in constant time against every configured token, and never logged.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from reef_core.errors import Unauthorized

__all__ = ["OPEN_PATHS", "auth_middleware"]

OPEN_PATHS = frozenset({"/healthz"})


def presented_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    key = request.headers.get("x-api-key")
    return key.strip() if key else None


def _matches(presented: str, tokens: Sequence[str]) -> bool:
    given = presented.encode()
    found = False
    for token in tokens:  # no early exit: the time taken does not depend on which one matched
        found |= hmac.compare_digest(given, token.encode())
    return found


def auth_middleware(tokens: Sequence[str]) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def check(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        if tokens and request.path not in OPEN_PATHS:
            presented = presented_token(request)
            if presented is None:
                raise Unauthorized("this reef requires a token: send Authorization: Bearer <token>")
            if not _matches(presented, tokens):
                raise Unauthorized("the token is not valid for this reef")
        return await handler(request)

    return check
