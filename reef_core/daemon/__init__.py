"""The daemon: an aiohttp app that proxies inference and records every exchange.

Owns: HTTP routes, auth, the error → status table, streaming relay, recording exchanges.
Does not own: formats (``wire``), the upstream connection (``upstream``), storage (``store``).
May import: aiohttp and everything in ``reef_core``; nothing imports it but entry points.
"""

from reef_core.daemon.app import build_app, serve

__all__ = ["build_app", "serve"]
