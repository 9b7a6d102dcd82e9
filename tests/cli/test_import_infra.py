"""``reef import --from-reef-infra``: a state directory made by a real reef-infra 0.1.3
(tests/fixtures/reef-infra-0.1.3) migrated into reef, checked with the git CLI and SQLite."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import tarfile
from pathlib import Path

import httpx
import pytest

from recipes.reefine.recipe import ReefineRecipe
from reef_core.learning import RecipeContext
from reef_core.store import Store, StoreOptions, build_tree
from tests.cli.support import reef
from tests.conftest import git
from tests.daemon.conftest import RunningReef

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "reef-infra-0.1.3" / "reef-infra-0.1.3-fixture.tar.gz"
)
H1_STORE = "33112ee14ee469c3eb52fe90322ec81dd404a0093d565a6d71ce77cbc8124e3b.sqlite3"
OTHER_STORE = "d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa.sqlite3"
COLUMNS = "agent_record_id, scenario, request_type, payload_json, created_at, references_json"
H1_LINE = "h1: 3 records, 2 reports, 2 asks, 4 releases (v1 creation, v2 evolve, v3 evolve, v4 rollback)"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(tmp_path / "src", filter="data")
    return tmp_path / "src" / "reef-infra-state"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def run(source: Path, state: Path, *extra: str):
    return reef("import", "--from-reef-infra", str(source), "--state-dir", str(state), *extra)


def rows(store: Path) -> list[tuple]:
    with sqlite3.connect(store) as db:
        return db.execute(
            "SELECT sequence, agent_record_id, request_type FROM agent_record ORDER BY sequence"
        ).fetchall()


def repo(state: Path, name: str) -> str:
    return str(state / "scenarios" / f"{name}.git")


def items(state: Path, name: str, kind: str) -> list[dict]:
    reader = Store(state).reader(name)
    return [{"id": i.id, **i.data} for i in reader.data.iter_items([kind])]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root``, path → sha256 (empty when root does not exist)."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def test_every_row_becomes_an_item_that_git_log_shows_by_its_original_id(source, state):
    result = run(source, state)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == H1_LINE.replace("h1: ", "h1: wrote ") + "; 0 pending skipped"
    log = git("-C", repo(state, "h1"), "log", "data").stdout
    for _, original, _ in rows(source / "agent-record" / H1_STORE):
        assert f"imported {original}" in log and f"Reef-Source-Id: {original}" in log
    other = git("-C", repo(state, "other"), "log", "data").stdout
    assert "Reef-Source-Id: f191f2dee4464353931869c9befb5ccf" in other
    counts = next(line for line in log.splitlines() if "Reef-Counts" in line)
    assert counts.strip() == "Reef-Counts: record=3 report=2 ask=2"
    for name in ("h1", "other"):
        git("-C", repo(state, name), "fsck", "--strict")


def test_records_keep_their_time_tags_answer_and_release(source, state):
    assert run(source, state).exit_code == 0
    tagged, streamed, sample = items(state, "h1", "record")
    assert tagged["idempotency_key"] == "387db437296a4c619aa9a7396aa57e27"
    assert tagged["tags"] == {"session": "s1"} and "metadata" not in tagged["request"]
    assert tagged["release"] == "v1"  # artifact_json.release_id was the creation's sha
    assert tagged["imported"] == {
        "from": "reef-infra",
        "agent_record_id": "387db437296a4c619aa9a7396aa57e27",
        "created_at": "2026-12-01T19:51:39.232Z",
        "release_id": "8b63f381b4e4a4e394438c14eb864987b7162160",
        "store": H1_STORE,
        "sequence": 1,
    }
    assert streamed["stream"] is True
    assert streamed["response"]["choices"][0]["message"]["content"] == "hello"  # the SSE put together
    assert sample["idempotency_key"] == "sample-1" and sample["release"] is None
    assert items(state, "other", "record")[0]["release"] == "v1"  # its own chain's v1


def test_reports_reference_the_receipts_the_records_became(source, state):
    assert run(source, state).exit_code == 0
    records = {r["idempotency_key"]: r["id"] for r in items(state, "h1", "record")}
    first, second = items(state, "h1", "report")
    assert first["references"] == [records["387db437296a4c619aa9a7396aa57e27"]]
    assert (first["score"], first["feedback"], first["metadata"]) == (0.0, "bad", {"k": "v"})
    assert second["references"] == [records["sample-1"]] and second["idempotency_key"] == "score-1"
    assert "unresolved_references" not in second["imported"]


def test_asks_are_settled_and_reefine_queues_only_new_ones(source, state, tmp_path):
    assert run(source, state).exit_code == 0
    asks = items(state, "h1", "ask")
    assert [(a["text"], a["session"], a["release_id"]) for a in asks] == [
        ("write tests first", "sess-1", "v1"),
        ("answer briefly", "sess-1", "v2"),
    ]
    assert all(a["imported"]["settled"] is True for a in asks)
    recipe = ReefineRecipe(RecipeContext(cache_dir=tmp_path / "cache", config={"health": False}))
    scenario = Store(state, StoreOptions(pack_every=0)).open("h1")
    try:
        assert recipe.next_batch(scenario) is None  # neither migrated ask is acted on again
        fresh = scenario.append_sync("ask", {"text": "be terse", "session": None, "release_id": None})
        batch = recipe.next_batch(scenario)
        assert batch is not None and batch.item_ids == (fresh,)
    finally:
        scenario.close()


def test_the_release_chain_becomes_v1_to_v4_with_tags_and_converted_trees(source, state):
    assert run(source, state).exit_code == 0
    path = repo(state, "h1")
    subjects = git("-C", path, "log", "--format=%s|%ct", "release").stdout.splitlines()
    assert subjects == [
        'v4 rollback: "write tests first"|1796154700',
        'v3 evolve: "answer briefly"|1796154699',
        'v2 evolve: "write tests first"|1796154699',
        "v1 creation|1796154698",
    ]
    assert git("-C", path, "tag").stdout.split() == ["v1", "v2", "v3", "v4"]
    sources = git(
        "-C", path, "log", "--format=%(trailers:key=Reef-Source,valueonly)", "release"
    ).stdout.split()
    assert sources[1::2] == [
        "531d31c364eb1ce36cc19c0c17e8f59aeb22fb18",
        "a4f7689857646f3f4f6db9442dfe1643ca5668f4",
        "ed741b8117c52e31ab50ebd80b6b5a2debc9c372",
        "8b63f381b4e4a4e394438c14eb864987b7162160",
    ]

    def tree(rev: str) -> list[str]:
        return git("-C", path, "ls-tree", "-r", "--name-only", rev).stdout.split()

    skill = "skills/{}/SKILL.md".format
    assert tree("v1") == ["reef-release.json", skill("answer-style")]
    assert tree("v3") == [
        "reef-release.json",
        skill("answer-style"),
        skill("skill-answerbriefly"),
        skill("skill-writetestsfirst"),
    ]
    # a rollback serves its target's tree again, as reef's own rollback does
    assert (
        git("-C", path, "rev-parse", "v4^{tree}").stdout == git("-C", path, "rev-parse", "v2^{tree}").stdout
    )
    assert git("-C", path, "show", f"v3:{skill('skill-answerbriefly')}").stdout == (
        "# skill-answerbriefly\n\nanswer briefly\n"
    )
    manifest = json.loads(git("-C", path, "show", "v3:reef-release.json").stdout)
    assert manifest["version"] == 3 and manifest["ask"] == "answer briefly"
    assert git("-C", path, "cat-file", "-t", "v4").stdout.strip() == "tag"
    # other was forked from h1's head: its creation serves that tree
    assert git("-C", repo(state, "other"), "ls-tree", "-r", "--name-only", "v1").stdout.split() == [
        "reef-release.json",
        skill("answer-style"),
        skill("skill-writetestsfirst"),
    ]


def test_a_dry_run_prints_the_counts_and_writes_nothing(source, state):
    before = snapshot(source)
    result = run(source, state, "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        H1_LINE + "; 0 pending skipped",
        "other: 1 record, 0 reports, 0 asks, 1 release (v1 creation); 0 pending skipped",
        "dry run: nothing was written",
    ]
    assert not state.exists() and snapshot(source) == before
    assert run(source, state).exit_code == 0  # and after an import, a dry run changes nothing either
    imported = snapshot(state)
    again = run(source, state, "--dry-run")
    assert "h1: 0 records, 0 reports, 0 asks, 0 releases; 0 pending skipped; already imported: 7 rows" in (
        again.stdout
    )
    assert snapshot(state) == imported and snapshot(source) == before


def test_a_second_run_adds_nothing(source, state):
    assert run(source, state).exit_code == 0
    counts = {n: git("-C", repo(state, n), "rev-list", "--count", "--all").stdout for n in ("h1", "other")}
    result = run(source, state)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(
        "h1: nothing new; 0 pending skipped; already imported: 7 rows, 4 releases"
    )
    assert {n: git("-C", repo(state, n), "rev-list", "--count", "--all").stdout for n in counts} == counts


def test_a_store_that_is_not_a_database_is_named_and_nothing_is_written(source, state):
    (source / "agent-record" / "garbage.sqlite3").write_bytes(b"not sqlite at all " * 100)
    result = run(source, state)
    assert result.exit_code == 1
    assert f"{source / 'agent-record' / 'garbage.sqlite3'}: file is not a database" in result.stderr
    assert not state.exists()


def test_a_chain_ref_that_names_no_readable_scenario_is_named_and_nothing_is_written(source, state):
    artifacts = source / "artifacts.git"
    tip = git("--git-dir", str(artifacts), "for-each-ref", "--format=%(objectname)", "refs/reef/scenarios/")
    git("--git-dir", str(artifacts), "update-ref", "refs/reef/scenarios/__4", tip.stdout.split()[0])
    result = run(source, state)
    assert result.exit_code == 1
    assert "refs/reef/scenarios/__4 names no scenario reef can read" in result.stderr
    assert not state.exists()


def test_a_row_that_is_not_json_is_named_by_file_and_row_and_nothing_is_written(source, state):
    store = source / "agent-record" / H1_STORE
    with sqlite3.connect(store) as db:
        db.execute("UPDATE agent_record SET payload_json = '{oops' WHERE sequence = 3")
    result = run(source, state)
    assert result.exit_code == 1
    assert f"{store}: row sequence 3 (id 000047f67fa24431b33bf53f4e980622): payload_json is not JSON" in (
        result.stderr
    )
    assert not state.exists()


def test_a_store_in_wal_mode_is_read_from_a_copy(source, state):
    """Rows still in the -wal file are imported; the user's files stay as they were."""
    store = source / "agent-record" / OTHER_STORE
    db = sqlite3.connect(store)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute(
        f"INSERT INTO agent_record ({COLUMNS}) "
        "VALUES ('late-1', 'other', 'report', '{\"score\":1.0}', 1796154702.0, '[]')"
    )
    db.commit()
    before = snapshot(source)
    try:
        result = run(source, state)
        after = snapshot(source)  # before this connection's close checkpoints the -wal
    finally:
        db.close()
    assert result.exit_code == 0, result.output
    assert [r["idempotency_key"] for r in items(state, "other", "report")] == ["late-1"]
    assert after == before and any(name.endswith("-wal") for name in before)


