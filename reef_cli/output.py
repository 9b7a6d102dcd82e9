"""All CLI output goes through one :class:`Output`, which tests can point at a buffer."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

__all__ = [
    "JsonOption",
    "Output",
    "output",
    "when",
]

JsonOption = typer.Option(False, "--json", help="Machine-readable output.")


@dataclass
class Output:
    console: Console = field(default_factory=lambda: Console(soft_wrap=True))
    errors: Console = field(default_factory=lambda: Console(stderr=True))
    debug: bool = False  # --debug: tracebacks, and notes such as which source answered

    def json(self, value: Any) -> None:
        self.console.file.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")

    def jsonl(self, value: Any) -> None:
        self.console.file.write(json.dumps(value, ensure_ascii=False, default=str) + "\n")

    def done(self, result: Any, line: str, *, as_json: bool) -> None:
        """What a command that did one thing prints: its result as JSON, or one line for a person."""
        if as_json:
            self.json(result)
        else:
            self.console.print(line, highlight=False)

    def error(self, message: str) -> None:
        self.errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)

    def note(self, message: str) -> None:
        """A line for --debug only (on stderr, so it never mixes with --json output)."""
        if self.debug:
            self.errors.print(f"[dim]debug: {escape(message)}[/]", highlight=False, soft_wrap=True)


output = Output()


def use(new: Output) -> Output:
    """Swap the process-wide output (tests); returns the old one."""
    global output
    old, output = output, new
    return old


def when(epoch: int | float | None) -> str:
    """A moment in local time, as a person reads it in a table."""
    if not epoch:
        return "-"
    moment = time.localtime(epoch)
    if moment.tm_year == time.localtime().tm_year:
        return time.strftime("%b %d %H:%M", moment)  # this year's: short enough for 80 columns
    return time.strftime("%Y-%m-%d %H:%M", moment)


def is_tty() -> bool:
    return sys.stdout.isatty()
