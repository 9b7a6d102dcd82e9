"""Wiring only: settings in, an aiohttp application out; and the process around it."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from aiohttp import web

from reef_core.config import Settings
from reef_core.daemon import inference, reef_routes
from reef_core.daemon.auth import auth_middleware
from reef_core.daemon.context import DAEMON, Daemon
from reef_core.daemon.errors import error_middleware
from reef_core.daemon.registry import OpenScenarios
from reef_core.daemon.reports import ReportDesk
from reef_core.store import Store, StoreOptions
from reef_core.upstream import UpstreamClient

__all__ = ["build_app", "serve"]

log = logging.getLogger("reef")


def build_app(settings: Settings) -> web.Application:
    storage = settings.storage
    store = Store(
        storage.state_dir,
        StoreOptions(max_batch=storage.max_batch, pack_every=storage.pack_every, fsync=storage.fsync),
    )
    daemon = Daemon(
        settings=settings,
        scenarios=OpenScenarios(store, implicit=settings.reef.implicit_scenarios),
        upstream=UpstreamClient(settings.inference.upstream_url, timeout_s=settings.inference.timeout_s),
        reports=ReportDesk(),
    )
    app = web.Application(
        client_max_size=settings.reef.max_body_bytes,
        middlewares=[error_middleware, auth_middleware(settings.reef.tokens)],
    )
    app[DAEMON] = daemon
    app.add_routes(inference.routes)
    app.add_routes(reef_routes.routes)

    async def shutdown(app: web.Application) -> None:
        await daemon.upstream.close()
        await daemon.scenarios.close()  # writes everything queued before the locks go

    app.on_cleanup.append(shutdown)
    return app


async def serve(settings: Settings, *, ready: Callable[[str], None] | None = None) -> None:
    """Run until SIGINT or SIGTERM, then drain: no acknowledged write is left behind."""
    app = build_app(settings)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.reef.host, settings.reef.port)
    await site.start()
    url = f"http://{settings.reef.host}:{settings.reef.port}"
    if ready is not None:
        ready(url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        await runner.cleanup()
