"""Wiring only: settings in, an aiohttp application out; and the process around it."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from reef_core.config import Settings
from reef_core.daemon import (
    canary_routes,
    harness_routes,
    inference,
    install_routes,
    records_routes,
    reef_routes,
    release_routes,
    syncing,
)
from reef_core.daemon.admission import admission_middleware
from reef_core.daemon.auth import auth_middleware
from reef_core.daemon.browsers import browser_middleware
from reef_core.daemon.context import DAEMON, Daemon
from reef_core.daemon.errors import error_middleware
from reef_core.daemon.learners import Learners
from reef_core.daemon.logs import context_middleware
from reef_core.daemon.metrics import METRICS, Metrics, metrics_middleware
from reef_core.daemon.metrics import routes as metrics_routes
from reef_core.daemon.model_calls import UpstreamModel
from reef_core.daemon.parsing import MAX_JSON_DEPTH
from reef_core.daemon.registry import LEARNER_QUIET_S, OpenScenarios
from reef_core.daemon.reports import KeyedDesk, ReportDesk
from reef_core.daemon.tracing import TRACING, Tracing, tracing_middleware
from reef_core.errors import ConfigError
from reef_core.hosts import is_loopback
from reef_core.learning import RecipeContext
from reef_core.learning.worker import StepOutcome
from reef_core.store import Scenario, Store, StoreOptions
from reef_core.upstream import UpstreamClient
from reef_core.upstream.choice import engine_loader

__all__ = [
    "OPEN_WARNING_EVERY_S",
    "announce",
    "build_app",
    "check_listening",
    "keep_private",
    "open_without_token",
    "serve",
    "warn_while_open",
]

log = logging.getLogger("reef")

#: seconds between the warnings of a daemon that listens beyond loopback with no token
OPEN_WARNING_EVERY_S = 3600.0


def open_without_token(settings: Settings) -> bool:
    """True when the daemon would listen beyond loopback (a wildcard counts) with no token."""
    return not settings.reef.tokens and not is_loopback(settings.reef.host)


def check_listening(settings: Settings) -> None:
    """Refuse to listen beyond loopback with no token, unless told so on purpose.

    Anyone who reaches such a port reads every record, publishes, rolls back and promotes
    extension code that every installed harness then runs.
    """
    if open_without_token(settings) and not settings.reef.allow_unauthenticated:
        raise ConfigError(
            f"refusing to listen on {settings.reef.host} with no token: anyone who can reach it could "
            "read every recorded exchange and publish releases that installed harnesses run. Set "
            "REEF_TOKEN, listen on loopback (--reef.host 127.0.0.1), or pass "
            "--reef.allow-unauthenticated to run it open on purpose",
            field="reef.host",
        )


async def warn_while_open(host: str, port: int, *, every: float | None = None) -> None:
    """Log that the daemon is open to anyone, now and every ``every`` seconds, until cancelled."""
    every = OPEN_WARNING_EVERY_S if every is None else every
    while True:
        log.warning(
            "listening on %s:%d with no token (--reef.allow-unauthenticated): anyone who can reach "
            "this port can read every record and publish releases; set REEF_TOKEN to require one",
            host,
            port,
        )
        await asyncio.sleep(every)


def keep_private(state_dir: Path) -> None:
    """The state directory is its user's alone (0700): it holds every recorded prompt and
    answer, and another user of this machine must not read them.  Made so if it does not
    exist; one that others can enter is closed, and the log says so."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = state_dir.stat().st_mode & 0o777
    if mode & 0o077:
        os.chmod(state_dir, mode & 0o700)
        log.warning("%s was open to other users (mode %o): made it private", state_dir, mode)


