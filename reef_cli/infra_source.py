"""Reading a state directory of the original Reef (PyPI ``reef-infra`` 0.1.3), for ``reef import``.

    <dir>/agent-record/<sha256(scenario)>.sqlite3   one SQLite record store per scenario (WAL)
    <dir>/artifacts.git                              harness releases; a scenario's chain is the
                                                     first parents of refs/reef/scenarios/<b64>

Everything is read and checked here, before anything is written: each store is copied (with
its ``-wal`` and ``-shm``) to a temporary folder and read from the copy, so the user's files
are never opened for writing; a row that cannot be read is an error naming the file, its
``sequence`` and its id.  Each release's tree is converted from the adapter-neutral entries
the original kept in ``reef-artifact.json`` (``algorithm_state.entries``) to reef's layout
(``reef_core/harness/tree.py``): the files it served were rendered for one adapter.
"""

from __future__ import annotations

import base64
import json
import math
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reef_core.daemon.imported import source_id
from reef_core.errors import InvalidInput, ReefError
from reef_core.harness.tree import Entry, HarnessTree, Manifest
from reef_core.ids import validate_scenario_name
from reef_core.store import ForeignRepo

__all__ = ["InfraRelease", "InfraScenario", "Row", "SourceError", "read_state"]

_SCENARIO_REFS = "refs/reef/scenarios/"
_RELEASE_REFS = "refs/reef/releases/"
_ARTIFACT = "reef-artifact.json"
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_SKILL_PATH = re.compile(r"^(?:.*/)?skills/([^/]+)/SKILL\.md$")
_TYPES = ("inference", "report", "train")


class SourceError(ReefError):
    """The reef-infra state directory cannot be migrated as it is; names the file and row."""

    code = "import_source"


@dataclass(frozen=True)
class Row:
    """One row of ``agent_record``, parsed."""

    store: Path  # the user's file, for messages
    sequence: int
    id: str
    scenario: str  # as reef will name it (after --scenario-map)
    request_type: str  # inference | report | train
    payload: dict[str, Any]
    created_at: float
    references: tuple[str, ...]
    release_sha: str | None  # the artifact release that served an inference

    @property
    def where(self) -> str:
        return f"{self.store}: row sequence {self.sequence} (id {self.id})"


@dataclass(frozen=True)
class InfraRelease:
    """One release of a scenario's chain, oldest first, converted to a reef release tree."""

    sha: str
    operation: str  # reef's: creation | evolve | training | rollback | promote
    ask: str | None
    verdict: str | None
    time: int
    files: dict[str, bytes]
    notes: tuple[str, ...] = ()  # what the conversion left out


@dataclass
class InfraScenario:
    name: str  # reef's name
    original: str
    rows: list[Row] = field(default_factory=list)
    releases: list[InfraRelease] = field(default_factory=list)
    pending: int = 0  # releases waiting for approval in the original: not migrated


def read_state(path: Path, renames: Mapping[str, str]) -> dict[str, InfraScenario]:
    """Every scenario of a reef-infra state directory, checked; raises :class:`SourceError`."""
    path = Path(path)
    records = path / "agent-record"
    artifacts = path / "artifacts.git"
    if not path.is_dir():
        raise SourceError(f"{path}: no such directory")
    if not records.is_dir() and not artifacts.is_dir():
        raise SourceError(
            f"{path}: not a reef-infra state directory (no agent-record/ or artifacts.git inside); "
            "a PostgreSQL record backend cannot be imported"
        )
    scenarios: dict[str, InfraScenario] = {}
    bad_names: dict[str, str] = {}

    def scenario(original: str, where: str) -> InfraScenario | None:
        name = renames.get(original, original)
        try:
            validate_scenario_name(name)
        except InvalidInput:
            bad_names.setdefault(original, where)
            return None
        found = scenarios.get(name)
        if found is None:
            found = scenarios[name] = InfraScenario(name, original)
        elif found.original != original:
            raise SourceError(f"scenarios {found.original!r} and {original!r} would both become {name!r}")
        return found

    stores = sorted(records.glob("*.sqlite3")) if records.is_dir() else []
    with tempfile.TemporaryDirectory(prefix="reef-import-") as tmp:
        for store in stores:
            for row in _read_store(store, Path(tmp), renames):
                target = scenario(row[0], str(store))
                if target is not None:
                    target.rows.append(row[1])
    if artifacts.is_dir():
        repo = ForeignRepo(artifacts)
        try:
            _read_chains(repo, scenario)
        finally:
            repo.close()
    if bad_names:
        shown = ", ".join(f"{name!r} (in {where})" for name, where in sorted(bad_names.items()))
        example = next(iter(sorted(bad_names)))
        raise SourceError(
            f"scenario names not valid in reef: {shown}; a name is 1-64 letters, digits, '.', '_' or "
            f"'-'. Rename with --scenario-map, e.g. --scenario-map '{example}=NEW'"
        )
    for found in scenarios.values():
        found.rows.sort(key=lambda r: (r.store.name, r.sequence))
    return dict(sorted(scenarios.items()))


