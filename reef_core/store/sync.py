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
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from reef_core.errors import ConflictError, StoreError
from reef_core.store.data import DATA_REF, NODE_DATA_PREFIX, parse_counts
from reef_core.store.installs import INSTALLED_PREFIX
from reef_core.store.lfs import LfsPointer, lfs_object_path, parse_pointer
from reef_core.store.packer import repack_lock
from reef_core.store.releases import (
    CANDIDATES_PREFIX,
    PENDING_PREFIX,
    REJECTED_PREFIX,
    RELEASE_REF,
    SUPERSEDED_PREFIX,
    Release,
)
from reef_core.store.remotes import (
    Outcome,
    Remote,
    classify,
    get_remote,
    lfs_fetch,
    lfs_push,
    run_git,
    tracking_ref,
)
from reef_core.store.repo import blob_at, commit_at, create_ref_exclusive, move_ref, read_ref
from reef_core.store.scenarios import Scenario, ScenarioReader

__all__ = [
    "ReleasePush",
    "RemotePublisher",
    "SyncReport",
    "push_release",
    "read_state",
    "remote_status",
    "sync",
]

ZERO = "0" * 40
DEFAULT_TIMEOUT_S = 120.0
_STATE_DIR = "reef-sync"
_STEP_PREFIXES = (CANDIDATES_PREFIX, PENDING_PREFIX, REJECTED_PREFIX)
_MAX_POINTER = 1024

Progress = Callable[[str], None]


