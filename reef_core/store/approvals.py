"""Who approved a release that came from a remote: a person here, or a signed approval.

A release adopted from a remote whose change runs code is served here only once someone this
node trusts approved it (``reef_core.release.adoption`` decides; this module keeps and reads
the evidence):

* ``refs/reef/approved/<commit>``: a tag object naming who approved ``<commit>`` here, made by
  ``reef promote`` of the pending step on this node; never pushed (a node's own approvals are
  its own);
* ``refs/tags/reef-approved/<anything>`` on the remote (fetched into its tracking refs): a tag
  a person signed with ssh (``git tag -s``) naming the release commit, made with plain git on
  any node, verified against the scenario's allowed signers;
* the release commit itself, signed with ssh (``git verify-commit``).

The allowed signers are the file that the scenario repository's *own* config names under
``gpg.ssh.allowedSignersFile`` (``git --git-dir <repo> config gpg.ssh.allowedSignersFile FILE``;
the global and system configs do not count: trust is given per scenario), in ssh's
``allowed_signers`` format.  Without it no signature is trusted.  git runs ``ssh-keygen -Y``
to verify; a signature by a key that file does not list is no approval.
"""

from __future__ import annotations

from pathlib import Path

import pygit2

from reef_core.store.remotes import run_git, tracking_ref
from reef_core.store.repo import create_ref_exclusive, repo_config, signature

__all__ = [
    "APPROVED_PREFIX",
    "SIGNED_TAG_PREFIX",
    "SIGNERS_KEY",
    "allowed_signers",
    "approval_here",
    "approve_here",
    "signed_approval",
]

APPROVED_PREFIX = "refs/reef/approved/"
SIGNED_TAG_PREFIX = "reef-approved/"
SIGNERS_KEY = "gpg.ssh.allowedSignersFile"
_VERIFY_TIMEOUT_S = 30.0


def approval_here(repo: pygit2.Repository, commit: str) -> str | None:
    """Who approved release commit ``commit`` on this node (the tag's first line), or None."""
    ref = repo.references.get(f"{APPROVED_PREFIX}{commit}")
    if ref is None:
        return None
    target = repo.get(ref.target)
    if isinstance(target, pygit2.Tag) and str(target.target) == commit:
        return (target.message or "").strip().splitlines()[0] if target.message else "a person here"
    return "a person here" if str(ref.target) == commit else None


def approve_here(repo: pygit2.Repository, commit: str, approver: str) -> None:
    """Keep that ``approver`` approved release commit ``commit`` here (once; a second approval
    of the same commit changes nothing)."""
    tagger = signature()
    body = (
        f"object {commit}\ntype commit\ntag reef-approved-{commit[:12]}\n"
        f"tagger {tagger.name} <{tagger.email}> {tagger.time} +0000\n\n"
        f"approved by {approver}\n"
    )
    tag = repo.odb.write(pygit2.enums.ObjectType.TAG, body.encode())
    create_ref_exclusive(
        repo, f"{APPROVED_PREFIX}{commit}", pygit2.Oid(hex=str(tag)), f"approved by {approver}"
    )


def allowed_signers(path: Path) -> Path | None:
    """The allowed signers file the repository at ``path`` names in its own config, or None."""
    config = repo_config(path)
    if SIGNERS_KEY not in config:
        return None
    value = str(config[SIGNERS_KEY]).strip()
    if not value:
        return None
    named = Path(value).expanduser()
    return named if named.is_absolute() else (path / named)


def _verified(path: Path, signers: Path, verb: str, oid: str) -> str | None:
    result = run_git(
        path,
        ["-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={signers}", verb, oid],
        timeout=_VERIFY_TIMEOUT_S,
    )
    if not result.ok:
        return None
    said = [line for line in result.stderr.splitlines() if line.startswith("Good")]
    return said[0] if said else "a good signature"


def signed_approval(path: Path, repo: pygit2.Repository, remote: str, commit: str) -> str | None:
    """A signed approval of release commit ``commit``, as last fetched from ``remote``: a tag
    under ``refs/tags/reef-approved/`` naming it, or the commit itself, signed by a key the
    scenario's allowed signers list; git's words for the good signature, or None."""
    signers = allowed_signers(path)
    if signers is None:
        return None
    prefix = tracking_ref(remote, f"refs/tags/{SIGNED_TAG_PREFIX}")
    for ref in repo.references.iterator():
        if not ref.name.startswith(prefix):
            continue
        target = repo.get(ref.target)
        if not isinstance(target, pygit2.Tag) or str(target.target) != commit:
            continue  # a lightweight tag carries no signature; a tag of another commit approves not this
        good = _verified(path, signers, "verify-tag", str(target.id))
        if good is not None:
            return good
    return _verified(path, signers, "verify-commit", commit)