def build_app(settings: Settings) -> web.Application:
    if settings.reef.max_json_depth < 1:
        raise ConfigError(
            f"reef.max-json-depth must be at least 1, got {settings.reef.max_json_depth}",
            field="reef.max_json_depth",
        )
    storage = settings.storage
    keep_private(storage.state_dir)
    for setting, value in (
        ("storage.max_scenarios", storage.max_scenarios),
        ("inference.max_answer_bytes", settings.inference.max_answer_bytes),
        ("reef.header_timeout_s", settings.reef.header_timeout_s),
    ):
        if value <= 0:
            raise ConfigError(f"{setting.replace('_', '-')} must be positive, got {value}", field=setting)
    if storage.max_open_scenarios < 1 or storage.idle_close_s < 0:
        raise ConfigError(
            "storage.max-open-scenarios must be at least 1 and storage.idle-close-s at least 0 "
            f"(got {storage.max_open_scenarios} and {storage.idle_close_s})",
            field="storage.max_open_scenarios" if storage.max_open_scenarios < 1 else "storage.idle_close_s",
        )
    tracing = Tracing(settings.ops.otlp_endpoint)  # a ConfigError here when the SDK is missing
    metrics = Metrics(
        enabled=settings.ops.metrics,
        scenario_label=settings.ops.metrics_scenario_label,
        gauges=lambda: {
            "reef_open_scenarios": float(len(daemon.scenarios.open_names)),
            "reef_disk_full": 1.0 if daemon.scenarios.store.space.full else 0.0,
            "reef_sync_lag_seconds": syncer.lag(),
            "reef_writer_queue_depth": float(sum(s.queued for s in daemon.scenarios.open_scenarios())),
        },
    )
    store = Store(
        storage.state_dir,
        StoreOptions(
            max_batch=storage.max_batch,
            pack_every=storage.pack_every,
            fsync=storage.fsync,
            node=storage.node,
            max_scenarios=storage.max_scenarios,
            on_batch=metrics.batched,
            on_repacked=metrics.repacked,
        ),
    )
    cache_dir = settings.inference.model_cache or storage.state_dir / "models"
    context = RecipeContext(
        cache_dir=Path(cache_dir),
        config=dict(settings.recipe.config),
        log=log.info,
        served_model=settings.inference.upstream_model or "default",
        token=settings.reef.tokens[0] if settings.reef.tokens else None,
        proposer_sandbox=settings.recipe.proposer_sandbox,
    )
    learners = Learners.from_settings(settings.recipe.name, settings.recipe.implementation, context)
    # a recipe's model calls go to what serves: the upstream, or the model served in-process
    if learners.recipe.needs_model_endpoint and not (
        settings.inference.upstream_url or settings.inference.model_path
    ):
        raise ConfigError(
            f"the {learners.recipe.name} recipe needs a model: set --inference.upstream-url "
            "(and --inference.upstream-model) or REEF_UPSTREAM_URL, or serve one with --inference.model-path",
            field="inference.upstream_url",
        )
    daemon = Daemon(
        settings=settings,
        scenarios=OpenScenarios(
            store,
            implicit=settings.reef.implicit_scenarios,
            on_open=learners.attach,
            on_close=learners.detach,
            can_close=lambda name: learners.can_detach(name, LEARNER_QUIET_S),
            max_open=storage.max_open_scenarios,
            idle_close_s=storage.idle_close_s,
        ),
        upstream=UpstreamClient(
            settings.inference.upstream_url,
            timeout_s=settings.inference.timeout_s,
            max_answer_bytes=settings.inference.max_answer_bytes,
        ),
        reports=ReportDesk(),
        asks=KeyedDesk("ask"),
        records=KeyedDesk("record"),
        learners=learners,
        upstream_format=settings.inference.upstream_api,
    )
    app = web.Application(
        client_max_size=settings.reef.max_body_bytes,
        middlewares=[
            *([metrics_middleware(metrics)] if settings.ops.metrics else []),  # outermost: it
            # counts the status the error table gave; the log context is there for its lines too
            *([tracing_middleware(tracing)] if tracing.on else []),
            context_middleware(access_lines=settings.ops.log_format == "json"),
            error_middleware,
            # before auth, token or not: a web page's request is refused whatever it carries
            browser_middleware(
                settings.reef.host, settings.reef.allowed_hosts, settings.reef.allowed_origins
            ),
            auth_middleware(settings.reef.tokens),
            admission_middleware(daemon.scenarios),  # near the file limit: wait, then 503
        ],
    )
    app[DAEMON] = daemon
    app[METRICS] = metrics
    app[TRACING] = tracing
    syncer = app[syncing.SYNCING] = syncing.Syncing(daemon, on_report=lambda r: metrics.synced(r.outcome))

    def stepped(name: str, outcome: StepOutcome) -> None:
        metrics.stepped(outcome.verdict, outcome.seconds)
        tracing.step(name, outcome)

    learners.on_outcome = stepped

    def on_open(scenario: Scenario) -> None:
        learners.attach(scenario)
        syncer.attach(scenario)

    daemon.scenarios.on_open = on_open
    app[MAX_JSON_DEPTH] = settings.reef.max_json_depth
    app[install_routes.NOTED] = set()
    app.add_routes(inference.routes)
    app.add_routes(reef_routes.routes)
    app.add_routes(records_routes.routes)
    app.add_routes(release_routes.routes)
    app.add_routes(harness_routes.routes)
    app.add_routes(canary_routes.routes)
    app.add_routes(install_routes.routes)
    app.add_routes(syncing.routes)
    if settings.ops.metrics:
        app.add_routes(metrics_routes)

    load_engine = engine_loader(settings, Path(cache_dir))  # None: the HTTP upstream answers

    async def start_local_model(app: web.Application) -> None:
        engine = await asyncio.to_thread(load_engine) if load_engine is not None else None
        if engine is not None:
            daemon.upstream = daemon.engine = context.engine = engine
            daemon.upstream_format = "openai"

    async def lend_model(app: web.Application) -> None:
        context.model = UpstreamModel(daemon, asyncio.get_running_loop())

    async def sweep_idle_scenarios(app: web.Application) -> None:
        daemon.scenarios.start_sweeping()
        syncer.start()

    async def shutdown(app: web.Application) -> None:
        await syncer.stop()
        await asyncio.to_thread(learners.stop)
        await daemon.upstream.close()
        await daemon.scenarios.close()  # writes everything queued before the locks go
        await asyncio.to_thread(tracing.shutdown)  # the spans still queued go out

    if load_engine is not None:
        app.on_startup.append(start_local_model)
    app.on_startup.append(lend_model)
    app.on_startup.append(sweep_idle_scenarios)
    app.on_cleanup.append(shutdown)
    return app


