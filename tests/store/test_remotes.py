"""Remote config, redaction and the classification of git's and git-lfs's answers (pinned)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reef_core.errors import InvalidInput, NotFound
from reef_core.store.remotes import (
    GitResult,
    _parse_rows,
    add_remote,
    classify,
    get_remote,
    list_remotes,
    redact,
    remove_remote,
    run_git,
    tracking_ref,
    validate_url,
)
from reef_core.store.repo import init_bare
from tests.conftest import git


def test_a_url_with_a_password_is_refused_and_a_user_name_is_kept():
    with pytest.raises(InvalidInput, match="reef keeps no passwords") as refused:
        validate_url("https://alice:s3cretPW@forge.example/s.git")
    assert "s3cretPW" not in refused.value.message
    assert validate_url("https://alice@forge.example/s.git") == "https://alice@forge.example/s.git"
    assert validate_url("git@forge.example:team/s.git") == "git@forge.example:team/s.git"
    assert validate_url("relative/s.git") == str(Path("relative/s.git").resolve())
    for bad in ("", "--upload-pack=touch x", "http://a\nb"):
        with pytest.raises(InvalidInput):
            validate_url(bad)


def test_redact_the_git_lfs_line_that_prints_a_password():
    line = (
        "batch response: Repository or object not found: "
        "http://alice:s3cretPW@127.0.0.1:40123/s.git/info/lfs/objects/batch"
    )
    assert redact(line) == (
        "batch response: Repository or object not found: "
        "http://alice:***@127.0.0.1:40123/s.git/info/lfs/objects/batch"
    )
    assert redact("fatal: Authentication failed for 'http://127.0.0.1:1/s.git/'") == (
        "fatal: Authentication failed for 'http://127.0.0.1:1/s.git/'"
    )
    assert (
        redact("ssh://bob:pw@host/x and https://carol:p%40ss@h/y")
        == "ssh://bob:***@host/x and https://carol:***@h/y"
    )


def test_add_list_remove(tmp_path: Path):
    repo = tmp_path / "s.git"
    init_bare(repo)
    add_remote(repo, "origin", "/srv/s.git")
    add_remote(repo, "backup", "https://alice@forge.example/s.git")
    assert [(r.name, r.url) for r in list_remotes(repo)] == [
        ("backup", "https://alice@forge.example/s.git"),
        ("origin", "/srv/s.git"),
    ]
    assert git("-C", str(repo), "config", "--get-all", "remote.origin.fetch").stdout.split() == [
        "+refs/heads/*:refs/remotes/origin/heads/*",
        "+refs/tags/*:refs/remotes/origin/tags/*",
        "+refs/reef/*:refs/remotes/origin/reef/*",
    ]
    assert git("-C", str(repo), "config", "remote.origin.tagOpt").stdout.strip() == "--no-tags"
    with pytest.raises(InvalidInput, match="already has a remote 'origin'"):
        add_remote(repo, "origin", "/elsewhere.git")
    with pytest.raises(InvalidInput, match="not a remote name"):
        add_remote(repo, "../x", "/elsewhere.git")

    tree = git("-C", str(repo), "hash-object", "-w", "-t", "tree", "/dev/null").stdout.strip()
    commit = git("-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", tree, "-m", "x")
    git("-C", str(repo), "update-ref", tracking_ref("origin", "refs/heads/release"), commit.stdout.strip())
    (repo / "reef-sync").mkdir()
    (repo / "reef-sync" / "origin.json").write_text("{}")
    remove_remote(repo, "origin")
    assert [r.name for r in list_remotes(repo)] == ["backup"]
    assert git("-C", str(repo), "for-each-ref", "refs/remotes/").stdout == ""
    assert not (repo / "reef-sync" / "origin.json").exists()
    with pytest.raises(NotFound):
        get_remote(repo, "origin")


def _result(rc: int, stderr: str = "", stdout: str = "") -> GitResult:
    return GitResult(rc=rc, stdout=stdout, stderr=stderr, rows=_parse_rows(stdout))


_PORCELAIN = "To /srv/s.git\n{rows}Done\n"


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ("!\tabc:refs/heads/release\t[rejected] (stale info)\n", "stale"),
        (
            "!\tabc:refs/heads/release\t[remote rejected] (atomic transaction failed)\n"
            "!\trefs/tags/v2:refs/tags/v2\t[remote rejected] (atomic transaction failed)\n",
            "atomic",
        ),
        (
            "!\tabc:refs/heads/release\t[rejected] (atomic push failed)\n"
            "!\trefs/tags/v2:refs/tags/v2\t[rejected] (already exists)\n",
            "exists",
        ),
        ("!\trefs/heads/data:refs/heads/data\t[rejected] (non-fast-forward)\n", "non-fast-forward"),
        ("!\trefs/heads/data:refs/heads/data\t[rejected] (fetch first)\n", "non-fast-forward"),
    ],
)
def test_rejections_are_told_apart(rows: str, reason: str):
    outcome = classify(_result(1, stdout=_PORCELAIN.format(rows=rows)))
    assert (outcome.kind, outcome.reason) == ("rejected", reason)


@pytest.mark.parametrize(
    ("stderr", "kind"),
    [
        (
            "fatal: unable to access 'http://127.0.0.1:1/s.git/': Failed to connect to 127.0.0.1 port 1",
            "unreachable",
        ),
        (
            "fatal: '/x.git' does not appear to be a git repository\nfatal: Could not read from remote",
            "unreachable",
        ),
        ("ssh: Could not resolve host: nowhere.example", "unreachable"),
        (
            'batch response: Post "http://127.0.0.1:1/s.git/info/lfs/objects/batch": dial tcp 127.0.0.1:1: '
            "connect: connection refused",
            "unreachable",
        ),
        ("fatal: Authentication failed for 'http://127.0.0.1:5/s.git/'", "auth"),
        ("fatal: could not read Username for 'http://127.0.0.1:5': terminal prompts disabled", "auth"),
        ("batch response: Git credentials for http://127.0.0.1:5/s.git not found.", "auth"),
        ("git@forge.example: Permission denied (publickey).", "auth"),
        (
            "batch response: Repository or object not found: http://alice:***@127.0.0.1:5/s.git/info/lfs/objects/batch\n"
            "Check that it exists and that you have proper access to it",
            "no_lfs",
        ),
        ("error: something else entirely", "failed"),
    ],
)
def test_failures_are_classified(stderr: str, kind: str):
    rc = 2 if "batch" in stderr else 128
    outcome = classify(_result(rc, stderr=stderr))
    assert outcome.kind == kind
    assert outcome.message


def test_ok_and_timeout():
    assert classify(_result(0, stdout=_PORCELAIN.format(rows="*\tabc:refs/heads/release\t[new branch]\n"))).ok
    late = GitResult(rc=-1, stdout="", stderr="git push gave no answer within 1 s", timed_out=True)
    assert (classify(late).kind, classify(late).reason) == ("unreachable", "timeout")


def test_a_git_that_hangs_is_killed_with_its_children_at_the_timeout(tmp_path: Path):
    repo = tmp_path / "s.git"
    init_bare(repo)
    started = time.monotonic()
    result = run_git(repo, ["-c", "alias.hang=!sleep 30", "hang"], timeout=0.5)
    assert time.monotonic() - started < 5
    assert result.timed_out and classify(result).kind == "unreachable"
    assert result.stderr.endswith("git hang gave no answer within 0.5 s")
