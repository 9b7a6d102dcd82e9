"""``reef serve``: the daemon, configured from file, environment and dotted flags."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from reef_cli import output as out
from reef_core import __version__, daemon, memory
from reef_core.config import load_settings
from reef_core.daemon import logs
from reef_core.daemon.app import check_listening, keep_private
from reef_core.errors import ReefError

__all__ = ["serve"]


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop when it is installed (faster sockets and loop), else on asyncio's own."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def serve(
    ctx: typer.Context,
    config: Path | None = typer.Option(None, "-c", "--config", help="A reef.toml file."),
    print_config: bool = typer.Option(
        False, "--print-config", help="Print every resolved setting and its source, then exit."
    ),
    as_json: bool = typer.Option(False, "--json", help="With --print-config: JSON output."),
    log_format: str | None = typer.Option(
        None, "--log-format", help="text (the default) or json: one object a line (ops.log-format)."
    ),
) -> None:
    """Run the reef daemon.

    Any setting can be given as a dotted flag: --reef.port 8901, --inference.upstream-url URL,
    --recipe reefine, --recipe.config.<field> VALUE, --storage.state-dir DIR.
    """
    # first, while this is the process's only thread: every thread started from here on (the
    # model's decoding, the learners, the event loop's executors) shares two malloc arenas
    memory.cap_arenas()
    overrides = list(ctx.args) + (["--ops.log-format", log_format] if log_format is not None else [])
    settings = load_settings(file=config, overrides=overrides)
    if print_config:
        rows = settings.describe()
        if as_json:
            out.output.json([{"key": k, "value": v, "source": s} for k, v, s in rows])
            return
        table = Table(box=None, pad_edge=False)
        table.add_column("setting", style="bold")
        table.add_column("value")
        table.add_column("source", style="dim")
        for key, value, source in rows:
            table.add_row(key, value, source)
        out.output.console.print(table)
        return
    check_listening(settings)  # before anything is created: a refusal changes nothing
    logs.configure(settings.ops.log_format)
    keep_private(settings.storage.state_dir)  # 0700, and one open to others closed (logged)

    def ready(url: str) -> None:
        upstream = settings.inference.upstream_url or "none configured"
        auth = "token required" if settings.reef.tokens else "off"
        line = (
            f"reef {__version__} serving on {url}  auth: {auth}  upstream: {upstream}  "
            f"state: {settings.storage.state_dir}"
        )
        if settings.ops.log_format == "json":  # every line a JSON object, this one too
            logging.getLogger("reef").info(line)
        else:
            out.output.errors.print(line, highlight=False, soft_wrap=True)

    try:
        _run(daemon.serve(settings, ready=ready))
    except OSError as exc:  # the port is taken, the host is not ours
        raise ReefError(
            f"cannot listen on {settings.reef.host}:{settings.reef.port}: {exc.strerror}"
        ) from exc
