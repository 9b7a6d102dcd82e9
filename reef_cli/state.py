"""Options shared by commands that open the state directory directly."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from reef_core.store import Store

__all__ = [
    "StateDirOption",
    "open_store",
]

StateDirOption = typer.Option(
    None,
    "--state-dir",
    help="State directory holding scenarios/ (default: $REEF_STATE_DIR or ./.reef).",
    show_default=False,
)


def open_store(state_dir: Path | None) -> Store:
    chosen = state_dir or Path(os.environ.get("REEF_STATE_DIR") or ".reef")
    return Store(chosen.expanduser().resolve())