@dataclass
class SyncReport:
    """What one :func:`sync` of one remote did.

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
    lfs: str = "none"
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReleasePush:
    """What :func:`push_release` came to: ``ok``, ``lease-lost`` (the remote's chain or tag moved
    first: fetch, rebuild, retry) or ``unreachable`` (keep the release local, push it later);
    ``lfs`` as in :class:`SyncReport`."""

    outcome: str
    message: str = ""
    lfs: str = "none"


# -- the state kept per remote ---------------------------------------------------------------


def _state_path(path: Path, remote: str) -> Path:
    return path / _STATE_DIR / f"{remote}.json"


def read_state(path: Path, remote: str) -> dict[str, Any]:
    """The last sync of ``remote`` as ``reef-sync/<remote>.json`` keeps it (empty if none)."""
    try:
        value = json.loads(_state_path(path, remote).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write_state(path: Path, remote: str, state: dict[str, Any]) -> None:
    target = _state_path(path, remote)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        target.parent.mkdir(exist_ok=True)
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write {target}: {exc}") from exc


# -- refs --------------------------------------------------------------------------------------


def _node_of(data_ref: str) -> str:
    return data_ref[len(NODE_DATA_PREFIX) :] if data_ref.startswith(NODE_DATA_PREFIX) else ""


def _remote_step_ref(ref: str, node: str) -> str:
    """Where a candidate, pending or rejected ref goes on the remote."""
    return f"refs/reef/nodes/{node}/{ref.removeprefix('refs/reef/')}" if node else ref


def _refs_under(repo: pygit2.Repository, prefixes: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for ref in repo.references.iterator():
        if ref.name.startswith(prefixes):
            found[ref.name] = str(ref.target)
    return found


def _ancestor(repo: pygit2.Repository, old: str, new: str) -> bool:
    """``old`` is ``new`` or one of its ancestors."""
    return old == new or repo.descendant_of(new, old)


def _new_commits(repo: pygit2.Repository, tip: str, known: str | None) -> list[str]:
    """First-parent commits from ``tip`` back to (not including) ``known``, newest first."""
    found = []
    commit: pygit2.Commit | None = commit_at(repo, tip)
    while commit is not None and str(commit.id) != known:
        found.append(str(commit.id))
        commit = commit.parents[0] if commit.parents else None
    return found


# -- LFS pointers, collected from trees --------------------------------------------------------


def lfs_pointers(repo: pygit2.Repository, trees: Iterable[str]) -> dict[str, LfsPointer]:
    """The LFS pointers in ``trees`` (tree ids), by object id; shared subtrees read once."""
    found: dict[str, LfsPointer] = {}
    seen: set[str] = set()
    stack = [pygit2.Oid(hex=tree) for tree in trees]
    while stack:
        oid = stack.pop()
        if str(oid) in seen:
            continue
        seen.add(str(oid))
        tree = repo[oid]
        if not isinstance(tree, pygit2.Tree):
            continue
        for entry in tree:
            if entry.type_str == "tree":
                stack.append(entry.id)
            elif entry.type_str == "blob" and str(entry.id) not in seen:
                seen.add(str(entry.id))
                _, size = repo.odb.read_header(entry.id)
                if size <= _MAX_POINTER:
                    pointer = parse_pointer(blob_at(repo, entry.id).data)
                    if pointer is not None:
                        found[pointer.oid] = pointer
    return found


def _tree_of(repo: pygit2.Repository, commit: str) -> str:
    return str(repo[commit].peel(pygit2.Commit).tree_id)


# -- the pieces ----------------------------------------------------------------------------------


def _fetch(scenario: Scenario, remote: Remote, timeout: float, progress: Progress | None) -> Outcome:
    arguments = [
        "-c",
        "pack.writeReverseIndex=true",
        "-c",
        "transfer.unpackLimit=1",
        "fetch",
        "--progress" if progress else "-q",
        "--prune",
        "--no-write-fetch-head",
        remote.name,
    ]
    with repack_lock(scenario.path):
        result = run_git(scenario.path, arguments, timeout=timeout, progress=progress)
    scenario.handle.invalidate()  # new packs: every thread's repository rescans
    return classify(result)


def _adopt_data(scenario: Scenario, remote: Remote, report: SyncReport) -> None:
    """Other nodes' data refs, fast-forwarded to the remote's by compare-and-swap."""
    repo = scenario.handle.repo
    own = scenario.data_ref
    tracking = {tracking_ref(remote.name, DATA_REF): DATA_REF}
    prefix = tracking_ref(remote.name, NODE_DATA_PREFIX)
    for name in _refs_under(repo, (prefix,)):
        tracking[name] = NODE_DATA_PREFIX + name[len(prefix) :]
    for source, local in tracking.items():
        theirs = read_ref(scenario.path, source)
        if local == own or theirs is None:
            continue  # never the node's own: it holds records the remote may not have yet
        mine = read_ref(scenario.path, local)
        if mine == theirs:
            continue
        if mine is not None and not repo.descendant_of(theirs, mine):
            report.warnings.append(f"{local} on {remote.name} is not a fast-forward of ours: left as it is")
            continue
        try:
            if mine is None:
                if not create_ref_exclusive(repo, local, pygit2.Oid(hex=theirs), f"sync from {remote.name}"):
                    continue
            else:
                move_ref(scenario.path, local, mine, theirs)
        except ConflictError:
            continue  # moved meanwhile (another sync): the next one looks again
        report.adopted_data.append(local)


def _adopt_release(scenario: Scenario, remote: Remote, report: SyncReport, timeout: float) -> None:
    """The remote's release chain, when ours is an ancestor of it and its checkpoint fetched."""
    repo = scenario.handle.repo
    theirs = read_ref(scenario.path, tracking_ref(remote.name, RELEASE_REF))
    with scenario.publish_lock:
        mine = read_ref(scenario.path, RELEASE_REF)
        if theirs is None or mine == theirs or (mine is not None and not _ancestor(repo, mine, theirs)):
            return
        new = _new_commits(repo, theirs, mine)
        tip_name = scenario.releases.release_at(theirs).name
        why = _missing_checkpoints(scenario, remote, new, timeout)
        if why is not None:
            report.warnings.append(
                f"{tip_name} on {remote.name} lacks its checkpoint{why}: not adopted, "
                "the release served stays the one this node has"
            )
            return
        try:
            if mine is None:
                if not create_ref_exclusive(
                    repo, RELEASE_REF, pygit2.Oid(hex=theirs), f"sync from {remote.name}"
                ):
                    return
            else:
                move_ref(scenario.path, RELEASE_REF, mine, theirs)
        except ConflictError:
            return  # a local publish won the chain meanwhile: the push below tells
        _adopt_tags(scenario, remote)
        report.adopted = tip_name


