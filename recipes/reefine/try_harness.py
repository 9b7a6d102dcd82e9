"""``try_harness``: the agent proposer's tool, checking the harness tree the agent is editing.

Run as ``python -I -B -m recipes.reefine.try_harness <config.json>`` by the pi extension the agent
proposer installs (see :mod:`recipes.reefine.agent`), with the agent's workspace as cwd.  It reads
the workspace as a harness tree, lists its problems, renders it for pi and runs pi's health check
(the real pi, through reef, on the health task; found with
:func:`reef_core.harness.health_check_for`), then prints the findings for the agent and exits
0 when the tree is fit to release, 1 when it is not, 2 when the tool itself is misconfigured.

The config file (written by the proposer, outside the workspace) holds ``workspace``,
``reef_url``, ``scenario``, ``model``, ``pi``, ``pi_version``, ``timeout``, ``task`` and ``log``;
the credential comes from ``REEF_API_KEY`` in the environment, as it does for pi (in the sandbox,
the bridge's own, never the daemon's token).  In the sandbox the health run starts pi right
there, with no sandbox of its own: it is already inside one.  Each try appends one
JSON line to ``log``: whether it passed, the findings, and a digest of the tree it saw.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reef_core.errors import ReefError
from reef_core.harness import (
    MANIFEST_PATH,
    MAX_ENTRIES,
    MAX_ENTRY_BYTES,
    HarnessBinary,
    HarnessTree,
    Target,
    TreeError,
    health_check_for,
    health_headers,
    renderer_for,
)

__all__ = ["TryResult", "main", "read_workspace", "tree_digest", "try_tree"]


@dataclass(frozen=True)
class TryResult:
    passed: bool
    findings: str
    digest: str


def read_workspace(root: Path) -> dict[str, bytes]:
    """The workspace's files by relative path; raises :class:`TreeError` for a symlink, a special
    file, a file over the entry size limit, or more files than a tree may hold."""
    files: dict[str, bytes] = {}
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(directory)
        for name in sorted(dirnames + filenames):
            path = here / name
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                raise TreeError(
                    f"{relative} is a symbolic link: the tree holds plain files only", field=relative
                )
            if name in dirnames:
                continue
            if not path.is_file():
                raise TreeError(f"{relative} is not a plain file", field=relative)
            size = path.stat().st_size
            if size > MAX_ENTRY_BYTES:
                raise TreeError(
                    f"{relative}: {size} bytes, over the limit of {MAX_ENTRY_BYTES}", field=relative
                )
            if len(files) > MAX_ENTRIES:
                raise TreeError(f"the workspace holds more than {MAX_ENTRIES + 1} files", field=relative)
            files[relative] = path.read_bytes()
    return files


def tree_digest(files: Mapping[str, bytes]) -> str:
    """A digest of a workspace's entries (the manifest left out): equal trees, equal digests."""
    digest = hashlib.sha256()
    for path in sorted(files):
        if path != MANIFEST_PATH:
            digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()[:16]


def try_tree(
    workspace: Path,
    *,
    target: Target,
    env: Mapping[str, str],
    pi: HarnessBinary,
    timeout: float,
    task: str,
) -> TryResult:
    """The findings on the tree in ``workspace``: its problems, or what the real pi did with it."""
    try:
        files = read_workspace(workspace)
        digest = tree_digest(files)
        tree = HarnessTree.from_files({k: v for k, v in files.items() if k != MANIFEST_PATH})
    except (OSError, TreeError) as exc:
        return TryResult(False, f"tree: unusable: {getattr(exc, 'message', None) or exc}", "")
    entries = ", ".join(f"{e.kind} {e.name}" for e in tree.entries.values()) or "none"
    lines = [f"tree: {len(tree.entries)} entries ({entries})"]
    problems = tree.problems()
    if problems:
        lines += ["problems (fix these; the health check did not run):", *(f"- {p}" for p in problems)]
        return TryResult(False, "\n".join(lines), digest)
    rendered = renderer_for("pi").render(tree, target)
    result = health_check_for("pi").run(rendered, env=env, task=task, timeout=timeout, binary=pi)
    lines.append(f"health: {'passed' if result.passed else 'FAILED'}: {result.detail}")
    return TryResult(result.passed, "\n".join(lines), digest)


def _config(path: str) -> dict[str, Any]:
    value = json.loads(Path(path).read_text())
    if not isinstance(value, dict):
        raise ValueError("the config must be a JSON object")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m recipes.reefine.try_harness <config.json>", file=sys.stderr)
        return 2
    try:
        config = _config(args[0])
        check = health_check_for("pi")
        target = Target(
            reef_url=config["reef_url"],
            scenario=config["scenario"],
            model=config["model"],
            headers=health_headers(check),
        )
        pi = HarnessBinary(Path(config["pi"]), str(config["pi_version"]))
        env = check.routing(target.reef_url, target.scenario, os.environ.get("REEF_API_KEY"))
        result = try_tree(
            Path(config["workspace"]),
            target=target,
            env=env,
            pi=pi,
            timeout=float(config["timeout"]),
            task=str(config["task"]),
        )
    except (OSError, ValueError, KeyError, TypeError, ReefError) as exc:
        print(f"try_harness is misconfigured: {exc}", file=sys.stderr)
        return 2
    print(result.findings)
    log = config.get("log")
    if isinstance(log, str):
        record = {"passed": result.passed, "findings": result.findings, "digest": result.digest}
        with open(log, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
