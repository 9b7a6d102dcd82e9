"""The release chain, candidates and pending releases of one scenario.

=============================  ==============================================  =======================
ref                            holds                                           moves by
=============================  ==============================================  =======================
``refs/heads/release``         one commit per release, parent = the previous   compare-and-swap only
``refs/tags/vN``               annotated tag per release                       created once
``refs/reef/candidates/<n>``   every candidate, its step record in the message  created once
``refs/reef/pending/<n>``      selected candidates waiting for a person        removed on promote/reject
``refs/reef/rejected/<n>``     pending candidates a person rejected            created once
=============================  ==============================================  =======================

The release ref is the commit point: a release exists once the ref points at it.  Its tag is
an index derived from the chain (the release number is in the commit's ``Reef-Release``
trailer), created right after, and recreated by :meth:`ReleaseChain.repair_tags` if the
process died in between.  Nothing here needs the scenario's writer lock: two daemons, or a
daemon and a CLI, may race, and exactly one wins each compare-and-swap.
"""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pygit2

from reef_core.errors import ConflictError, InvalidInput, NotFound, StoreError
from reef_core.store.approvals import approve_here
from reef_core.store.data import parse_trailers
from reef_core.store.repo import (
    RepoHandle,
    commit_at,
    create_ref_exclusive,
    read_ref,
    signature,
    swap_ref,
    tree_at,
)
from reef_core.store.trees import iter_files

__all__ = [
    "CANDIDATES_PREFIX",
    "OPERATIONS",
    "PENDING_PREFIX",
    "REJECTED_PREFIX",
    "RELEASE_REF",
    "Candidate",
    "Release",
    "ReleaseChain",
    "release_name",
    "step_name",
]

RELEASE_REF = "refs/heads/release"
CANDIDATES_PREFIX = "refs/reef/candidates/"
PENDING_PREFIX = "refs/reef/pending/"
REJECTED_PREFIX = "refs/reef/rejected/"
SUPERSEDED_PREFIX = "refs/reef/superseded/"  # releases of this node a remote's chain replaced
OPERATIONS = ("creation", "evolve", "learn", "training", "rollback", "promote")

_MAX_APPROVER = 200


def release_name(number: int) -> str:
    """What a person calls release ``number``, and its tag: ``v7``."""
    return f"v{number}"


def step_name(step: int) -> str:
    """What a person calls the candidate of step ``step``: ``c5``."""
    return f"c{step}"


@dataclass(frozen=True)
class Release:
    number: int
    commit: str
    tree: str
    operation: str
    ask: str | None = None
    verdict: str | None = None
    source: str | None = None
    created_at: int = 0
    approved_by: str | None = None  # who promoted it, for a release a person approved
    approved_at: int | None = None  # when (seconds since the epoch)

    @property
    def name(self) -> str:
        return release_name(self.number)


@dataclass(frozen=True)
class Candidate:
    step: int
    commit: str
    tree: str
    base: str | None
    verdict: str
    ask: str | None
    record: dict[str, Any] = field(default_factory=dict)


def _encode(value: str | None) -> str:
    return json.dumps(value, ensure_ascii=False)


def _decode(value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value


def _approver(value: object) -> str:
    """Who approved a release, as a trailer can hold it: one line, short, no control characters."""
    text = value.strip() if isinstance(value, str) else ""
    if (
        not text
        or len(text) > _MAX_APPROVER
        or any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in text)
    ):
        raise InvalidInput(
            f"approved_by must name who approved in one line of at most {_MAX_APPROVER} characters, "
            f"not {value!r}",
            field="approved_by",
        )
    return text


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    except ValueError:
        return None


def _parse_release_number(value: object) -> int:
    text = str(value)
    digits = text[1:] if text.startswith("v") else text
    if not digits.isdigit() or int(digits) < 1:
        raise InvalidInput(f"{text!r} is not a release (expected v1, v2, …)", field="release")
    return int(digits)


def _stamp(repo_path: Path, name: str) -> tuple[int, ...]:
    """Identifies the file a ref is read from (loose, else packed-refs, else none) as it is now."""
    for path in (os.path.join(repo_path, name), os.path.join(repo_path, "packed-refs")):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return ()


