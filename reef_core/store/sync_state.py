"""What a node knows of each of its remotes: the report of a sync, and what is kept of it.

A :class:`SyncReport` says what one sync did (``sync.py``; the steps that fill it in are in
``adopt.py`` and ``push.py``).  The last fetch and push of each remote are kept in
``<repo>/reef-sync/<remote>.json`` (:func:`read_state`, :func:`write_state`: written whole, by
rename, so a killed sync leaves the previous state); what is not pushed yet (releases, records)
is never kept but derived from the tracking refs each time (:func:`remote_status`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from reef_core.errors import StoreError
from reef_core.store.data import parse_counts
from reef_core.store.lineage import fetched_ref
from reef_core.store.releases import RELEASE_REF
from reef_core.store.remotes import Remote
from reef_core.store.repo import read_ref
from reef_core.store.scenarios import ScenarioReader

__all__ = [
    "SyncReport",
    "read_state",
    "remote_status",
    "write_state",
]

_STATE_DIR = "reef-sync"


@dataclass
class SyncReport:
    """What one :func:`~reef_core.store.sync.sync` of one remote did.

    ``outcome``: ``ok``; ``conflict`` (the remote's data ref or release chain moved in a way
    that cannot be fast-forwarded; what could be pushed was); ``unreachable``, ``auth`` or
    ``failed`` (``error`` says, redacted).  ``lfs``: ``ok``, ``unsupported`` (no git-lfs API:
    checkpoints not pushed), ``failed``, or ``none`` (no LFS object to push).
    """

    scenario: str
    remote: str
    url: str  # redacted
    outcome: str = "ok"
    error: str | None = None
    fetched: bool = False
    pushed: dict[str, str] = field(default_factory=dict)  # remote ref -> git's summary
    adopted: str | None = None  # the release adopted from the remote, "v7"
    adopted_data: list[str] = field(default_factory=list)
    #: releases of the remote held here for a person's approval, "v2 as c3" (``adopt.py``)
    held: list[str] = field(default_factory=list)
    lfs: str = "none"
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _state_path(path: Path, remote: str) -> Path:
    return path / _STATE_DIR / f"{remote}.json"


def read_state(path: Path, remote: str) -> dict[str, Any]:
    """The last sync of ``remote`` as ``reef-sync/<remote>.json`` keeps it (empty if none)."""
    try:
        value = json.loads(_state_path(path, remote).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def write_state(path: Path, remote: str, state: dict[str, Any]) -> None:
    target = _state_path(path, remote)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        target.parent.mkdir(exist_ok=True)
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write {target}: {exc}") from exc


def remote_status(scenario: ScenarioReader, remote: Remote) -> dict[str, Any]:
    """One remote as ``reef remote list`` shows it: its URL (redacted), the last fetch and
    push, whether it takes LFS objects, and what is not pushed yet (derived from the tracking
    refs: releases on the local chain the remote's lacks, records of the own data ref)."""
    path = scenario.path
    state = read_state(path, remote.name)
    repo = scenario.handle.repo
    mine = read_ref(path, RELEASE_REF)
    theirs = fetched_ref(scenario, remote.name, RELEASE_REF)
    ahead = behind = 0
    if mine is not None and theirs is not None:
        ahead, behind = repo.ahead_behind(mine, theirs)
    elif mine is not None:
        ahead = scenario.releases.release_at(mine).number
    own = read_ref(path, scenario.data_ref)
    pushed = fetched_ref(scenario, remote.name, scenario.data_ref)
    records = _records(repo, own) - _records(repo, pushed)
    lfs = state.get("lfs", "unknown")
    return {
        "name": remote.name,
        "url": remote.shown_url,
        "trusted": remote.trusted,
        "last_fetch": state.get("last_fetch"),
        "last_push": state.get("last_push"),
        "lfs": {"none": "unknown", "failed": "unknown"}.get(lfs, lfs),
        "unpushed_releases": ahead,
        "behind_releases": behind,
        "unpushed_records": max(records, 0),
        "error": state.get("last_error"),
    }


def _records(repo: pygit2.Repository, commit: str | None) -> int:
    if commit is None:
        return 0
    return parse_counts(repo[commit].peel(pygit2.Commit).message).get("record", 0)
