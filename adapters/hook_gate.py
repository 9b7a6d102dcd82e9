"""The fast path of reef's ``UserPromptSubmit`` hook: most prompts are not reef's commands.

Claude Code and Codex run the hook on every prompt a person types, so a plain prompt must cost as
little as the interpreter's start: the installed ``reef-claude`` (and ``reef-codex``) calls
:func:`early` before it imports anything else (reef's client and HTTP library take about 150 ms
to import), and a prompt that is not ``evolve``, ``versions``, ``feedback``, ``good`` or ``bad``
after ``/`` or ``:`` ends here, with no output (the harness goes on with the prompt).  Standard
library only.
"""

from __future__ import annotations

import json
import re
import sys

__all__ = ["COMMAND", "early", "pending_event"]

COMMAND = re.compile(r"^\s*[/:](evolve|versions|feedback|good|bad)(?:\s+(.*))?$", re.DOTALL)
_read: list[str] = []  # stdin, once read here, for the hook that answers


def early(args: list[str]) -> None:
    """``reef-X hook prompt`` with a prompt reef does not answer: exit 0 now."""
    if args[:2] != ["hook", "prompt"]:
        return
    text = sys.stdin.read()
    _read.append(text)
    try:
        prompt = json.loads(text or "{}").get("prompt")
    except (ValueError, AttributeError):
        return  # the hook itself says nothing either; let it decide
    if not isinstance(prompt, str) or not COMMAND.match(prompt):
        sys.exit(0)


def pending_event() -> str | None:
    """What :func:`early` read from stdin, if it did."""
    return _read[0] if _read else None
