"""The right-hand side: the ask, the design, how it does in use, the check verdicts and the diff,
file by file.

The app sets :attr:`DetailPane.detail`; the pane rebuilds its sections from it.  Everything a
step wrote (an ask, a design, a check's detail) is shown as plain text, never read as markup.
Each file's diff is highlighted as a unified diff, the way ``git diff`` colours it.  A scenario
and its canary show ``reef canary S status``'s lines (:mod:`reef_cli.tui.canary`), read as the
markup they are: what a step wrote is escaped in them.
"""

from __future__ import annotations

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from reef_cli.tui.model import Detail
from reef_cli.tui.tree import badge

__all__ = ["DetailPane"]

_SYNTAX_THEME = "ansi_dark"  # the terminal's own colours: readable on any theme
_MAX_DIFF_LINES = 400  # per file: a generated file must not stall the pane


def _heading(text: str) -> Static:
    return Static(text, classes="heading", markup=False)


def _plain(text: str, classes: str = "") -> Static:
    return Static(Text(text), classes=classes)


def _title(detail: Detail) -> Text:
    selection = detail.selection
    title = Text(f"{selection.scenario} · {selection.name}" if selection.name else selection.scenario)
    title.stylize("bold")
    if detail.state:
        title.append("  ")
        title.append_text(badge(detail.state))
    return title


def _lineage(detail: Detail) -> str:
    parts = [f"built on {detail.base}" if detail.base else "built on an empty harness"]
    if detail.became:
        parts.append(f"published as {detail.became}")
    if detail.approval:
        parts.append(detail.approval)  # the verdict was "pending" (a step) or "approved" (its release)
    elif detail.verdict:
        parts.append(f"verdict: {detail.verdict}")
    return " · ".join(parts)


def _checks(detail: Detail) -> Text:
    text = Text()
    for n, check in enumerate(detail.checks):
        if n:
            text.append("\n")
        text.append("✓ " if check.passed else "✗ ", style="bold green" if check.passed else "bold red")
        text.append(check.name, style="bold")
        if check.detail:
            text.append(f"  {check.detail}")
    return text


class DetailPane(VerticalScroll):
    """Scrolls; focus it (tab, or a click) to scroll a long diff with the keys."""

    detail: reactive[Detail | None] = reactive(None, recompose=True)
    placeholder: reactive[str] = reactive("Choose a scenario, a candidate or a release.", recompose=True)

    def compose(self) -> ComposeResult:
        detail = self.detail
        if detail is None:
            yield _plain(self.placeholder, "placeholder")
            return
        yield Static(_title(detail), classes="title")
        if detail.summary or detail.canary:  # a scenario, or its canary
            if detail.summary:
                yield _plain(detail.summary)
            if detail.canary:  # reef canary S status's lines: markup made there, text escaped
                yield _heading("Canary")
                yield Static(Text.from_markup("\n".join(detail.canary)), classes="canary")
            if detail.note:
                yield _plain(detail.note, "note")
            return
        yield _plain(_lineage(detail), "lineage")
        if detail.note:
            yield _plain(detail.note, "note")
        yield _heading("Ask")
        yield _plain(detail.ask or "(no ask: this step learned from records)")
        yield _heading("Design")
        yield _plain(detail.design or "(the proposer gave no design)")
        if detail.self_review:
            yield _plain(f"self-review: {detail.self_review}", "review")
        if detail.in_use:
            yield _heading("In use")
            yield _plain("\n".join(detail.in_use), "in-use")
        yield _heading("Checks")
        yield Static(_checks(detail)) if detail.checks else _plain("(no checks ran)")
        if detail.held:
            yield _heading("Waiting for a person")
            for line in detail.held:
                yield _plain(line, "note")
        if detail.replay:
            yield _heading(f"Replay on held-out sessions ({len(detail.replay)})")
            for line in detail.replay:
                yield _plain(line)
        changed = len(detail.diffs)
        yield _heading(f"Changes ({changed} file{'s' if changed != 1 else ''})")
        if not detail.diffs:
            yield _plain("(no files changed)")
        for diff in detail.diffs:
            yield _plain(f"{diff.path}  {diff.status} +{diff.added} −{diff.removed}", "file")
            body = "\n".join(diff.lines[:_MAX_DIFF_LINES])
            yield Static(Syntax(body, "diff", theme=_SYNTAX_THEME, word_wrap=True), classes="diff")
            if len(diff.lines) > _MAX_DIFF_LINES:
                more = len(diff.lines) - _MAX_DIFF_LINES
                yield _plain(f"… {more} more lines: open the page (o) to see them all", "lineage")