def announce(app: web.Application, url: str) -> None:
    """Tell the recipes where harnesses reach this daemon (known once it listens)."""
    app[DAEMON].learners.context.daemon_url = url


def settle_heap() -> None:
    """Tune the cyclic garbage collector for a long-running daemon, once started.

    What exists at startup (modules, the app) lives as long as the process,
    so it is moved out of the collector's sight (``gc.freeze``); and the youngest generation
    is collected every 10,000 allocations instead of 700, since a request's garbage (parsed
    JSON, events) is freed by reference counting, not by the collector.  Measured with
    ``bench/proxy.py``'s load at concurrency 64 (streams): the daemon's CPU per request fell
    by about 7%, most of it from the threshold.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


async def serve(settings: Settings, *, ready: Callable[[str], None] | None = None) -> None:
    """Run until SIGINT or SIGTERM, then drain: no acknowledged write is left behind.

    Refuses (:func:`check_listening`) before it listens or opens anything.
    """
    check_listening(settings)
    app = build_app(settings)
    # aiohttp's keep-alive timer runs from a connection's opening (and from the end of each
    # answer) until a request's head is complete, and closes the connection then: it is the
    # header-read timeout (a client that dribbles a head never holds a connection for long)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=settings.reef.header_timeout_s)
    await runner.setup()
    site = web.TCPSite(runner, settings.reef.host, settings.reef.port)
    await site.start()
    settle_heap()
    url = f"http://{settings.reef.host}:{settings.reef.port}"
    wildcard = settings.reef.host in ("0.0.0.0", "::", "")
    announce(app, f"http://127.0.0.1:{settings.reef.port}" if wildcard else url)
    if ready is not None:
        ready(url)
    warner = None
    if open_without_token(settings):
        warner = asyncio.create_task(warn_while_open(settings.reef.host, settings.reef.port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        if warner is not None:
            warner.cancel()
        await runner.cleanup()
