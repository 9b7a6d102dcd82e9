"""All CLI output goes through one :class:`Output`, which tests can point at a buffer."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

__all__ = [
    "Output",
    "output",
]


@dataclass
class Output:
    console: Console = field(default_factory=lambda: Console(soft_wrap=True))
    errors: Console = field(default_factory=lambda: Console(stderr=True))

    def json(self, value: Any) -> None:
        self.console.file.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")

    def error(self, message: str) -> None:
        self.errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)


output = Output()


def use(new: Output) -> Output:
    """Swap the process-wide output (tests); returns the old one."""
    global output
    old, output = output, new
    return old


def is_tty() -> bool:
    return sys.stdout.isatty()
