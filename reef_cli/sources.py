"""Where a command's data comes from: the daemon at ``--url``, or the scenario repositories.

Commands that change something talk to the daemon (:func:`connect`).  Read commands ask
:func:`open_source` for a :class:`Source`: the daemon when one answers at the URL, else the
repositories under ``--state-dir`` opened read-only (a reader takes no lock, so this is safe
beside anything).  Both sources return the daemon's JSON shapes, so a command renders one
shape whichever answered; ``--debug`` says which did.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import typer

from reef_cli import output as out
from reef_cli.state import open_store
from reef_core import __version__
from reef_core.client import DEFAULT_URL, DaemonUnavailable, ReefClient
from reef_core.errors import NotFound
from reef_core.release.listing import release_listing, scenario_summary
from reef_core.sessions import page_sessions
from reef_core.store import ScenarioReader, Store

__all__ = [
    "CandidateArgument",
    "DaemonSource",
    "RepositorySource",
    "ScenarioArgument",
    "Source",
    "UrlOption",
    "connect",
    "open_source",
]

ScenarioArgument = typer.Argument(..., help="The scenario.")
CandidateArgument = typer.Argument(..., help="The pending candidate, e.g. c5.")
UrlOption = typer.Option(
    DEFAULT_URL,
    "--url",
    envvar="REEF_URL",
    help="The reef daemon to talk to ($REEF_URL); its token is read from $REEF_TOKEN.",
)


def connect(url: str, *, timeout: float = 30.0) -> ReefClient:
    """A client for the daemon at ``url``, with ``$REEF_TOKEN`` when it is set."""
    return ReefClient(url, os.environ.get("REEF_TOKEN") or None, timeout=timeout)


class Source(Protocol):
    """What read commands need, in the daemon's JSON shapes."""

    description: str
    live: bool  # a daemon answered (learning state and recipe are known)

    def scenarios(self) -> list[dict[str, Any]]: ...

    def scenario(self, name: str) -> dict[str, Any]: ...

    def releases(self, name: str) -> dict[str, Any]: ...

    def status(self) -> dict[str, Any]: ...

    def items(
        self, name: str, kinds: Iterable[str] | None, *, after: str | None = None
    ) -> Iterator[dict[str, Any]]: ...

    def sessions(self, name: str, *, after: str | None = None, limit: int = 50) -> dict[str, Any]:
        """One page: ``{"sessions": [...], "next": id or None}`` (the daemon's sessions route)."""
        ...


def open_source(url: str, state_dir: Path | None) -> Source:
    """The daemon if one answers at ``url``, else the repositories under ``state_dir``."""
    client = connect(url)
    try:
        client.health()
    except DaemonUnavailable as exc:
        client.close()
        source: Source = RepositorySource(open_store(state_dir), reason=exc.message)
    else:
        source = DaemonSource(client)
    out.output.note(f"source: {source.description}")
    return source


class RepositorySource:
    """The state directory read directly, as the daemon would read it."""

    live = False

    def __init__(self, store: Store, *, reason: str = "") -> None:
        self.store = store
        self.description = f"the repositories in {store.state_dir}" + (f" ({reason})" if reason else "")
        self._readers: dict[str, ScenarioReader] = {}

    def reader(self, name: str) -> ScenarioReader:
        """One reader per scenario, kept (``log --follow`` reads again every second)."""
        if name not in self._readers:
            self._readers[name] = self.store.reader(name)
        return self._readers[name]

    def scenarios(self) -> list[dict[str, Any]]:
        return [self.scenario(name) for name in self.store.names()]

    def scenario(self, name: str) -> dict[str, Any]:
        reader = self.reader(name)
        return {**scenario_summary(reader), "path": str(reader.path), "learning": None}

    def releases(self, name: str) -> dict[str, Any]:
        return release_listing(self.reader(name))

    def status(self) -> dict[str, Any]:
        return {
            "version": __version__,
            "recipe": None,
            "upstream": None,
            "state_dir": str(self.store.state_dir),
            "auth": None,
            "scenarios": [{**row, "learning": None} for row in self.scenarios()],
        }

    def items(
        self, name: str, kinds: Iterable[str] | None, *, after: str | None = None
    ) -> Iterator[dict[str, Any]]:
        for item in self.reader(name).data.iter_items(list(kinds) if kinds else None, after=after):
            yield item.data

    def sessions(self, name: str, *, after: str | None = None, limit: int = 50) -> dict[str, Any]:
        items = self.reader(name).data.iter_items(["record", "report"], after=after)
        sessions, next_cursor = page_sessions(items, limit)
        return {"sessions": [s.to_json() for s in sessions], "next": next_cursor}


class DaemonSource:
    """A running daemon, through its HTTP routes."""

    live = True

    def __init__(self, client: ReefClient) -> None:
        self.client = client
        self.description = f"the daemon at {client.url}"

    def scenarios(self) -> list[dict[str, Any]]:
        state = self.status()
        root = Path(state["state_dir"]) / "scenarios"
        return [{**row, "path": str(root / f"{row['name']}.git")} for row in state["scenarios"]]

    def scenario(self, name: str) -> dict[str, Any]:
        for row in self.scenarios():
            if row["name"] == name:
                return row
        raise NotFound(f"no scenario {name!r} at {self.client.url}", field="scenario")

    def releases(self, name: str) -> dict[str, Any]:
        return self.client.releases(name)

    def status(self) -> dict[str, Any]:
        return self.client.status()

    def items(
        self, name: str, kinds: Iterable[str] | None, *, after: str | None = None
    ) -> Iterator[dict[str, Any]]:
        yield from self.client.iter_items(name, list(kinds) if kinds else None, after=after)

    def sessions(self, name: str, *, after: str | None = None, limit: int = 50) -> dict[str, Any]:
        return self.client.sessions(name, after=after, limit=limit)