def _adopt_tags(scenario: Scenario, remote: Remote) -> None:
    """The remote's tag objects for releases of the local chain that lack a tag here (adopted
    from it, perhaps by a sync that died before their tags), so a later push of them is a
    no-op; then every release still without its tag, or with a tag naming another commit, gets
    one derived from the chain (``repair_tags``)."""
    repo = scenario.handle.repo
    tip = read_ref(scenario.path, RELEASE_REF)
    for name, _ in _chain_tags(scenario, tip, None, untagged=True) if tip else []:
        theirs = read_ref(scenario.path, tracking_ref(remote.name, f"refs/tags/{name}"))
        release = scenario.releases.get(name)
        if theirs is not None and _tag_target(repo, theirs) == release.commit:
            create_ref_exclusive(repo, f"refs/tags/{name}", pygit2.Oid(hex=theirs), "sync")
    scenario.releases.repair_tags()


def _missing_checkpoints(
    scenario: Scenario, remote: Remote, commits: list[str], timeout: float
) -> str | None:
    """Why the newest of ``commits`` (releases on the remote) cannot be served here, after
    fetching its LFS objects; None when it can."""
    repo = scenario.handle.repo
    needed = lfs_pointers(repo, [_tree_of(repo, commits[0])])
    missing = [oid for oid in needed if not lfs_object_path(scenario.path, oid).exists()]
    if not missing:
        return None
    fetched = lfs_fetch(scenario.path, remote.name, commits, timeout=timeout)
    if all(lfs_object_path(scenario.path, oid).exists() for oid in missing):
        return None
    return "" if fetched.ok else f" ({_describe(fetched)})"


def _supersede(scenario: Scenario, remote: Remote, report: SyncReport, timeout: float) -> None:
    """Releases published here while the remote could not be reached, on a chain the remote
    moved past meanwhile (another node published): the remote's chain wins, so that every
    ``vN`` is one release everywhere.  This node's chain moves to the remote's (the one place a
    local release ref moves back: those releases were never pushed, so no other node or client
    of the remote knows them), its tags of those numbers become the remote's, and each
    superseded release is kept twice: its commit under ``refs/reef/superseded/``, and its
    content as a pending candidate on the new tip, for a person to review and promote.
    """
    repo = scenario.handle.repo
    theirs = read_ref(scenario.path, tracking_ref(remote.name, RELEASE_REF))
    with scenario.publish_lock:
        mine = read_ref(scenario.path, RELEASE_REF)
        if theirs is None or mine is None or _ancestor(repo, mine, theirs) or _ancestor(repo, theirs, mine):
            return
        base = repo.merge_base(mine, theirs)
        known = None if base is None else str(base)
        chain = scenario.releases
        ours = [chain.release_at(commit) for commit in reversed(_new_commits(repo, mine, known))]
        new = _new_commits(repo, theirs, known)
        tip = chain.release_at(theirs)
        why = _missing_checkpoints(scenario, remote, new, timeout)
        if why is not None:
            report.warnings.append(
                f"the release chains diverged and {tip.name} on {remote.name} lacks its checkpoint{why}: "
                "not adopted, the release served stays the one this node has"
            )
            return
        # each superseded release is kept (its commit, and a pending candidate) *before* the
        # chain moves, and tags are fixed after: a process killed anywhere in between loses
        # nothing, a sync that runs again finds what is done already, and repair_tags (at the
        # next open or sync) retags a chain moved under stale tags
        steps = []
        for release in ours:
            create_ref_exclusive(
                repo,
                f"{SUPERSEDED_PREFIX}{release.name}-{release.commit[:12]}",
                pygit2.Oid(hex=release.commit),
                "sync",
            )
            steps.append(f"c{_pending_for(chain, release, tip, remote.name)}")
        try:
            move_ref(scenario.path, RELEASE_REF, mine, theirs)
        except ConflictError:
            return  # a local publish moved the chain meanwhile: the next sync looks again
        for release in ours:
            tag = f"refs/tags/{release.name}"
            held = repo.references.get(tag)
            if held is not None and str(held.peel(pygit2.Commit).id) == release.commit:
                held.delete()
        _adopt_tags(scenario, remote)
        report.adopted = tip.name
        names = ", ".join(release.name for release in ours)
        report.warnings.append(
            f"{names} were published here while {remote.name} could not be reached, and {remote.name} "
            f"moved to {tip.name} meanwhile: this node now serves {remote.name}'s chain; what {names} "
            f"held waits for review as pending {', '.join(steps)} (reef review, reef promote)"
        )


