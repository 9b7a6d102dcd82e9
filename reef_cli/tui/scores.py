"""The mean report score per release of one scenario, read from its data branch as it grows.

A report scores receipts; each receipt's record names the release that served it.  A report
counts once for every release among its references.  Reports are read from a cursor on, and a
record's release is looked up once (records never change), so a refresh costs what is new.
"""

from __future__ import annotations

from collections.abc import Iterable

from reef_core.errors import ReefError
from reef_core.store import ScenarioReader

__all__ = ["ScoreTally"]


class ScoreTally:
    """Sums and counts of report scores per release; :meth:`update` reads the new reports."""

    def __init__(self) -> None:
        self._after: str | None = None
        self._totals: dict[str, list[float]] = {}  # release -> [sum, count]
        self._served_by: dict[str, str | None] = {}  # receipt -> release

    def update(self, reader: ScenarioReader) -> None:
        for item in reader.data.iter_items(["report"], after=self._after):
            self._after = item.id
            score = item.data.get("score")
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                continue  # feedback without a score says nothing about the mean
            references = item.data.get("references") or []
            served = {self._release_of(reader, str(ref)) for ref in references}
            for release in sorted(r for r in served if r):
                total = self._totals.setdefault(release, [0.0, 0])
                total[0] += float(score)
                total[1] += 1

    def means(self, releases: Iterable[str]) -> tuple[tuple[str, float], ...]:
        """``(release, mean)`` for each of ``releases`` (in their order) that has a score."""
        return tuple(
            (name, self._totals[name][0] / self._totals[name][1])
            for name in releases
            if name in self._totals and self._totals[name][1]
        )

    def _release_of(self, reader: ScenarioReader, receipt: str) -> str | None:
        if receipt not in self._served_by:
            try:
                release = reader.data.get(receipt).data.get("release")
            except ReefError:
                release = None  # not a record of this scenario (the daemon refuses those anyway)
            self._served_by[receipt] = release if isinstance(release, str) else None
        return self._served_by[receipt]