# -- the record stores ------------------------------------------------------------------


def _read_store(store: Path, tmp: Path, renames: Mapping[str, str]) -> list[tuple[str, Row]]:
    """The rows of one store, from a copy; each as (original scenario, row)."""
    copy = tmp / store.name
    try:
        shutil.copyfile(store, copy)
        for suffix in ("-wal", "-shm"):
            side = store.with_name(store.name + suffix)
            if side.exists():
                shutil.copyfile(side, copy.with_name(copy.name + suffix))
    except OSError as exc:
        raise SourceError(f"{store}: cannot be read: {exc.strerror or exc}") from exc
    try:
        connection = sqlite3.connect(copy)
        try:
            connection.execute("PRAGMA query_only = ON")
            columns = {r[1] for r in connection.execute("PRAGMA table_info(agent_record)")}
            if not columns:
                raise SourceError(f"{store}: no agent_record table: not a reef-infra record store")
            artifact = "artifact_json" if "artifact_json" in columns else "NULL"
            rows = connection.execute(
                "SELECT sequence, agent_record_id, scenario, request_type, payload_json, created_at, "
                f"references_json, {artifact} FROM agent_record ORDER BY sequence"
            ).fetchall()
        finally:
            connection.close()
    except sqlite3.DatabaseError as exc:
        raise SourceError(f"{store}: {exc}") from exc
    return [_row(store, raw) for raw in rows]


def _row(store: Path, raw: tuple[Any, ...]) -> tuple[str, Row]:
    sequence, key, scenario, request_type, payload_json, created_at, references_json, artifact_json = raw
    where = f"{store}: row sequence {sequence} (id {key})"

    def fail(what: str) -> SourceError:
        return SourceError(f"{where}: {what}")

    try:
        source_id(key)
    except InvalidInput as exc:
        raise fail(exc.message) from None
    if not isinstance(scenario, str) or not scenario:
        raise fail("scenario is empty")
    if request_type not in _TYPES:
        raise fail(f"request_type {request_type!r} is not one of {', '.join(_TYPES)}")
    payload = _json(payload_json, "payload_json", fail)
    if not isinstance(payload, dict):
        raise fail("payload_json is not a JSON object")
    if (
        isinstance(created_at, bool)
        or not isinstance(created_at, (int, float))
        or not math.isfinite(created_at)
    ):
        raise fail(f"created_at {created_at!r} is not a time")
    references = _json(references_json or "[]", "references_json", fail)
    if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        raise fail("references_json is not a list of ids")
    release = None
    if artifact_json is not None:
        artifact = _json(artifact_json, "artifact_json", fail)
        if artifact is not None and not isinstance(artifact, dict):
            raise fail("artifact_json is not a JSON object")
        found = (artifact or {}).get("release_id")
        release = found if isinstance(found, str) and found else None
    row = Row(
        store=store,
        sequence=int(sequence),
        id=key,
        scenario=scenario,
        request_type=request_type,
        payload=payload,
        created_at=float(created_at),
        references=tuple(references),
        release_sha=release,
    )
    return scenario, row


def _json(text: Any, column: str, fail: Any) -> Any:
    if not isinstance(text, str):
        raise fail(f"{column} is not text")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise fail(f"{column} is not JSON ({exc})") from None


# -- the artifact repository ------------------------------------------------------------