def _pending_for(chain: Any, release: Release, tip: Release, remote: str) -> int:
    """The pending candidate that keeps a superseded ``release`` for review on ``tip``: the one
    an earlier (interrupted) sync made, else a new one; its step."""
    for candidate in chain.candidates():
        if (candidate.record.get("superseded") or {}).get("commit") == release.commit:
            return int(candidate.step)
    verdict = (
        f"pending: {release.name} was published here while {remote} could not be reached, "
        f"and {remote} moved to {tip.name} meanwhile"
    )
    record = {"superseded": {"release": release.name, "commit": release.commit, "by": tip.name}}
    made = chain.create_candidate(release.tree, base=tip, verdict=verdict, ask=release.ask, record=record)
    chain.mark_pending(made.step)
    return int(made.step)


def _push_lfs(
    scenario: Scenario, remote: Remote, report: SyncReport, state: dict[str, Any], timeout: float
) -> None:
    """The LFS objects of release and candidate trees the remote does not have yet (all of them
    after a sync whose LFS push did not go through)."""
    repo = scenario.handle.repo
    everything = state.get("lfs") not in ("ok", "none")
    trees = []
    mine = read_ref(scenario.path, RELEASE_REF)
    theirs = read_ref(scenario.path, tracking_ref(remote.name, RELEASE_REF))
    if mine is not None:
        known = None if everything or theirs is None or not _ancestor(repo, theirs, mine) else theirs
        trees += [_tree_of(repo, commit) for commit in _new_commits(repo, mine, known)]
    node = _node_of(scenario.data_ref)
    for ref, target in _refs_under(repo, (CANDIDATES_PREFIX,)).items():
        if (
            everything
            or read_ref(scenario.path, tracking_ref(remote.name, _remote_step_ref(ref, node))) != target
        ):
            trees.append(_tree_of(repo, target))
    pointers = lfs_pointers(repo, trees)
    present = [oid for oid in pointers if lfs_object_path(scenario.path, oid).exists()]
    if not present:
        report.lfs = state.get("lfs", "none")  # nothing to push: the last verdict stands
        return
    outcome = lfs_push(scenario.path, remote.name, present, timeout=timeout)
    if outcome.ok:
        report.lfs = "ok"
    elif outcome.kind == "no_lfs":
        report.lfs = "unsupported"
        report.warnings.append(
            f"checkpoints NOT pushed: {remote.name} has no git-lfs API "
            f"({remote.shown_url} answered 404 on info/lfs/objects/batch)"
        )
    else:
        report.lfs = "failed"
        report.warnings.append(f"checkpoints NOT pushed to {remote.name}: {_describe(outcome)}")


def _push_refs(
    scenario: Scenario, remote: Remote, report: SyncReport, timeout: float, progress: Progress | None
) -> Outcome:
    """The own data ref and the step refs, if any differs from what the remote has."""
    repo = scenario.handle.repo
    node = _node_of(scenario.data_ref)
    specs = []
    own = read_ref(scenario.path, scenario.data_ref)
    if own is not None and own != read_ref(scenario.path, tracking_ref(remote.name, scenario.data_ref)):
        specs.append(f"{scenario.data_ref}:{scenario.data_ref}")  # never forced
    local = _refs_under(repo, _STEP_PREFIXES)
    remote_prefixes = tuple(tracking_ref(remote.name, _remote_step_ref(p, node)) for p in _STEP_PREFIXES)
    tracked = _refs_under(repo, remote_prefixes)
    wanted = {tracking_ref(remote.name, _remote_step_ref(ref, node)): target for ref, target in local.items()}
    if wanted != tracked:
        specs += [f"{prefix}*:{_remote_step_ref(prefix, node)}*" for prefix in _STEP_PREFIXES]
    for ref in _refs_under(repo, (INSTALLED_PREFIX,)):  # named one by one: never pruned there
        if read_ref(scenario.path, tracking_ref(remote.name, ref)) is None:
            specs.append(f"{ref}:{ref}")
    if not specs:
        return Outcome("ok")
    arguments = ["push", "--porcelain", "--no-verify", "--prune"]
    if progress:
        arguments.append("--progress")
    result = run_git(scenario.path, [*arguments, remote.name, *specs], timeout=timeout, progress=progress)
    outcome = classify(result)
    for row in result.rows:
        report.pushed[row.destination] = row.summary
    if outcome.kind == "rejected" and any(
        row.rejected and row.destination == scenario.data_ref for row in result.rows
    ):
        report.warnings.append(
            f"{scenario.data_ref} on {remote.name} has records this node does not: two daemons write "
            f"{scenario.data_ref}; give each its own storage.node"
        )
    return outcome