def test_an_invalid_scenario_name_suggests_scenario_map(source, state):
    with sqlite3.connect(source / "agent-record" / OTHER_STORE) as db:
        db.execute("UPDATE agent_record SET scenario = 'other store!'")
    result = run(source, state)
    assert result.exit_code == 1
    assert "'other store!'" in result.stderr and "--scenario-map 'other store!=NEW'" in result.stderr
    assert not state.exists()
    mapped = run(source, state, "--scenario-map", "other store!=other-store")
    assert mapped.exit_code == 0, mapped.output
    assert "other-store (was other store!): wrote 1 record" in mapped.stdout
    assert items(state, "other-store", "record")[0]["idempotency_key"] == "f191f2dee4464353931869c9befb5ccf"


def test_a_scenario_a_daemon_holds_stops_the_import_before_anything_is_written(source, state):
    held = Store(state, StoreOptions(pack_every=0)).open("h1", create=True)
    try:
        result = run(source, state)
    finally:
        held.close()
    assert result.exit_code == 3
    assert "already open for writing" in result.stderr and "stop the daemon" in result.stderr
    assert git("-C", repo(state, "h1"), "rev-list", "--all").stdout == ""
    assert not Path(repo(state, "other")).exists()


def test_a_scenario_with_other_releases_is_refused(source, state):
    scenario = Store(state, StoreOptions(pack_every=0)).open("h1", create=True)
    try:
        tree = build_tree(scenario.handle.repo, {"rules/a.md": b"A\n"})
        scenario.releases.publish(tree, expected=None, operation="creation")
    finally:
        scenario.close()
    result = run(source, state)
    assert result.exit_code == 1 and "--scenario-map 'h1=NEW'" in result.stderr
    assert not Path(repo(state, "other")).exists()