def _scenario_of_ref(tail: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(tail + "=" * (-len(tail) % 4)).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def _read_chains(repo: ForeignRepo, scenario: Any) -> None:
    reader = _Chains(repo)
    chains = repo.refs(_SCENARIO_REFS)
    on_chains: set[str] = set()
    for tail, tip in sorted(chains.items()):
        original = _scenario_of_ref(tail)
        if original is None:  # a chain of a scenario whose name cannot be read: never dropped quietly
            raise SourceError(
                f"{repo.path}: {_SCENARIO_REFS}{tail} names no scenario reef can read (not base64url of a "
                "UTF-8 name); rename or remove that ref in the original's artifacts.git, then import again"
            )
        target = scenario(original, f"{repo.path} {_SCENARIO_REFS}{tail}")
        commits = reader.chain(tip, original)
        on_chains.update(sha for sha, _ in commits)
        if target is None:
            continue
        target.releases = reader.releases(commits)
    for sha in repo.refs(_RELEASE_REFS).values():  # published or waiting; waiting ones are off-chain
        if sha in on_chains:
            continue
        record = reader.record(sha)
        original = record.get("scenario") if record else None
        if isinstance(original, str):
            target = scenario(original, f"{repo.path} {_RELEASE_REFS}{sha}")
            if target is not None:
                target.pending += 1


class _Chains:
    """Walks chains and converts release trees, remembering what it read."""

    def __init__(self, repo: ForeignRepo) -> None:
        self.repo = repo
        self._meta: dict[str, dict[str, Any] | None] = {}
        self._entries: dict[str, tuple[list[Entry], list[str]]] = {}

    def meta(self, sha: str) -> dict[str, Any] | None:
        if sha not in self._meta:
            raw = self.repo.file(sha, _ARTIFACT)
            try:
                value = json.loads(raw) if raw is not None else None
            except ValueError as exc:
                raise SourceError(f"{self.repo.path}: {sha}:{_ARTIFACT} is not JSON ({exc})") from None
            self._meta[sha] = value if isinstance(value, dict) else None
        return self._meta[sha]

    def record(self, sha: str) -> dict[str, Any] | None:
        meta = self.meta(sha) or {}
        record = (meta.get("metadata") or {}).get("scenario_commit_record")
        return record if isinstance(record, dict) else None

    def chain(self, tip: str, original: str) -> list[tuple[str, dict[str, Any]]]:
        """The scenario's releases, oldest first: first parents from its tip down to its creation
        (the fork), never into the release it was forked from."""
        commits: list[tuple[str, dict[str, Any]]] = []
        sha: str | None = tip
        while sha is not None and len(commits) < 100_000:
            record = self.record(sha)
            if record is None or record.get("scenario") != original:
                break
            commits.append((sha, record))
            if ((self.meta(sha) or {}).get("source") or {}).get("kind") == "fork":
                break
            parents = self.repo.commit(sha).parents
            sha = parents[0] if parents else None
        return commits[::-1]

    def releases(self, commits: list[tuple[str, dict[str, Any]]]) -> list[InfraRelease]:
        out: list[InfraRelease] = []
        by_sha: dict[str, tuple[int, InfraRelease]] = {}
        for number, (sha, record) in enumerate(commits, 1):
            operation, ask, verdict = self._describe(sha, record)
            target = record.get("rollback_target_release_id")
            if operation in ("rollback", "promote") and isinstance(target, str) and target in by_sha:
                earlier_number, earlier = by_sha[target]
                files, notes = earlier.files, earlier.notes  # the same tree, as reef's rollback does
                ask, verdict = earlier.ask, f"{operation} to v{earlier_number}"
            else:
                entries, found = self.entries(sha)
                notes = tuple(found)
                learned = {"kind": "ask"} if operation == "evolve" else None
                requires = _requires(record) if operation == "evolve" else {}
                manifest = Manifest(
                    version=number, ask=ask, requires=requires, verdict=verdict, learned_from=learned
                )
                files = HarnessTree.of(entries, manifest).files()
            release = InfraRelease(
                sha=sha,
                operation=operation,
                ask=ask,
                verdict=verdict,
                time=self.repo.commit(sha).time,
                files=files,
                notes=notes,
            )
            by_sha[sha] = (number, release)
            out.append(release)
        if len(out) == 1 and out[0].operation == "creation" and len(out[0].files) == 1:
            return []  # only the creation, and empty (manifest alone): nothing worth a release
        return out

    def _describe(self, sha: str, record: dict[str, Any]) -> tuple[str, str | None, str | None]:
        source = (self.meta(sha) or {}).get("source") or {}
        found = record.get("metrics")
        metrics: dict[str, Any] = found if isinstance(found, dict) else {}
        request = metrics.get("training_request")
        ask = request.get("text") if isinstance(request, dict) else None
        selection = metrics.get("selection")
        policy = selection.get("policy") if isinstance(selection, dict) else None
        verdict = (
            f"selected by reef-infra ({policy})" if isinstance(policy, str) else "selected by reef-infra"
        )
        operation = str(record.get("operation") or "training")
        if source.get("kind") == "fork":
            return "creation", None, "created by reef-infra"
        if operation in ("rollback", "promote"):
            target = record.get("rollback_target_release_id")
            return operation, None, f"{operation} to reef-infra {str(target)[:12]}"
        if operation != "training":
            raise SourceError(f"{self.repo.path}: release {sha} has unknown operation {operation!r}")
        if isinstance(ask, str) and ask.strip():
            return "evolve", ask, verdict
        return "training", None, verdict

    def entries(self, sha: str, depth: int = 0) -> tuple[list[Entry], list[str]]:
        """The adapter-neutral entries behind a release's tree.  A fork holds the tree it was
        forked from and a rollback its target's (their own ``algorithm_state`` is the state
        before the step, not what they serve); the seed release has no state, so its rendered
        files are mapped back."""
        if sha in self._entries:
            return self._entries[sha]
        if depth > 1000:
            raise SourceError(f"{self.repo.path}: release {sha} refers back to itself")
        meta = self.meta(sha) or {}
        record = self.record(sha) or {}
        source = meta.get("source") or {}
        follow = None
        if source.get("kind") == "fork" and isinstance(source.get("release_id"), str):
            follow = source["release_id"]
        elif record.get("operation") in ("rollback", "promote"):
            follow = record.get("rollback_target_release_id")
        state = record.get("algorithm_state")
        if isinstance(follow, str) and follow:
            found = self.entries(follow, depth + 1)
        elif isinstance(state, dict) and isinstance(state.get("entries"), list):
            found = _convert(state["entries"], f"release {sha[:12]}")
        else:
            found = _from_files(self.repo.files(sha), f"release {sha[:12]}")
        self._entries[sha] = found
        return found


def _requires(record: dict[str, Any]) -> dict[str, str]:
    """The ask's requirements (``[{name, kind, check?, prompt?}]``) as reef's ``{name: text}``."""
    request = (record.get("metrics") or {}).get("training_request") or {}
    out = {}
    for item in request.get("requires") or []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            text = item.get("check") or item.get("prompt") or item.get("kind") or ""
            out[item["name"]] = str(text)
    return out


def _name(raw: Any, where: str, notes: list[str]) -> str | None:
    if not isinstance(raw, str) or not raw:
        notes.append(f"{where}: an entry without a name, left out")
        return None
    if _NAME.match(raw):
        return raw
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:64]
    if not name:
        notes.append(f"{where}: entry {raw!r} has no usable name, left out")
        return None
    notes.append(f"{where}: entry {raw!r} renamed {name!r} (reef names are lowercase letters, digits, '-')")
    return name


