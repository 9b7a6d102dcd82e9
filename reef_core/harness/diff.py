"""What changed between two release trees, file by file, as unified diffs.

Used by the reviewer's prompt, the step page and the review TUI, so all three show the same
thing ``git diff vA vB`` would.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["FileDiff", "diff_files", "diff_text"]


@dataclass(frozen=True)
class FileDiff:
    path: str
    status: str  # "added", "removed", "modified"
    lines: tuple[str, ...]  # unified diff lines, without the ---/+++ header

    @property
    def added(self) -> int:
        return sum(1 for line in self.lines if line.startswith("+"))

    @property
    def removed(self) -> int:
        return sum(1 for line in self.lines if line.startswith("-"))


def _text(data: bytes | None) -> list[str]:
    if data is None:
        return []
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return [f"(binary, {len(data)} bytes)"]


def diff_files(
    base: Mapping[str, bytes], candidate: Mapping[str, bytes], *, context: int = 3
) -> list[FileDiff]:
    """The files that differ, sorted by path."""
    diffs = []
    for path in sorted(set(base) | set(candidate)):
        old, new = base.get(path), candidate.get(path)
        if old == new:
            continue
        status = "added" if old is None else "removed" if new is None else "modified"
        lines = difflib.unified_diff(_text(old), _text(new), lineterm="", n=context)
        body = tuple(line for line in lines if not line.startswith(("---", "+++")))
        diffs.append(FileDiff(path, status, body))
    return diffs


def diff_text(base: Mapping[str, bytes], candidate: Mapping[str, bytes]) -> str:
    """All differences as one ``git diff``-like text; ``(no changes)`` when there are none."""
    parts = []
    for diff in diff_files(base, candidate):
        old = "/dev/null" if diff.status == "added" else f"a/{diff.path}"
        new = "/dev/null" if diff.status == "removed" else f"b/{diff.path}"
        parts.append("\n".join([f"--- {old}", f"+++ {new}", *diff.lines]))
    return "\n".join(parts) if parts else "(no changes)"