class ReleaseChain:
    """Reads and moves one scenario's release chain.  Safe to use from any thread."""

    def __init__(self, handle: RepoHandle) -> None:
        self._handle = handle
        self._tip: tuple[tuple[int, ...], Release | None] | None = None  # last tip read, by stamp
        #: told of each release before any ref moves, with its tag object and the tip it was
        #: built on; raising stops the publish with nothing visible.  The daemon sets it to push
        #: the release to the scenario's remote first (``reef_core.store.push.RemotePublisher``).
        self.publisher: Callable[[Release, str, str | None], None] | None = None

    @property
    def _repo(self) -> pygit2.Repository:
        return self._handle.repo

    # -- reading -------------------------------------------------------------------------

    def tip(self) -> Release | None:
        """The serving release.

        Read on every proxied request, so while the ref's file is the one read last time (same
        inode, size and times: git replaces a ref's file, never rewrites it) the release parsed
        then is returned after one ``stat``.
        """
        stamp = _stamp(self._handle.path, RELEASE_REF)
        known = self._tip
        if known is not None and known[0] == stamp:
            return known[1]
        target = read_ref(self._handle.path, RELEASE_REF)
        release = None if target is None else self._release_of(commit_at(self._repo, target))
        self._tip = (stamp, release)
        return release

    def __iter__(self) -> Iterator[Release]:
        """Releases, newest first."""
        ref = self._repo.references.get(RELEASE_REF)
        commit = None if ref is None else commit_at(self._repo, ref.target)
        while commit is not None:
            yield self._release_of(commit)
            commit = commit.parents[0] if commit.parents else None

    def get(self, release: int | str) -> Release:
        number = release if isinstance(release, int) else _parse_release_number(release)
        ref = self._repo.references.get(f"refs/tags/{release_name(number)}")
        if ref is not None:
            commit = ref.peel(pygit2.Commit)
            found = self._release_of(commit)
            if found.number == number:
                return found
        for candidate in self:  # tag missing (crash before it was written): walk the chain
            if candidate.number == number:
                return candidate
        raise NotFound(f"no release {release_name(number)}", field="release")

    def release_at(self, commit: str) -> Release:
        """The release that commit ``commit`` of a chain (this one, or a remote's) is."""
        try:
            return self._release_of(commit_at(self._repo, commit))
        except (KeyError, ValueError) as exc:
            raise StoreError(f"no release commit {commit}") from exc

    def files(self, release: Release) -> dict[str, bytes]:
        return self.tree_files(release.tree)

    def tree_files(self, tree: str) -> dict[str, bytes]:
        """Every file of a tree (a release's, a candidate's), path -> content."""
        return {path: blob.data for path, blob in iter_files(self._repo, tree_at(self._repo, tree))}

    def _release_of(self, commit: pygit2.Commit) -> Release:
        trailers = parse_trailers(commit.message)
        number = trailers.get("Reef-Release", "")
        if not number.isdigit():
            raise StoreError(f"release commit {commit.id} has no Reef-Release trailer")
        return Release(
            number=int(number),
            commit=str(commit.id),
            tree=str(commit.tree_id),
            operation=trailers.get("Reef-Operation", "creation"),
            ask=_decode(trailers.get("Reef-Ask")),
            verdict=trailers.get("Reef-Verdict"),
            source=trailers.get("Reef-Source"),
            created_at=commit.commit_time,
            approved_by=trailers.get("Reef-Approved-By"),
            approved_at=_epoch(trailers.get("Reef-Approved-At")),
        )

    def _tree_here(self, tree: str | pygit2.Oid) -> pygit2.Oid:
        """``tree``'s oid, refused unless it is a tree in this repository (what a release or a
        candidate is made of)."""
        oid = pygit2.Oid(hex=str(tree))
        if not isinstance(self._repo.get(oid), pygit2.Tree):
            raise InvalidInput(f"{tree} is not a tree in this repository", field="tree")
        return oid

    # -- publishing ----------------------------------------------------------------------

    def publish(
        self,
        tree: str | pygit2.Oid,
        *,
        expected: str | None,
        operation: str,
        ask: str | None = None,
        verdict: str | None = None,
        source: str | None = None,
        approved_by: str | None = None,
        when: int | None = None,
    ) -> Release:
        """Append a release whose content is ``tree``, if the chain's tip is still ``expected``.

        ``expected`` is the tip commit the caller built on (``None`` for the first release).
        ``approved_by`` names the person who approved it (a promote); it and the moment are
        kept in the commit's trailers and the tag, so ``git log`` and ``git show vN`` say it.
        If another publisher moved the chain first, raises :class:`ConflictError` and writes
        nothing visible.  ``when`` (seconds since the epoch) dates the commit and tag instead of
        now: a release migrated from elsewhere keeps the moment it was first published.
        """
        if operation not in OPERATIONS:
            raise InvalidInput(f"unknown release operation {operation!r}", field="operation")
        approver = None if approved_by is None else _approver(approved_by)
        repo = self._repo
        tree_oid = self._tree_here(tree)
        parents: list[pygit2.Oid] = []
        number = 1
        if expected is not None:
            parent = repo.get(expected)
            if not isinstance(parent, pygit2.Commit):
                raise ConflictError(f"expected release {expected} does not exist")
            parents = [parent.id]
            number = self._release_of(parent).number + 1
        subject = f"{release_name(number)} {operation}"
        if ask:
            subject += ": " + _short(ask)
        trailers = [f"Reef-Release: {number}", f"Reef-Operation: {operation}"]
        if ask is not None:
            trailers.append(f"Reef-Ask: {_encode(ask)}")
        if verdict:
            trailers.append(f"Reef-Verdict: {' '.join(verdict.split())}")
        if source:
            trailers.append(f"Reef-Source: {' '.join(source.split())}")
        sig = signature() if when is None else pygit2.Signature("reef", "reef@localhost", int(when), 0)
        if approver is not None:
            trailers += [f"Reef-Approved-By: {approver}", f"Reef-Approved-At: {_iso(sig.time)}"]
        message = subject + "\n\n" + "\n".join(trailers) + "\n"
        commit = repo.create_commit(None, sig, sig, message, tree_oid, parents)
        release = self._release_of(commit_at(repo, commit))
        tag = self._tag_object(release, dated=when)
        if self.publisher is not None:
            self.publisher(release, tag, expected)
        self._swap(RELEASE_REF, expected, commit, message=subject)
        self._tip = None
        self._tag_ref(release, tag)
        return release

    def rollback(self, release: int | str, *, expected: str | None) -> Release:
        """Publish the content of an earlier release again, as a new release."""
        target = self.get(release)
        return self.publish(
            target.tree,
            expected=expected,
            operation="rollback",
            ask=target.ask,
            verdict=f"rollback to {target.name}",
            source=target.name,
        )

    def _swap(self, name: str, expected: str | None, new: pygit2.Oid, *, message: str) -> None:
        """Move ``name`` from ``expected`` to ``new``, or raise ConflictError."""
        swap_ref(self._repo, name, expected, new, message=message)

    def _ensure_tag(self, release: Release, *, dated: int | None = None) -> None:
        self._tag_ref(release, self._tag_object(release, dated=dated))

    def _tag_object(self, release: Release, *, dated: int | None = None) -> str:
        """Write ``release``'s annotated tag object (no ref yet); returns its id."""
        lines = [f"{release.name} {release.operation}", ""]
        if release.ask:
            lines.append(f"ask: {release.ask}")
        if release.verdict:
            lines.append(f"verdict: {release.verdict}")
        if release.approved_by:
            when = f" at {_iso(release.approved_at)}" if release.approved_at is not None else ""
            lines.append(f"approved by {release.approved_by}{when}")
        lines += ["", f"Reef-Release: {release.number}", f"Reef-Operation: {release.operation}"]
        tagger = signature()
        stamp = tagger.time if dated is None else int(dated)
        tag = (
            f"object {release.commit}\ntype commit\ntag {release.name}\n"
            f"tagger {tagger.name} <{tagger.email}> {stamp} +0000\n\n" + "\n".join(lines) + "\n"
        )
        return str(self._repo.odb.write(pygit2.enums.ObjectType.TAG, tag.encode()))

    def _tag_ref(self, release: Release, tag: str) -> None:
        repo = self._repo
        name = f"refs/tags/{release.name}"
        if not create_ref_exclusive(repo, name, pygit2.Oid(hex=tag), f"tag {release.name}"):
            existing = repo.references[name].peel(pygit2.Commit)
            if str(existing.id) != release.commit:
                raise StoreError(
                    f"tag {release.name} points at {existing.id}, not at the chain's {release.commit}"
                )

    def repair_tags(self) -> list[int]:
        """Give every release on the chain its tag; returns the numbers repaired.

        A release without a tag (its publisher died before tagging, or a sync that adopted it
        died before its tag) gets one.  A tag that names another commit than the chain's release
        of that number (a sync died after it moved the chain to a remote's, before it retagged:
        the tag still names this node's own release, never pushed) is moved to the chain's
        release, and the commit it named is kept under ``refs/reef/superseded/`` first, so
        nothing is lost.  Every release is looked at, not only the newest: a process can die
        anywhere in between."""
        repaired = []
        repo = self._repo
        for release in reversed(list(self)):
            name = f"refs/tags/{release.name}"
            held = repo.references.get(name)
            if held is not None:
                named = str(held.peel(pygit2.Commit).id)
                if named == release.commit:
                    continue
                create_ref_exclusive(
                    repo, f"{SUPERSEDED_PREFIX}{release.name}-{named[:12]}", pygit2.Oid(hex=named), "repair"
                )
                held.delete()
            self._ensure_tag(release)
            repaired.append(release.number)
        return sorted(repaired)

    # -- candidates and pending releases -------------------------------------------------

    def create_candidate(
        self,
        tree: str | pygit2.Oid,
        *,
        base: Release | None,
        verdict: str,
        ask: str | None = None,
        record: dict[str, Any] | None = None,
    ) -> Candidate:
        """Store a candidate under the next free step number (never overwrites)."""
        repo = self._repo
        tree_oid = self._tree_here(tree)
        body = json.dumps(record or {}, ensure_ascii=False, indent=2, sort_keys=True)
        parents = [pygit2.Oid(hex=base.commit)] if base else []
        step = self._next_step()
        while True:
            subject = f"candidate {step}"
            if ask:
                subject += ": " + _short(ask)
            subject += f" → {verdict}"
            trailers = [
                f"Reef-Step: {step}",
                f"Reef-Base: {base.name if base else 'none'}",
                f"Reef-Verdict: {' '.join(verdict.split())}",
            ]
            if ask is not None:
                trailers.append(f"Reef-Ask: {_encode(ask)}")
            message = f"{subject}\n\n{body}\n\n" + "\n".join(trailers) + "\n"
            sig = signature()
            commit = repo.create_commit(None, sig, sig, message, tree_oid, parents)
            if not create_ref_exclusive(repo, f"{CANDIDATES_PREFIX}{step}", commit, subject):
                step += 1  # another worker took this number first
                continue
            return self.candidate(step)

    def _steps(self, prefix: str) -> list[int]:
        names = self._repo.references.iterator()
        steps = []
        for ref in names:
            if ref.name.startswith(prefix):
                tail = ref.name[len(prefix) :]
                if tail.isdigit():
                    steps.append(int(tail))
        return sorted(steps)

    def _next_step(self) -> int:
        steps = self._steps(CANDIDATES_PREFIX)
        return steps[-1] + 1 if steps else 1

    def candidate(self, step: int) -> Candidate:
        ref = self._repo.references.get(f"{CANDIDATES_PREFIX}{step}")
        if ref is None:
            raise NotFound(f"no candidate {step}", field="step")
        commit = commit_at(self._repo, ref.target)
        paragraphs = commit.message.split("\n\n")
        trailers = parse_trailers(commit.message)
        try:
            record = json.loads(paragraphs[1]) if len(paragraphs) > 2 else {}
        except ValueError:
            record = {}
        return Candidate(
            step=step,
            commit=str(commit.id),
            tree=str(commit.tree_id),
            base=str(commit.parents[0].id) if commit.parents else None,
            verdict=trailers.get("Reef-Verdict", ""),
            ask=_decode(trailers.get("Reef-Ask")),
            record=record,
        )

    def candidates(self) -> list[Candidate]:
        return [self.candidate(step) for step in self._steps(CANDIDATES_PREFIX)]

    def pending(self) -> list[int]:
        return self._steps(PENDING_PREFIX)

    def rejected(self) -> list[int]:
        return self._steps(REJECTED_PREFIX)

    def mark_pending(self, step: int) -> None:
        candidate = self.candidate(step)
        if not create_ref_exclusive(self._repo, f"{PENDING_PREFIX}{step}", pygit2.Oid(hex=candidate.commit)):
            raise ConflictError(f"candidate {step} is already pending")

    def promote(
        self,
        step: int,
        *,
        expected: str | None,
        tree: str | None = None,
        approved_by: str | None = None,
    ) -> Release:
        """Publish a pending candidate as a new release, approved by ``approved_by``, and clear it
        from pending.

        ``tree`` replaces the candidate's own when the chain moved after it was made and its
        change was rebuilt on the new tip.
        """
        name = f"{PENDING_PREFIX}{step}"
        with self._claim(name) as txn:
            candidate = self.candidate(step)
            adopted = candidate.record.get("adopted")
            if isinstance(adopted, dict):
                release = self._approve_adopted(step, str(adopted.get("commit")), approved_by)
                txn.remove(name)
                return release
            done = next((r for r in self if r.source == f"candidate {step}"), None)
            if done is None:
                done = self.publish(
                    tree or candidate.tree,
                    expected=expected,
                    operation="promote",
                    ask=candidate.ask,
                    verdict="approved",
                    source=f"candidate {step}",
                    approved_by=approved_by,
                )
                txn.remove(name)
                return done
            txn.remove(name)  # a promoter died after publishing: finish its clean-up
        raise ConflictError(f"candidate {step} was already promoted as {done.name}")

    def _approve_adopted(self, step: int, commit: str, approved_by: str | None) -> Release:
        """A person here approves a release another node published, held here as pending
        (``adopt.py``): the approval is kept (``approvals.py``) and the chain moves to that very
        commit, so ``vN`` stays one release everywhere.  Refused, changing nothing, when the
        chain has moved past the commit it was built on (a later sync holds the new one)."""
        repo = self._repo
        target = repo.get(commit) if len(commit) == 40 else None
        if not isinstance(target, pygit2.Commit):
            raise StoreError(f"candidate {step} names release commit {commit}, which this repository lacks")
        release = self._release_of(target)
        tip = read_ref(self._handle.path, RELEASE_REF)
        if tip is not None and (tip == commit or repo.descendant_of(tip, commit)):
            return release  # adopted since (a sync found it approved): nothing left to do
        parent = str(target.parents[0].id) if target.parents else None
        if parent != tip:
            raise ConflictError(
                f"c{step} holds {release.name} of another node, built on a release this node does not "
                "serve now: reject it, and sync again to hold the newest",
                field="release",
            )
        approve_here(repo, commit, _approver(approved_by or "a person"))
        self._swap(RELEASE_REF, tip, target.id, message=f"{release.name} approved here")
        self._tip = None
        self.repair_tags()
        return release

    def reject(self, step: int) -> None:
        """Turn down a pending candidate: it leaves pending and is marked rejected."""
        name = f"{PENDING_PREFIX}{step}"
        with self._claim(name) as txn:
            candidate = self.candidate(step)
            # False means an earlier reject died before clearing pending: finish it
            create_ref_exclusive(self._repo, f"{REJECTED_PREFIX}{step}", pygit2.Oid(hex=candidate.commit))
            txn.remove(name)

    def _claim(self, name: str) -> _Claim:
        return _Claim(self._repo, name)


class _Claim:
    """Holds the lock of a pending ref for the length of a promote or reject."""

    def __init__(self, repo: pygit2.Repository, name: str) -> None:
        self._repo = repo
        self._name = name
        self._txn: Any = None

    def __enter__(self) -> Any:
        self._txn = self._repo.transaction()
        txn = self._txn.__enter__()
        try:
            txn.lock_ref(self._name)
        except (pygit2.GitError, OSError) as exc:
            self._txn.__exit__(type(exc), exc, None)
            raise ConflictError(f"{self._name} is being changed by someone else") from exc
        if self._repo.references.get(self._name) is None:
            error = NotFound(f"nothing pending at {self._name.rsplit('/', 1)[-1]}", field="step")
            self._txn.__exit__(NotFound, error, None)
            raise error
        return txn

    def __exit__(self, *exc_info: Any) -> bool | None:
        return self._txn.__exit__(*exc_info)


def _short(text: str, limit: int = 72) -> str:
    flat = " ".join(text.split())
    flat = flat if len(flat) <= limit else flat[: limit - 1] + "…"
    return f'"{flat}"'
