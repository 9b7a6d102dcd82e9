"""A one-line sparkline of the mean report score per release, oldest to newest.

Bars are relative (the lowest mean is the shortest bar); the numbers beside them are the means
of the last few releases, so the line says both the trend and where it stands.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.widgets import Label, Sparkline

__all__ = ["ScoreLine"]

_SHOWN = 5  # releases whose mean is written out
_CELLS_PER_RELEASE = 3
_MAX_WIDTH = 30


class ScoreLine(Horizontal):
    scores: reactive[tuple[tuple[str, float], ...]] = reactive(())

    def compose(self) -> ComposeResult:
        yield Label("mean score", id="score-label")
        yield Sparkline([], id="score-spark")
        yield Label("", id="score-values")

    def watch_scores(self, scores: tuple[tuple[str, float], ...]) -> None:
        spark = self.query_one(Sparkline)
        values = self.query_one("#score-values", Label)
        spark.display = bool(scores)
        spark.data = [mean for _, mean in scores]
        spark.styles.width = min(_MAX_WIDTH, _CELLS_PER_RELEASE * max(1, len(scores)))
        if not scores:
            values.update("no scored reports yet")
            return
        shown = " · ".join(f"{release} {mean:.2f}" for release, mean in scores[-_SHOWN:])
        values.update(("… " if len(scores) > _SHOWN else "") + shown)
