"""Syncing a scenario repository with one of its git remotes (``remotes.py``): fetch, adopt, push.

:func:`sync` runs, in this order:

1. **fetch** everything the remote has into its tracking refs ``refs/remotes/<r>/…`` (under the
   packer's repack lock, as packs with a reverse index so the packer leaves them be) — never into
   a ref this node writes;
2. **adopt**: other nodes' data refs (``refs/reef/data/<other>``, or ``refs/heads/data`` on a
   node) fast-forward to the remote's by compare-and-swap, never the node's own; the release
   chain moves to the remote's when the local one is an ancestor of it, once the LFS objects of
   the new tip are fetched (a release whose checkpoint cannot be fetched is not adopted, so the
   node keeps serving what it can);
3. **LFS objects** of the release and candidate trees the remote lacks, collected here from the
   trees (``git lfs push --object-id``; git-lfs never walks the data branch);
4. **refs**: the node's own data ref (never forced), candidates, pending (pruned) and rejected;
   with ``storage.node`` set those go under ``refs/reef/nodes/<node>/`` on the remote, since the
   step numbers are each repository's own counter;
5. **the release chain**, when the local one is ahead, and **every tag** of the chain the
   remote lacks: one ``git push --atomic`` of the tip and those tags, **never forced**, so the
   remote takes the chain only as a fast-forward and a tag only where it has none, all or
   nothing; the remote never keeps a release without its tag, and a chain or a tag another
   node pushed there is never overwritten.  A tag the remote holds for another commit is a
   conflict, reported and left alone (:func:`push_release` is the same push, for the publish
   path).

The last fetch and push of each remote are kept in ``<repo>/reef-sync/<remote>.json``; what is
not pushed yet (releases, records) is derived from the tracking refs (:func:`remote_status`).

This module holds :func:`sync` itself, the order of its steps; the steps live with their side
of the exchange, and the names callers use are exported from here:

* ``adopt.py``: steps 1 and 2 (the fetch; adopting data refs, the chain and its tags; superseding);
* ``push.py``: steps 3 to 5, and the publish path (:func:`push_release`, :class:`RemotePublisher`);
* ``lineage.py``: what the steps compare (new commits, chain tags, refs as last fetched);
* ``sync_state.py``: :class:`SyncReport`, ``reef-sync/<remote>.json``, :func:`remote_status`.
"""

from __future__ import annotations

import time

from reef_core.store.adopt import (
    Admission,
    Admit,
    _adopt_data,
    _adopt_release,
    _adopt_tags,
    _fetch,
    _settle_held,
    _supersede,
)
from reef_core.store.push import (
    ReleasePush,
    RemotePublisher,
    _push_chain,
    _push_lfs,
    _push_refs,
    push_release,
)
from reef_core.store.remotes import DEFAULT_TIMEOUT_S, Progress, get_remote
from reef_core.store.scenarios import Scenario
from reef_core.store.sync_state import SyncReport, read_state, remote_status, write_state

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Admission",
    "Admit",
    "ReleasePush",
    "RemotePublisher",
    "SyncReport",
    "push_release",
    "read_state",
    "remote_status",
    "sync",
]


def sync(
    scenario: Scenario,
    remote: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
    admit: Admit | None,
) -> SyncReport:
    """Fetch from, adopt from and push to ``remote`` (see the module's docstring); the report
    says what happened, and is kept in ``reef-sync/<remote>.json``.  Never raises for what the
    remote did (the report's ``outcome`` and ``error`` say).  ``admit`` vets each release the
    remote's chain brings before this node serves it (``adopt.py``); required, so that no caller
    forgets it: ``None`` (take every release as it is) is for the store's own tests."""
    config = get_remote(scenario.path, remote)
    report = SyncReport(scenario=scenario.name, remote=config.name, url=config.shown_url)
    state = read_state(scenario.path, config.name)
    now = time.time()
    fetched = _fetch(scenario, config, timeout, progress)
    state["last_fetch"] = {
        "at": now,
        "outcome": fetched.kind,
        "error": None if fetched.ok else fetched.message,
    }
    if not fetched.ok:
        report.outcome = fetched.kind if fetched.kind in ("unreachable", "auth") else "failed"
        report.error = f"{config.name} ({config.shown_url}): {fetched.describe()}"
        state["last_error"] = report.error
        write_state(scenario.path, config.name, {**state, "url": config.shown_url})
        return report
    report.fetched = True
    _adopt_data(scenario, config, report)
    _adopt_release(scenario, config, report, timeout, admit)
    _supersede(scenario, config, report, timeout, admit)
    with scenario.publish_lock:  # tags a sync that died left missing here, the remote's first
        _adopt_tags(scenario, config)
        _settle_held(scenario)  # and held releases adopted by a sync that died before clearing them
    _push_lfs(scenario, config, report, state, timeout)
    outcomes = [
        _push_refs(scenario, config, report, timeout, progress),
        _push_chain(scenario, config, report, timeout, progress),
    ]
    failed = [outcome for outcome in outcomes if not outcome.ok]
    if failed:
        worst = next((o for o in failed if o.kind != "rejected"), failed[0])
        report.outcome = {"rejected": "conflict", "unreachable": "unreachable", "auth": "auth"}.get(
            worst.kind, "failed"
        )
        report.error = f"{config.name} ({config.shown_url}): {worst.describe()}"
    state["last_push"] = {"at": time.time(), "outcome": report.outcome, "error": report.error}
    state.update(
        url=config.shown_url,
        lfs=report.lfs,
        adopted=report.adopted,
        held=report.held,
        warnings=report.warnings,
        last_error=report.error,
    )
    write_state(scenario.path, config.name, state)
    return report
