"""The ``reef`` command: one typer app composed of one module per noun."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from reef_cli import (
    canary,
    clone,
    compare,
    evolve,
    exits,
    export,
    import_infra,
    install,
    learn,
    log,
    releases,
    remote,
    report,
    review,
    scenario,
    status,
    sync,
)
from reef_cli import output as out
from reef_cli.demo import demo
from reef_cli.serve import serve
from reef_core import __version__
from reef_core.errors import ReefError, Unauthorized

__all__ = [
    "app",
    "run",
]


class _ReefGroup(TyperGroup):
    """Turns reef's errors into one readable line and an exit code (a traceback with --debug)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ReefError as exc:
            if out.output.debug:
                raise
            message = exc.message
            if isinstance(exc, Unauthorized):
                message += " (reef sends $REEF_TOKEN as the bearer token)"
            out.output.error(message)
            raise typer.Exit(exits.exit_code(exc)) from None


app = typer.Typer(
    name="reef",
    cls=_ReefGroup,
    help="reef: an agent's inference server that keeps learning. Every exchange is a git commit.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        out.output.console.print(f"reef {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors, and where data came from."),
) -> None:
    """reef: record, learn, release."""
    out.output.debug = debug


app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(serve)
app.command("status")(status.status)
app.add_typer(scenario.app, name="scenario")
app.command("evolve")(evolve.evolve)
app.command("learn")(learn.learn)
app.command("releases")(releases.releases)
app.command("compare")(compare.compare_command)
app.command("promote")(releases.promote)
app.command("reject")(releases.reject)
app.command("rollback")(releases.rollback)
app.command("canary")(canary.canary)
app.command("review")(review.review)
app.command("install")(install.install)
app.command("report")(report.report)
app.command("log")(log.log)
app.command("export")(export.export)
app.command("import")(import_infra.import_)
app.add_typer(remote.app, name="remote")
app.command("sync")(sync.sync_command)
app.command("clone")(clone.clone)
app.command("demo")(demo)


def run() -> None:
    app(prog_name="reef")
