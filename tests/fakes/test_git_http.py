"""The http-backend fake speaks git's smart HTTP: push (atomic), fetch, auth, no LFS API."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx

from tests.conftest import git
from tests.fakes.git_http import GitHttpServer

_IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@t"]


def _repo_with_commit(path: Path) -> str:
    git("init", "-q", "--bare", "-b", "release", str(path))
    tree = git("-C", str(path), "hash-object", "-w", "-t", "tree", "/dev/null").stdout.strip()
    return git("-C", str(path), *_IDENTITY, "commit-tree", tree, "-m", "one").stdout.strip()


def test_push_atomic_fetch_and_a_server_that_comes_back(tmp_path: Path):
    root = tmp_path / "srv"
    git("init", "-q", "--bare", "-b", "release", str(root / "s.git"))
    commit = _repo_with_commit(tmp_path / "local.git")
    local = str(tmp_path / "local.git")
    with GitHttpServer(root) as server:
        url = server.url("s.git")
        pushed = git("-C", local, "push", "--atomic", "--porcelain", url, f"{commit}:refs/heads/release")
        assert f"*\t{commit}:refs/heads/release\t[new branch]" in pushed.stdout
        assert git("-C", str(root / "s.git"), "rev-parse", "release").stdout.strip() == commit
        listed = git("ls-remote", url).stdout
        assert f"{commit}\trefs/heads/release" in listed

        server.stop()
        down = git("ls-remote", url, check=False)
        assert down.returncode == 128 and "Failed to connect" in down.stderr
        server.start()
        assert git("ls-remote", url).stdout == listed


def test_basic_auth_and_no_lfs_api(tmp_path: Path):
    root = tmp_path / "srv"
    git("init", "-q", "--bare", "-b", "release", str(root / "s.git"))
    with GitHttpServer(root, auth="alice:pw") as server:
        refused = subprocess.run(
            ["git", "ls-remote", server.url("s.git")], capture_output=True, text=True, env=_no_prompt()
        )
        assert refused.returncode == 128 and "terminal prompts disabled" in refused.stderr
        helper = "!f() { echo username=alice; echo password=pw; }; f"
        git("-c", f"credential.helper={helper}", "ls-remote", server.url("s.git"))
        lfs_api = server.url("s.git") + "/info/lfs/objects/batch"
        batch = httpx.post(lfs_api, json={"operation": "upload"}, auth=("alice", "pw"))
        assert batch.status_code == 404


def _no_prompt() -> dict[str, str]:
    return {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