def _chain_tags(
    scenario: ScenarioReader, tip: str, since: str | None, *, untagged: bool = False
) -> list[tuple[str, str]]:
    """``(vN, tag object)`` of each release after ``since`` up to ``tip``, oldest first (a
    release without a local tag is left out: ``repair_tags`` makes it), or with ``untagged``
    ``(vN, "")`` of those whose local tag is missing or names another commit."""
    repo = scenario.handle.repo
    tags = []
    for commit in reversed(_new_commits(repo, tip, since)):
        name = f"v{scenario.releases.release_at(commit).number}"
        oid = read_ref(scenario.path, f"refs/tags/{name}")
        right = oid is not None and _tag_target(repo, oid) == commit
        if untagged and not right:
            tags.append((name, ""))
        elif not untagged and right and oid is not None:
            tags.append((name, oid))
    return tags


def _tag_target(repo: pygit2.Repository, oid: str) -> str:
    """The commit a tag (object or ref target) names."""
    return str(repo[oid].peel(pygit2.Commit).id)


def _missing_tags(
    scenario: Scenario, remote: Remote, tip: str, report: SyncReport
) -> tuple[list[tuple[str, str]], list[str]]:
    """The tags of the chain up to ``tip`` the remote lacks (to push), and those the remote
    holds for another commit (a conflict: reported, never forced)."""
    repo = scenario.handle.repo
    lacking, clashing = [], []
    for name, oid in _chain_tags(scenario, tip, None):
        there = read_ref(scenario.path, tracking_ref(remote.name, f"refs/tags/{name}"))
        if there is None:
            lacking.append((name, oid))
        elif _tag_target(repo, there) != _tag_target(repo, oid):
            clashing.append(name)
    if clashing:
        report.warnings.append(
            f"{remote.name} has tag(s) {', '.join(clashing)} for other commits than this node's "
            "releases of those numbers: not forced (a person must decide which release is which)"
        )
    return lacking, clashing


def _push_chain(
    scenario: Scenario, remote: Remote, report: SyncReport, timeout: float, progress: Progress | None
) -> Outcome:
    """The release chain when ours is ahead of the remote's, and every tag of the shared chain
    the remote lacks (a release pushed while its tag was not: a publish that died between the
    two, or a tag lost on the remote).  A tag the remote holds for another commit is a
    conflict, never forced; the chain is pushed only as a fast-forward."""
    repo = scenario.handle.repo
    mine = read_ref(scenario.path, RELEASE_REF)
    theirs = read_ref(scenario.path, tracking_ref(remote.name, RELEASE_REF))
    if mine is None:
        return Outcome("ok")
    if theirs is not None and theirs != mine and not _ancestor(repo, theirs, mine):
        local = scenario.releases.release_at(mine).name
        if _ancestor(repo, mine, theirs):
            return Outcome("ok")  # behind (its checkpoint could not be adopted): nothing to push
        there = scenario.releases.release_at(theirs).name
        report.warnings.append(
            f"the release chains diverged: this node is at {local}, {remote.name} at {there}; "
            "releases not pushed"
        )
        return Outcome(
            "rejected", "diverged", f"release chains diverged ({local} here, {there} on {remote.name})"
        )
    lacking, clashing = _missing_tags(scenario, remote, mine, report)
    if clashing:
        return Outcome("rejected", "tag", f"tag(s) {', '.join(clashing)} name other commits on {remote.name}")
    if mine == theirs and not lacking:
        return Outcome("ok")
    result = _chain_push(scenario.path, remote, mine, lacking, timeout, progress)
    for row in result.rows:
        report.pushed[row.destination] = row.summary
    return classify(result)