def _convert(entries: list[Any], where: str) -> tuple[list[Entry], list[str]]:
    """reef-infra's entries (``{id, name: <kind>, config}``) as reef entries."""
    out: list[Entry] = []
    notes: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict):
            notes.append(f"{where}: an entry that is not an object, left out")
            continue
        kind, config, ident = entry.get("name"), entry.get("config"), entry.get("id")
        config = config if isinstance(config, dict) else {}
        if kind == "skill" and isinstance(config.get("text"), str):
            name, content, ours = _name(config.get("name") or ident, where, notes), config["text"], "skill"
        elif kind == "rules" and isinstance(config.get("text"), str):
            name, content, ours = _name(ident, where, notes), config["text"], "rule"
        elif kind == "agent_command" and isinstance(config.get("text"), str):
            name, content, ours = _name(config.get("name") or ident, where, notes), config["text"], "command"
        elif kind == "code_extension" and isinstance(config.get("code"), str):
            name, content, ours = (
                _name(config.get("name") or ident, where, notes),
                config["code"],
                "extension",
            )
        elif kind == "config":
            text = json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
            name, content, ours = _name(ident, where, notes), text, "config"
        else:
            notes.append(f"{where}: {kind} entry {ident!r} has no reef equivalent, left out")
            continue
        if name is not None:
            out.append(Entry(ours, name, content))
    return out, notes


def _from_files(files: dict[str, bytes], where: str) -> tuple[list[Entry], list[str]]:
    """A tree without entries (the original's seed), its rendered files mapped back: skills by
    their folder, empty JSON settings dropped, anything else left out with a note."""
    out: list[Entry] = []
    notes: list[str] = []
    for path, data in sorted(files.items()):
        if path in (_ARTIFACT, ".gitattributes"):
            continue
        match = _SKILL_PATH.match(path)
        if match is not None:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                notes.append(f"{where}: {path} is not UTF-8 text, left out")
                continue
            name = _name(match.group(1), where, notes)
            if name is not None:
                out.append(Entry("skill", name, text))
        elif path.endswith(".json") and data.strip() in (b"", b"{}", b"[]"):
            continue
        else:
            notes.append(f"{where}: {path} has no reef equivalent, left out")
    return out, notes
