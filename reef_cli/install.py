"""``reef install``: install a scenario's harness for an adapter, from the running daemon.

The daemon renders the release and answers with a self-contained sh script (the same one
``curl …/reef/harness/install | sh`` runs); this command fetches it and runs it with ``sh``,
or prints it with ``--print`` so it can be read first.
"""

from __future__ import annotations

import subprocess

import typer

from reef_cli import output as out
from reef_cli.sources import UrlOption, connect
from reef_core.errors import InvalidInput

__all__ = ["install"]

ADAPTERS = ("pi", "claude_code", "codex", "opencode")


def install(
    scenario: str = typer.Argument(..., help="The scenario whose harness to install."),
    adapter: str = typer.Option("pi", "--adapter", help="The harness: pi, claude_code, codex or opencode."),
    release: str | None = typer.Option(None, "--release", help="A release such as v3 (default: current)."),
    print_only: bool = typer.Option(False, "--print", help="Print the install script instead of running it."),
    url: str = UrlOption,
) -> None:
    """Install (or update) the harness of SCENARIO for an adapter: reef-pi or reef-claude and its config."""
    if adapter not in ADAPTERS:
        raise InvalidInput(f"--adapter must be one of {', '.join(ADAPTERS)}", field="adapter")
    with connect(url, timeout=120) as client:
        script = client.installer(scenario, adapter, release)
    if print_only:
        out.output.console.file.write(script)
        return
    ran = subprocess.run(["sh", "-s"], input=script, text=True, check=False)
    if ran.returncode != 0:
        raise typer.Exit(1)
    with connect(url, timeout=120) as client:  # the GET noted nothing: this install counts now
        client.installed(scenario, adapter)