def _chain_push(
    path: Path,
    remote: Remote,
    commit: str,
    tags: list[tuple[str, str]],
    timeout: float,
    progress: Progress | None = None,
) -> Any:
    """One atomic push of the release chain's tip ``commit`` and ``tags``, never forced: the
    remote takes it only as a fast-forward of its chain, and only tags it does not hold (or
    holds for the same object), so a chain or tag that another node pushed there is never
    overwritten and the push is all or nothing."""
    arguments = ["push", "--atomic", "--porcelain", "--no-verify"]
    if progress:
        arguments.append("--progress")
    specs = [f"{commit}:{RELEASE_REF}", *(f"{oid}:refs/tags/{name}" for name, oid in tags)]
    return run_git(path, [*arguments, remote.name, *specs], timeout=timeout, progress=progress)


def _describe(outcome: Outcome) -> str:
    what = {
        "unreachable": "unreachable",
        "auth": "credentials missing or refused",
        "no_lfs": "no git-lfs API",
        "failed": "failed",
        "rejected": f"rejected ({outcome.reason})",
    }.get(outcome.kind, outcome.kind)
    return f"{what}: {outcome.message}" if outcome.message else what


# -- the public functions ------------------------------------------------------------------------


def sync(
    scenario: Scenario,
    remote: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
) -> SyncReport:
    """Fetch from, adopt from and push to ``remote`` (see the module's docstring); the report
    says what happened, and is kept in ``reef-sync/<remote>.json``.  Never raises for what the
    remote did (the report's ``outcome`` and ``error`` say)."""
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
        report.error = f"{config.name} ({config.shown_url}): {_describe(fetched)}"
        state["last_error"] = report.error
        _write_state(scenario.path, config.name, {**state, "url": config.shown_url})
        return report
    report.fetched = True
    _adopt_data(scenario, config, report)
    _adopt_release(scenario, config, report, timeout)
    _supersede(scenario, config, report, timeout)
    with scenario.publish_lock:  # tags a sync that died left missing here, the remote's first
        _adopt_tags(scenario, config)
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
        report.error = f"{config.name} ({config.shown_url}): {_describe(worst)}"
    state["last_push"] = {"at": time.time(), "outcome": report.outcome, "error": report.error}
    state.update(
        url=config.shown_url,
        lfs=report.lfs,
        adopted=report.adopted,
        warnings=report.warnings,
        last_error=report.error,
    )
    _write_state(scenario.path, config.name, state)
    return report


