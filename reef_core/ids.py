"""Identifiers: scenario names and time-ordered item ids.

An item id is ``<prefix>_<12 hex: unix ms><16 hex: counter/random>``, e.g.
``rec_0193a1b2c3d4e5f60718293a4b5c``.  Ids sort by creation time, so

* the data branch shards files by the id's time prefix: old subtrees are never rewritten
  (``reference/storage.md``: 3x cheaper group commits than hash shards);
* an id alone locates its file, with no history scan;
* "everything after this id" is a cursor that survives restarts.

The generator is monotonic: within one millisecond (or if the clock steps back) the low part
counts up from the last id, so ids are strictly increasing in the order they were issued.
"""

from __future__ import annotations

import functools
import random
import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from reef_core.errors import InvalidInput

__all__ = [
    "KINDS",
    "NODE_PATTERN",
    "IdGenerator",
    "ItemId",
    "parse_item_id",
    "validate_node_name",
    "validate_scenario_name",
]

#: item kind -> (id prefix, directory on the data branch)
KINDS: dict[str, tuple[str, str]] = {
    "record": ("rec", "records"),
    "report": ("rep", "reports"),
    "ask": ("ask", "asks"),
}
_KIND_BY_PREFIX = {prefix: kind for kind, (prefix, _) in KINDS.items()}

_ITEM_ID = re.compile(r"^(rec|rep|ask)_([0-9a-f]{28})$")
_SCENARIO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: a node name (``storage.node``): one path component of ``refs/reef/data/<node>``
NODE_PATTERN = r"[a-z0-9][a-z0-9_-]{0,31}"
_LOW_BITS = 64
_LOW_MAX = (1 << _LOW_BITS) - 1


@dataclass(frozen=True, order=True)
class ItemId:
    """A parsed item id.  Orders by time (``hex``), then kind."""

    hex: str
    kind: str

    def __str__(self) -> str:
        return f"{KINDS[self.kind][0]}_{self.hex}"

    @property
    def millis(self) -> int:
        return int(self.hex[:12], 16)

    @property
    def created_at(self) -> str:
        """The id's time as ISO 8601 UTC with milliseconds, e.g. ``2026-11-29T14:44:05.123Z``."""
        seconds, millis = divmod(self.millis, 1000)
        return f"{_utc_second(seconds)}.{millis:03d}Z"

    @property
    def path(self) -> str:
        """Where the item lives on the data branch: ``records/0193/a1/b2/c3/d4/rec_….json``.

        Five time levels: 49 days, 4.7 hours, 65 s, 256 ms and 1 ms.  No tree on the path
        holds more than 256 entries however fast items arrive, so a commit's cost is bounded
        by the layout, not by history or load.
        """
        h = self.hex
        return f"{KINDS[self.kind][1]}/{h[0:4]}/{h[4:6]}/{h[6:8]}/{h[8:10]}/{h[10:12]}/{self}.json"


@functools.lru_cache(maxsize=64)
def _utc_second(seconds: int) -> str:
    # ids come in bursts within the same second: formatting a datetime costs more than the
    # rest of making a record's header
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def parse_item_id(value: object, *, field: str = "id") -> ItemId:
    """Parse an id from outside; raises :class:`InvalidInput` naming ``field``."""
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be a string id such as rec_…", field=field)
    match = _ITEM_ID.match(value)
    if match is None:
        shown = value if len(value) <= 48 else value[:45] + "..."
        raise InvalidInput(f"{field} is not a reef id: {shown!r}", field=field)
    return ItemId(hex=match.group(2), kind=_KIND_BY_PREFIX[match.group(1)])


def validate_scenario_name(value: object, *, field: str = "scenario") -> str:
    """Return ``value`` if it is a legal scenario name, else raise :class:`InvalidInput`.

    The pattern admits no ``/``, no leading dot and no ``..`` component, so a name can never
    point outside the state directory.
    """
    return _checked_name(
        value, _SCENARIO.pattern, field, "scenario name", "1-64 letters, digits, '.', '_' or '-'"
    )


def validate_node_name(value: object, *, field: str = "node") -> str:
    """Return ``value`` if it is a legal node name (``storage.node``), else raise
    :class:`InvalidInput`."""
    return _checked_name(
        value, NODE_PATTERN, field, "node name", "1-32 lowercase letters, digits, '_' or '-'"
    )


def _checked_name(value: object, pattern: str, field: str, what: str, rule: str) -> str:
    if not isinstance(value, str) or re.fullmatch(pattern, value) is None:
        shown = repr(value) if not isinstance(value, str) or len(value) <= 70 else "(too long)"
        raise InvalidInput(
            f"{field} {shown} is not a valid {what}: use {rule}, starting with a letter or digit", field=field
        )
    return value


class IdGenerator:
    """Issues strictly increasing ids; thread-safe."""

    def __init__(self, after: ItemId | None = None, *, clock=time.time) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._last_ms = after.millis if after else 0
        self._last_low = int(after.hex[12:], 16) if after else 0

    def new(self, kind: str) -> ItemId:
        if kind not in KINDS:
            raise InvalidInput(f"unknown item kind {kind!r}", field="kind")
        with self._lock:
            now = int(self._clock() * 1000)
            if now > self._last_ms:
                # fresh millisecond: random low bits, with headroom so the counter never wraps
                # (uniqueness comes from the monotonic counter, not from the randomness, so a
                # non-cryptographic generator does: no system call per id)
                low = random.getrandbits(_LOW_BITS - 1)  # reseeded after fork
            else:
                now = self._last_ms
                low = self._last_low + 1
                if low > _LOW_MAX:
                    now, low = now + 1, 0
            self._last_ms, self._last_low = now, low
        return ItemId(hex=f"{now:012x}{low:016x}", kind=kind)
