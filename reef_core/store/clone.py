"""A new node joins in one step: a scenario made on this machine from a git remote.

:func:`clone` builds the scenario under a hidden temporary name in the state directory, adds the
remote, and runs one :func:`~reef_core.store.sync.sync` with it: the fetch, then the adoption of
every data ref (other nodes' records), of the release chain with its tags, and of the newest
release's LFS objects (its checkpoint).  Only when all of that went through is the repository
renamed into place, so a clone that fails (the remote away, a checkpoint that cannot be fetched,
a name clash) leaves nothing behind, and a daemon on the same state directory never sees half a
scenario.  Right after, a daemon serves the scenario's newest release and reads every record, with
no request needed first.

The node's own data ref must be its own: if the remote already holds records on the ref this node
would write (``refs/heads/data`` for a node without ``storage.node``, ``refs/reef/data/<node>``
for one), another daemon writes it, and the clone is refused naming the setting to give.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from typing import Any

from reef_core.errors import ConflictError, InvalidInput, RemoteError
from reef_core.store.releases import RELEASE_REF
from reef_core.store.remotes import add_remote, tracking_ref
from reef_core.store.repo import init_bare, read_ref
from reef_core.store.scenarios import Scenario, Store
from reef_core.store.sync import DEFAULT_TIMEOUT_S, Admit, SyncReport, sync

__all__ = ["Cloned", "clone"]


@dataclass(frozen=True)
class Cloned:
    """What :func:`clone` made: the scenario, its newest release, its records, the sync report."""

    scenario: str
    release: str | None
    records: int
    report: SyncReport

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "release": self.release,
            "records": self.records,
            "sync": self.report.as_dict(),
        }


def clone(
    store: Store,
    url: str,
    name: str,
    *,
    remote: str = "origin",
    node: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    admit: Admit | None,
    trusted: bool = False,
) -> Cloned:
    """Make scenario ``name`` on this node from the git remote at ``url`` (see the module's
    docstring).  Raises :class:`InvalidInput` when ``name`` exists here already,
    :class:`RemoteError` when the remote cannot be read, :class:`ConflictError` when the remote
    already has this node's own data ref or the newest release's checkpoint cannot be fetched.
    ``admit`` vets the releases adopted (``adopt.py``): a release held for a person's approval
    is pending in the new scenario, which serves the release before it; ``trusted`` marks the
    remote trusted (``remote.<name>.reefTrusted``)."""
    final = store.path_of(name)
    if store.exists(name):
        raise InvalidInput(f"scenario {name!r} exists in {store.state_dir} already", field="scenario")
    tmp = final.with_name(f".{final.name}.clone-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)  # a clone of this process that died here before
    init_bare(tmp)
    options = store.options if node is None else dataclasses.replace(store.options, node=node)
    try:
        scenario = Scenario(name, tmp, options, store.space)
        try:
            add_remote(tmp, remote, url, trusted=trusted)
            report = sync(scenario, remote, timeout=timeout, admit=admit)
            _refuse_unless_joined(scenario, remote, report)
            tip = scenario.releases.tip()
            records = scenario.data.counts()["record"]
        finally:
            scenario.close()
        try:
            os.rename(tmp, final)
        except OSError:
            raise InvalidInput(f"scenario {name!r} was created here meanwhile", field="scenario") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Cloned(name, tip.name if tip else None, records, report)


def _refuse_unless_joined(scenario: Scenario, remote: str, report: SyncReport) -> None:
    if not report.fetched:
        raise RemoteError(report.error or f"cannot fetch from {remote}")
    if read_ref(scenario.path, tracking_ref(remote, scenario.data_ref)) is not None:
        node = scenario.data_ref.rpartition("/")[2] if scenario.data_ref != "refs/heads/data" else ""
        setting = f"a storage.node other than {node!r}" if node else "a storage.node"
        raise ConflictError(
            f"{report.url} already has records on {scenario.data_ref}, which another daemon writes: "
            f"give this node {setting} of its own (reef clone --node NAME)",
            field="node",
        )
    theirs = read_ref(scenario.path, tracking_ref(remote, RELEASE_REF))
    if theirs is not None and read_ref(scenario.path, RELEASE_REF) != theirs and not report.held:
        why = "; ".join(report.warnings) or "it could not be adopted"
        raise ConflictError(
            f"the newest release on {report.url} cannot be served here: {why}", field="remote"
        )