def push_release(
    scenario: ScenarioReader,
    remote: str,
    commit: str,
    tag: str,
    *,
    tag_oid: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> ReleasePush:
    """Push release ``commit`` with its tag ``tag`` (``"v7"``; the tag object ``tag_oid``, by
    default the local ``refs/tags/<tag>``) to ``remote`` in one atomic push, with the tags of
    the releases before it the remote lacks, as a fast-forward of the remote's chain (the
    push is never forced).

    ``lease-lost`` when the remote's chain, as last fetched, is not an ancestor of ``commit``
    (it holds releases this one was not built on), or when the remote refuses the push (its
    chain moved, or it holds one of the tags for another commit).  The LFS objects of the
    release's tree go first (a remote without a git-lfs API is noted in ``lfs``, not a
    failure).  Moves no local ref but the tracking refs git moves itself.
    """
    config = get_remote(scenario.path, remote)
    oid = tag_oid or read_ref(scenario.path, f"refs/tags/{tag}")
    if oid is None:
        raise StoreError(f"no tag {tag} to push with release {commit}")
    repo = scenario.handle.repo
    theirs = read_ref(scenario.path, tracking_ref(config.name, RELEASE_REF))
    if theirs is not None and theirs != commit and not _ancestor(repo, theirs, commit):
        there = scenario.releases.release_at(theirs).name
        return ReleasePush(
            "lease-lost", f"{config.name} holds {there}, which {tag} was not built on: not a fast-forward"
        )
    pointers = lfs_pointers(repo, [_tree_of(repo, commit)])
    present = [p for p in pointers if lfs_object_path(scenario.path, p).exists()]
    lfs = "none"
    if present:
        pushed = lfs_push(scenario.path, config.name, present, timeout=timeout)
        lfs = {"ok": "ok", "no_lfs": "unsupported"}.get(pushed.kind, "failed")
        if pushed.kind in ("unreachable", "auth"):
            return ReleasePush("unreachable", f"{config.name} ({config.shown_url}): {_describe(pushed)}", lfs)
    parent = repo[commit].peel(pygit2.Commit).parents
    earlier = _chain_tags(scenario, str(parent[0].id), theirs) if parent else []
    outcome = classify(_chain_push(scenario.path, config, commit, [*earlier, (tag, oid)], timeout))
    if outcome.ok:
        return ReleasePush("ok", "", lfs)
    message = f"{config.name} ({config.shown_url}): {_describe(outcome)}"
    if outcome.kind == "rejected":
        return ReleasePush("lease-lost", message, lfs)
    return ReleasePush("unreachable", message, lfs)


class RemotePublisher:
    """Publishing with a remote (``ReleaseChain.publisher``): each release is pushed to the
    remote, with its tag and a lease on the remote's chain, *before* the local chain moves.

    * pushed: the local chain follows (a fast-forward), so no node ever serves a ``vN`` the
      remote does not have.  The push carries the release's tag and those of the releases
      before it the remote lacks (made while it was away), and is never forced: the remote
      takes it only as a fast-forward of its chain, so a release is only ever published on
      top of the remote's chain, never beside it;
    * the lease was lost (another node published first, or the remote's chain as last
      fetched holds releases this one was not built on): the remote's chain is fetched and
      adopted here, and the publish fails with :class:`ConflictError`; the caller finds the
      tip moved and rebuilds its change on it (the recipe's ``rebase``) or records a conflict,
      as in a race between two publishers of one machine;
    * the remote cannot be reached: the release is published locally all the same, unpushed,
      and the next sync pushes it (``remote_status`` counts it meanwhile).

    Pushing first, not after the local swap, is what keeps one release per number everywhere
    without ever moving a published local release or tag back.  ``on_adopt`` is told the name
    of a release adopted after a lost lease (the daemon serves it).
    """

    def __init__(
        self,
        scenario: Scenario,
        remote: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        on_adopt: Callable[[str], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.remote = get_remote(scenario.path, remote)
        self.timeout = timeout
        self.on_adopt = on_adopt
        self.last: ReleasePush | None = None

    def __call__(self, release: Release, tag: str, expected: str | None) -> None:
        name = self.remote.name
        pushed = push_release(
            self.scenario, name, release.commit, release.name, tag_oid=tag, timeout=self.timeout
        )
        self.last = pushed
        if pushed.outcome != "lease-lost":
            return  # pushed, or unreachable: published here, pushed by a later sync
        report = SyncReport(scenario=self.scenario.name, remote=name, url=self.remote.shown_url)
        if _fetch(self.scenario, self.remote, self.timeout, None).ok:
            _adopt_release(self.scenario, self.remote, report, self.timeout)
            _supersede(self.scenario, self.remote, report, self.timeout)
        if report.adopted and self.on_adopt is not None:
            self.on_adopt(report.adopted)
        now = report.adopted or "a chain this node cannot follow yet"
        raise ConflictError(
            f"the release chain moved on {name} (now {now}); {release.name} was not published"
        )


def remote_status(scenario: ScenarioReader, remote: Remote) -> dict[str, Any]:
    """One remote as ``reef remote list`` shows it: its URL (redacted), the last fetch and
    push, whether it takes LFS objects, and what is not pushed yet (derived from the tracking
    refs: releases on the local chain the remote's lacks, records of the own data ref)."""
    path = scenario.path
    state = read_state(path, remote.name)
    repo = scenario.handle.repo
    mine = read_ref(path, RELEASE_REF)
    theirs = read_ref(path, tracking_ref(remote.name, RELEASE_REF))
    ahead = behind = 0
    if mine is not None and theirs is not None:
        ahead, behind = repo.ahead_behind(mine, theirs)
    elif mine is not None:
        ahead = scenario.releases.release_at(mine).number
    own = read_ref(path, scenario.data_ref)
    pushed = read_ref(path, tracking_ref(remote.name, scenario.data_ref))
    records = _records(repo, own) - _records(repo, pushed)
    lfs = state.get("lfs", "unknown")
    return {
        "name": remote.name,
        "url": remote.shown_url,
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
