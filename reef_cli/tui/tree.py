"""The left-hand side: scenarios, their canary, candidates and releases, with verdict badges.

Attributes down, messages up: the app sets :attr:`ScenarioTree.views`; the tree posts
:class:`ScenarioTree.Chosen` when the cursor lands on something.  A refresh rebuilds the tree
but keeps the cursor on the same item and leaves collapsed nodes collapsed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from reef_cli.tui.canary import is_running
from reef_cli.tui.model import ReleaseRow, ScenarioView, Selection, StepRow

__all__ = ["ScenarioTree", "badge"]

_ASK_WIDTH = 24

_BADGES = {
    "pending": ("● pending", "bold yellow"),
    "selected": ("✓ selected", "green"),
    "rejected": ("✗ rejected", "red"),
    "rejected by a person": ("✗ turned down", "red"),
    "skipped": ("– skipped", "dim"),
    "current": ("● serving", "bold green"),
    "published": ("", ""),
    # a canary (its row) and the candidate that is or was one (reef_core.learning.canary.ENDED)
    "canary": ("◐ canary", "bold magenta"),
    "running": ("◐ running", "bold magenta"),
    "promoted": ("✓ promoted", "green"),
    "retired": ("✗ retired", "red"),
    "expired": ("– expired", "dim"),
    "stopped": ("■ stopped", "yellow"),
    "superseded": ("– superseded", "dim"),
}


def badge(state: str) -> Text:
    """A state as the short coloured word the tree and the detail pane show."""
    text, style = _BADGES.get(state, (state, ""))
    return Text(text, style=style)


def _short(text: str | None) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= _ASK_WIDTH else flat[: _ASK_WIDTH - 1] + "…"


def _scenario_label(view: ScenarioView) -> Text:
    label = Text(view.name, style="bold")
    current = view.current
    label.append(f"  {current.name}" if current else "  no release", style="green" if current else "dim")
    if view.pending:
        label.append(f"  {len(view.pending)} pending", style="yellow")
    if is_running(view.canary):
        label.append(f"  canary {view.canary['name']}", style="magenta")
    return label


def _canary_label(state: Mapping[str, Any]) -> Text:
    label = Text(f"canary {state.get('name')} vs {state.get('base')}  ", style="italic")
    label.append_text(badge(str(state.get("state"))))
    if state.get("release"):
        label.append(f" → {state['release']}", style="green")
    return label


def _step_label(step: StepRow) -> Text:
    label = Text(f"{step.name:<4} ")
    label.append_text(badge(step.state))
    if step.release:
        label.append(f" → {step.release}", style="green")
    if step.ask:
        label.append(f"  {_short(step.ask)}", style="dim")
    return label


def _release_label(release: ReleaseRow) -> Text:
    label = Text("● " if release.current else "  ", style="bold green")
    label.append(f"{release.name:<4} ", style="bold" if release.current else "")
    label.append(release.operation, style="cyan")
    if release.ask:
        label.append(f"  {_short(release.ask)}", style="dim")
    return label


class ScenarioTree(Tree[Selection]):
    """Scenarios → their canary (running, or the last), candidates (newest first) and releases
    (newest first)."""

    views: reactive[tuple[ScenarioView, ...] | None] = reactive(None)

    class Chosen(Message):
        """The cursor landed on ``selection``."""

        def __init__(self, selection: Selection) -> None:
            self.selection = selection
            super().__init__()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("scenarios", id=id)
        self.show_root = False
        self.guide_depth = 3

    def iter_nodes(self, node: TreeNode[Selection] | None = None) -> Iterator[TreeNode[Selection]]:
        for child in (node or self.root).children:
            yield child
            yield from self.iter_nodes(child)

    def watch_views(self, views: tuple[ScenarioView, ...] | None) -> None:
        if views is None:
            return
        cursor = self.cursor_node.data if self.cursor_node is not None else None
        collapsed = {n.data for n in self.iter_nodes() if n.allow_expand and not n.is_expanded}
        self.clear()
        placed: dict[Selection, TreeNode[Selection]] = {}

        def add(parent: TreeNode[Selection], label: Text, selection: Selection, leaf: bool) -> None:
            if leaf:
                placed[selection] = parent.add_leaf(label, data=selection)
            else:
                placed[selection] = parent.add(label, data=selection, expand=selection not in collapsed)

        for view in views:
            name = view.name
            add(self.root, _scenario_label(view), Selection(name, "scenario"), leaf=False)
            top = placed[Selection(name, "scenario")]
            if view.canary is not None:  # named "canary", so the cursor stays on it as canaries come
                add(top, _canary_label(view.canary), Selection(name, "canary", "canary"), leaf=True)
            candidates = Selection(name, "group", "candidates")
            label = Text(f"candidates ({len(view.steps)})", style="italic")
            add(top, label, candidates, leaf=not view.steps)
            for step in view.steps:
                add(placed[candidates], _step_label(step), Selection(name, "candidate", step.name), leaf=True)
            releases = Selection(name, "group", "releases")
            label = Text(f"releases ({len(view.releases)})", style="italic")
            add(top, label, releases, leaf=not view.releases)
            for release in view.releases:
                selection = Selection(name, "release", release.name)
                add(placed[releases], _release_label(release), selection, leaf=True)
        target = placed.get(cursor) if cursor is not None else None
        if target is None and cursor is not None:
            target = placed.get(Selection(cursor.scenario, "scenario"))
        if target is None:  # first look: the first candidate waiting for a person, if any
            pending = [placed[Selection(v.name, "candidate", s.name)] for v in views for s in v.pending]
            target = pending[0] if pending else next(iter(placed.values()), None)
        if target is not None:
            self.call_after_refresh(self.move_cursor, target)

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[Selection]) -> None:
        event.stop()
        if event.node.data is not None:
            self.post_message(self.Chosen(event.node.data))
