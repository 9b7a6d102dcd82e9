"""``reef review [SCENARIO]``: candidates and releases in a terminal UI, to approve, reject, roll back.

The TUI always reads the scenario repositories themselves (the daemon's state directory when
one answers at ``--url``, else ``--state-dir``): the design, the checks and the trees to diff
are there and nowhere else.  Operations go through the daemon, or are refused with a word
on starting it (see :mod:`reef_cli.tui.operator`).
"""

from __future__ import annotations

import os
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from reef_cli import output as out
from reef_cli.sources import UrlOption, connect
from reef_cli.state import StateDirOption, open_store
from reef_core.client import DaemonUnavailable, approver
from reef_core.errors import NotFound, ReefError
from reef_core.store import Store

if TYPE_CHECKING:
    from reef_cli.tui import ReviewApp

__all__ = ["make_app", "review"]


def make_app(
    scenario: str | None,
    *,
    url: str,
    state_dir: Path | None,
    watch: bool = True,
    browser: Callable[[str], Any] = webbrowser.open,
) -> ReviewApp:
    """The app for ``reef review``: which repositories to read and who carries out operations."""
    from reef_cli.tui import ReviewApp  # textual loads only for the command that needs it
    from reef_cli.tui.model import ReviewData
    from reef_cli.tui.operator import DaemonOperator, Operator, ReadOnly

    token = os.environ.get("REEF_TOKEN") or None
    client = connect(url)
    operator: Operator
    try:
        client.health()
    except DaemonUnavailable as exc:
        client.close()
        store = open_store(state_dir)
        if not store.state_dir.is_dir():
            raise NotFound(
                f"no reef state in {store.state_dir} and {exc.message}: start the daemon (reef serve) "
                "or name the state directory with --state-dir",
                field="state_dir",
            ) from None
        operator = ReadOnly(client.url)
        out.output.note(f"source: the repositories in {store.state_dir} ({exc.message})")
    else:
        store = Store(Path(client.status()["state_dir"]))
        if not store.state_dir.is_dir():
            client.close()
            raise ReefError(
                f"the daemon at {client.url} keeps its repositories in {store.state_dir}, which is not "
                "on this machine; reef review reads them there"
            )
        operator = DaemonOperator(client, approver=approver("reef review"))
        out.output.note(f"source: the daemon at {client.url}, repositories in {store.state_dir}")
    if scenario is not None:
        store.reader(scenario)  # NotFound, naming the state directory, before any screen is drawn
    data = ReviewData(store, only=scenario, tokens=[token] if token else [])
    return ReviewApp(data, operator, watch=watch, browser=browser)


def review(
    scenario: str | None = typer.Argument(None, help="Show only this scenario (default: every one)."),
    url: str = UrlOption,
    state_dir: Path | None = StateDirOption,
) -> None:
    """Review candidates and releases: the ask, the design, the checks, the diff; approve (a),
    reject (x), roll back (b), open the release page (o), stop (s) or promote (p) a running canary.
    Refreshes as the repositories change."""
    make_app(scenario, url=url, state_dir=state_dir).run()  # the app closes its client on the way out
