"""``reef clone URL [SCENARIO]``: a new node joins a scenario in one command.

Makes the scenario in this state directory from a git remote (``reef_core/store/clone.py``):
records of every node, the release chain and its tags, the newest release's checkpoint.  A
daemon on this state directory serves it right after, with no request needed first.  A name
taken here already is exit 2; a remote that cannot be read is exit 1; a remote that already has
this node's own data ref (another daemon writes it: give ``--node``) is exit 3.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

from reef_cli import output as out
from reef_cli.output import JsonOption
from reef_cli.state import StateDirOption, open_store
from reef_core.errors import InvalidInput
from reef_core.release.adoption import admit
from reef_core.store.clone import clone as clone_scenario
from reef_core.store.remotes import validate_url
from reef_core.store.sync import DEFAULT_TIMEOUT_S

__all__ = ["clone"]


def _name_of(url: str) -> str:
    """The scenario a URL names by default: its last path part without ``.git``."""
    tail = re.split(r"[/:]", url.rstrip("/"))[-1]
    return tail[: -len(".git")] if tail.endswith(".git") else tail


def clone(
    url: str = typer.Argument(
        ..., help="The remote: a path, ssh://…, user@host:path or https://… (no password)."
    ),
    scenario: str | None = typer.Argument(
        None, help="The scenario's name here (default: the URL's last part)."
    ),
    node: str | None = typer.Option(
        None,
        "--node",
        help="This machine's storage.node (needed when another daemon writes refs/heads/data).",
    ),
    remote: str = typer.Option("origin", "--remote", help="The remote's name in the new scenario."),
    trusted: bool = typer.Option(
        False,
        "--trusted",
        help="Serve the remote's releases without a person's approval here (code they add runs as you).",
    ),
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout", help="Seconds each git command may take."),
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Make a scenario here from a git remote: its records, releases, tags and checkpoints."""
    kept = validate_url(url)
    name = scenario or _name_of(kept)
    if not name:
        raise InvalidInput(f"cannot tell a scenario name from {url!r}: give one", field="scenario")
    store = open_store(state_dir)
    made = clone_scenario(
        store, kept, name, remote=remote, node=node, timeout=timeout, admit=admit, trusted=trusted
    )
    line = (
        f"{made.scenario}: cloned from {made.report.url}: {made.release or 'no release yet'}, "
        f"{made.records} records"
    )
    out.output.done(made.as_dict(), line, as_json=as_json)
    for warning in [] if as_json else made.report.warnings:  # --json: in the document's sync
        out.output.console.print(f"  warning: {warning}", highlight=False, markup=False)