def test_a_long_import_writes_in_groups_and_reports_find_records_of_their_own_group(source, state):
    """600 rows: 300 exchanges each judged by the next row, across group boundaries (256)."""
    schema = sqlite3.connect(source / "agent-record" / H1_STORE)
    ddl = [sql for (sql,) in schema.execute("SELECT sql FROM sqlite_master WHERE name = 'agent_record'")]
    schema.close()
    big = source / "agent-record" / (hashlib.sha256(b"big").hexdigest() + ".sqlite3")
    with sqlite3.connect(big) as db:
        db.execute(ddl[0])
        for n in range(300):
            payload = {"messages": [{"role": "user", "content": f"q{n}"}], "response": {"choices": []}}
            db.execute(
                f"INSERT INTO agent_record ({COLUMNS}) VALUES (?, 'big', 'inference', ?, ?, '[]')",
                (f"r{n}", json.dumps(payload), 1796000000.0 + n),
            )
            db.execute(
                f"INSERT INTO agent_record ({COLUMNS}) VALUES (?, 'big', 'report', ?, ?, ?)",
                (
                    f"s{n}",
                    json.dumps({"references": [f"r{n}"], "score": n % 2}),
                    1796000000.5 + n,
                    f'["r{n}"]',
                ),
            )
    result = run(source, state)
    assert result.exit_code == 0, result.output
    assert "big: wrote 300 records, 300 reports, 0 asks, 0 releases" in result.stdout
    receipts = {r["idempotency_key"]: r["id"] for r in items(state, "big", "record")}
    reports = items(state, "big", "report")
    assert len(receipts) == 300 and len(reports) == 300
    assert all(r["references"] == [receipts["r" + r["idempotency_key"][1:]]] for r in reports)
    assert git("-C", repo(state, "big"), "rev-list", "--count", "data").stdout.strip() == "600"


def test_a_daemon_on_the_migrated_state_shows_the_asks_settled_and_serves_the_chain(source, tmp_path):
    assert run(source, tmp_path / "served" / "state").exit_code == 0
    daemon = RunningReef(tmp_path / "served", "--inference.upstream-url", "http://127.0.0.1:9").start()
    try:
        headers = {"x-reef-scenario": "h1"}
        asks = items(tmp_path / "served" / "state", "h1", "ask")
        progress = httpx.get(f"{daemon.url}/reef/harness/requests/{asks[0]['id']}/progress", headers=headers)
        assert progress.json()["state"] == "settled"
        assert "reef-infra" in progress.json()["result"]["verdict"]
        versions = httpx.get(f"{daemon.url}/reef/harness/versions", headers=headers).json()["versions"]
        assert [(v["artifact_version"], v["operation"]) for v in versions] == [
            ("v1", "creation"),
            ("v2", "evolve"),
            ("v3", "evolve"),
            ("v4", "rollback"),
        ]
    finally:
        daemon.stop()
