"""``reef review``: the app that ties the tree, the detail pane and the score line together.

The app owns the state (what is loaded, what is selected) and hands it down as attributes;
widgets report up with messages.  Reading happens in workers (a load, then the detail of the
selection, with a canary's test as the daemon tells it), operations run in a thread worker
through an :class:`Operator`, and a watcher worker reloads whenever a repository's refs move,
so a release published (or a canary ended) from anywhere shows up without a key press.
"""

from __future__ import annotations

import asyncio
import webbrowser
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widgets import Footer, Header, Static

from reef_cli.tui import canary
from reef_cli.tui.confirm import ConfirmScreen
from reef_cli.tui.detail import DetailPane
from reef_cli.tui.model import Detail, ReleaseRow, ReviewData, ScenarioView, Selection, StepRow
from reef_cli.tui.operator import Operator
from reef_cli.tui.score_line import ScoreLine
from reef_cli.tui.tree import ScenarioTree
from reef_cli.tui.watch import ref_changes
from reef_core.errors import ReefError
from reef_core.release.listing import approval_question, code_notice

__all__ = ["ReviewApp"]


class ReviewApp(App[None]):
    CSS_PATH = "review.tcss"
    TITLE = "reef review"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "approve", "Approve"),
        Binding("x", "reject", "Reject"),
        Binding("b", "rollback", "Roll back"),
        Binding("o", "open_page", "Open page"),
        Binding("s", "stop_canary", "Stop canary"),
        Binding("p", "promote_canary", "Promote canary"),
        Binding("r", "reload", "Refresh"),
        Binding("q", "quit", "Quit"),
    ]

    selection: reactive[Selection | None] = reactive(None)

    def __init__(
        self,
        data: ReviewData,
        operator: Operator,
        *,
        watch: bool = True,
        browser: Callable[[str], Any] = webbrowser.open,
    ) -> None:
        super().__init__()
        self.data = data
        self.operator = operator
        self.watching = watch
        self.browser = browser
        self.views: dict[str, ScenarioView] = {}
        self.loads = 0  # loads completed (tests wait on it)
        self.watch_ready = False  # the watcher is in place: changes from now on reload

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            yield ScenarioTree(id="tree")
            with Vertical(id="main"):
                yield ScoreLine(id="scores")
                yield DetailPane(id="detail")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = self.operator.description
        self.query_one(ScenarioTree).focus()
        self._load()
        if self.watching:
            self._watch()

    def on_unmount(self) -> None:
        self.operator.close()

    # -- reading -----------------------------------------------------------------------------

    @work(exclusive=True, group="load")
    async def _load(self) -> None:
        try:
            views = await asyncio.to_thread(self.data.load)
        except ReefError as exc:  # a ref caught mid-update, a repository gone: the next change retries
            self.say(f"could not read the repositories: {exc.message}", error=True)
            return
        self.views = {v.name: v for v in views}
        self.query_one(ScenarioTree).views = views
        if not views:
            self.query_one(DetailPane).placeholder = "No scenarios yet: they appear here as they are made."
        self._show(self.selection)
        self.loads += 1

    @work(exclusive=True, group="detail")
    async def _load_detail(self, selection: Selection) -> None:
        try:
            detail = await asyncio.to_thread(self._read_detail, selection)
        except ReefError as exc:
            self.say(f"could not read {selection.name or selection.scenario}: {exc.message}", error=True)
            return
        self.query_one(DetailPane).detail = detail

    def _read_detail(self, selection: Selection) -> Detail | None:
        """The selection's detail; a scenario's and its canary's carry the canary's lines
        (the daemon's account of the test when it answers).  Runs in a worker thread."""
        view = self.views.get(selection.scenario)
        stored = view.canary if view is not None else None
        if selection.kind == "canary":
            if stored is None:
                return None
            shown = canary.show(self.operator, selection.scenario, stored)
            return Detail(selection, shown.state, canary=shown.lines, note=shown.note)
        detail = self.data.detail(selection)
        if detail is not None and selection.kind == "scenario" and stored is not None:
            shown = canary.show(self.operator, selection.scenario, stored)
            detail = replace(detail, canary=shown.lines, note=shown.note)
        return detail

    @work(exclusive=True, group="watch")
    async def _watch(self) -> None:
        async for _ in ref_changes(self.data.scenarios_dir):
            self.watch_ready = True
            self._load()

    def _show(self, selection: Selection | None) -> None:
        """Hand the selection's state down: its scenario's scores, its detail, the bindings."""
        view = self.views.get(selection.scenario) if selection else None
        self.query_one(ScoreLine).scores = view.scores if view else ()
        if selection is not None:
            self._load_detail(selection)
        self.refresh_bindings()

    def on_scenario_tree_chosen(self, message: ScenarioTree.Chosen) -> None:
        self.selection = message.selection

    def watch_selection(self, selection: Selection | None) -> None:
        self._show(selection)

    # -- what is selected --------------------------------------------------------------------

    def _step(self) -> StepRow | None:
        selection = self.selection
        if selection is None or selection.kind != "candidate" or selection.scenario not in self.views:
            return None
        return self.views[selection.scenario].step(selection.name)

    def _release(self) -> ReleaseRow | None:
        selection = self.selection
        if selection is None or selection.kind != "release" or selection.scenario not in self.views:
            return None
        return self.views[selection.scenario].release(selection.name)

    def _canary(self) -> dict[str, Any] | None:
        """The canary of the selected scenario as git keeps it (running, or the last)."""
        selection = self.selection
        view = self.views.get(selection.scenario) if selection is not None else None
        return dict(view.canary) if view is not None and view.canary is not None else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Dim the operations that do not apply to what is selected (and all of them while a
        question is open, so a second key cannot stack a second question).  The canary's keys
        show only for a scenario that has had one, dimmed once it ended."""
        operations = ("approve", "reject", "rollback", "open_page", "reload", "stop_canary", "promote_canary")
        if action in operations and isinstance(self.screen, ConfirmScreen):
            return False
        if action in ("stop_canary", "promote_canary"):
            state = self._canary()
            return False if state is None else True if canary.is_running(state) else None
        if action in ("approve", "reject"):
            step = self._step()
            return True if step is not None and step.state == "pending" else None
        if action == "rollback":
            release = self._release()
            return True if release is not None and not release.current else None
        if action == "open_page":
            return True if self._step() or self._release() else None
        return True

    # -- operations --------------------------------------------------------------------------

    def action_approve(self) -> None:
        step = self._step()
        if step is None or step.state != "pending" or self.selection is None:
            return
        scenario = self.selection.scenario
        code = code_notice(step.executable)
        self._confirm(
            approval_question(step.name, scenario, step.executable),
            (f"{code}\n" if code else "")
            + f"It becomes {scenario}'s next release and serves at once.\nAsk: {step.ask or '-'}",
            lambda: self.operator.approve(scenario, step.step),
        )

    def action_reject(self) -> None:
        step = self._step()
        if step is None or step.state != "pending" or self.selection is None:
            return
        scenario = self.selection.scenario
        self._confirm(
            f"Reject {step.name} of {scenario}?",
            f"It leaves pending and is never served.\nAsk: {step.ask or '-'}",
            lambda: self.operator.reject(scenario, step.step),
        )

    def action_rollback(self) -> None:
        release = self._release()
        if release is None or release.current or self.selection is None:
            return
        scenario = self.selection.scenario
        current = self.views[scenario].current
        self._confirm(
            f"Roll {scenario} back to {release.name}?",
            f"{release.name}'s content is published again as a new release and serves at once "
            f"(in place of {current.name if current else 'nothing'}; history is kept).",
            lambda: self.operator.rollback(
                scenario, release.name, expected=current.commit if current else None
            ),
        )

    def _running_canary(self) -> tuple[Mapping[str, Any], str, str, str] | None:
        """While the selected scenario's canary runs: its state, the scenario, the canary's name
        and the release it was built on."""
        state, scenario = self._canary(), self.selection.scenario if self.selection else ""
        if not canary.is_running(state):
            return None
        return state, scenario, state["name"], state["base"]

    def action_stop_canary(self) -> None:
        if (running := self._running_canary()) is None:
            return
        state, scenario, name, base = running
        self._confirm(
            f"Stop canary {name} of {scenario}?",
            f"{name} stops serving its share of new sessions and is not published: {base} serves "
            f"them all again. The sessions it served stay recorded.\nAsk: {state.get('ask') or '-'}",
            lambda: self.operator.stop_canary(scenario),
            failed=f"could not stop canary {name} of {scenario}",
        )

    def action_promote_canary(self) -> None:
        if (running := self._running_canary()) is None:
            return
        state, scenario, name, base = running
        self._confirm(
            f"Promote canary {name} of {scenario} now?",
            f"{name} is published now as {scenario}'s next release and serves every new session, "
            f"whatever its test says so far. If a release other than {base} serves by then, it "
            f"is ended instead and nothing is published.\nAsk: {state.get('ask') or '-'}",
            lambda: self.operator.promote_canary(scenario),
            failed=f"could not promote canary {name} of {scenario}",
        )

    def action_open_page(self) -> None:
        target = self._step() or self._release()
        if target is None:
            return
        try:
            url = self.operator.page_url(target.page_path)
        except ReefError as exc:
            self.say(exc.message, error=True)
            return
        self.browser(url)
        self.say(f"opened {url}")

    def action_reload(self) -> None:
        self._load()

    def _confirm(
        self, question: str, consequence: str, operation: Callable[[], str], *, failed: str = ""
    ) -> None:
        """Ask, then run ``operation``; ``failed`` leads an error's line (what did not happen)."""
        if not self.operator.live:  # say so now rather than after a question that cannot matter
            try:
                operation()
            except ReefError as exc:
                self.say(exc.message, error=True)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._operate(operation, failed)

        self.push_screen(ConfirmScreen(question, consequence), answered)

    @work(thread=True, group="operate")
    def _operate(self, operation: Callable[[], str], failed: str = "") -> None:
        try:
            message = operation()
        except ReefError as exc:
            said = f"{failed}: {exc.message}" if failed else exc.message
            self.call_from_thread(self.say, said, error=True)
            self.call_from_thread(self._load)  # what failed may have changed it (a canary ended)
            return
        self.call_from_thread(self.say, message)
        self.call_from_thread(self._load)  # the watcher would too; this is at once

    def say(self, message: str, *, error: bool = False) -> None:
        """One line under the panes (it stays) and a notification (it fades)."""
        self.query_one("#status", Static).update(Text(message, style="bold red" if error else "green"))
        self.notify(message, severity="error" if error else "information", markup=False)
