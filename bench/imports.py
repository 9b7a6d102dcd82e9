"""Import benchmark: how fast a dataset or an original Reef's history gets into reef.

    python bench/imports.py [--records 10000] [--batch 128]

Each way in, the same records (a chat exchange of about 300 bytes, every fourth followed by a
report on it), timed in this run against the baseline of the store writing the same items
directly (``Scenario.append_group``, one group per batch: what every way in ends with):

* ``store``: the baseline, items made by ``reef_core.daemon.imported`` and committed in groups;
* ``route``: ``POST /reef/records/batch`` to a ``reef serve`` over loopback, batches of
  ``--batch``, one keep-alive connection (validation, screening, idempotency keys, the HTTP);
* ``reef-client``: the original Reef's own importer, ``python -m reef_client import``, as a
  user runs it (its own progress file and checksum pass included);
* ``migrate``: ``reef import --from-reef-infra`` of a reef-infra SQLite store holding the same
  rows (the copy, the checks of every row, the writes), exec to exit.

Printed: records per second and the time against the baseline.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reef_core.daemon.imported import inference_item, report_item  # noqa: E402
from reef_core.store import GroupItem, Store, StoreOptions  # noqa: E402
from tests.fakes.upstream import ScriptedUpstream  # noqa: E402

SCENARIO = "bench"
SCHEMA = """
CREATE TABLE agent_record (
  sequence INTEGER PRIMARY KEY AUTOINCREMENT, agent_record_id TEXT NOT NULL, scenario TEXT NOT NULL,
  request_type TEXT NOT NULL, payload_json TEXT NOT NULL, created_at REAL NOT NULL,
  references_json TEXT NOT NULL, artifact_json TEXT, body_bytes INTEGER DEFAULT '0' NOT NULL,
  UNIQUE (agent_record_id));
"""


def dataset(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        messages = [
            {"role": "user", "content": f"Why does test {i} fail after the refactor of module {i % 97}?"}
        ]
        answer = {"role": "assistant", "content": f"Test {i} imports the old name; rename it and rerun."}
        payload = {
            "model": "m",
            "messages": messages,
            "response": {"choices": [{"index": 0, "message": answer}]},
        }
        rows.append({"agent_record_id": f"sample-{i}", "request_type": "inference", "payload": payload})
        if i % 4 == 3:
            report = {"references": [f"sample-{i}"], "score": 1}
            rows.append({"agent_record_id": f"score-{i}", "request_type": "report", "payload": report})
    return rows


def batches(rows: list[dict], size: int) -> list[list[dict]]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def store_baseline(work: Path, rows: list[dict], size: int) -> float:
    store = Store(work / "store", StoreOptions(pack_every=0))
    with store.open(SCENARIO, create=True) as scenario:
        receipts: dict[str, str] = {}
        start = time.perf_counter()
        for group in batches(rows, size):
            items: list = []
            slots: dict[str, int] = {}  # a record's key -> its place in this group
            for row in group:
                key = row["agent_record_id"]
                if row["request_type"] == "inference":
                    slots[key] = len(items)
                    items.append(GroupItem(*inference_item(row["payload"], key=key)))
                else:
                    items.append(_report(row, receipts, slots))
            ids = scenario.append_group(items).result()
            receipts.update((row["agent_record_id"], i) for row, i in zip(group, ids, strict=True))
        return time.perf_counter() - start


def _report(row: dict, receipts: dict[str, str], slots: dict[str, int]):
    """A report built once the records of its group have their ids."""

    def build(issued: list[str]) -> GroupItem:
        def resolve(ref: str) -> str | None:
            return issued[slots[ref]] if ref in slots else receipts.get(ref)

        return GroupItem(*report_item(row["payload"], key=row["agent_record_id"], resolve=resolve))

    return build


def serve(work: Path, upstream: ScriptedUpstream) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [sys.executable, "-m", "reef_cli", "serve", "--reef.port", str(port)]
    command += ["--storage.state-dir", str(work / "daemon"), "--inference.upstream-url", upstream.url]
    daemon = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return daemon, url
        except httpx.HTTPError:
            time.sleep(0.05)
    raise SystemExit("reef serve did not start")


def route(url: str, rows: list[dict], size: int, scenario: str) -> float:
    with httpx.Client(base_url=url, headers={"x-reef-scenario": scenario}, timeout=120) as client:
        start = time.perf_counter()
        for group in batches(rows, size):
            answer = client.post("/reef/records/batch", json={"records": group})
            if answer.status_code != 200:
                raise SystemExit(f"batch refused: {answer.text[:300]}")
        return time.perf_counter() - start


def reef_client(url: str, work: Path, rows: list[dict], size: int, scenario: str) -> float:
    data = work / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    command = [sys.executable, "-m", "reef_client", "import", str(data), "--url", url, "--scenario", scenario]
    start = time.perf_counter()
    subprocess.run([*command, "--batch-size", str(size)], check=True, capture_output=True)
    return time.perf_counter() - start


def migrate(work: Path, rows: list[dict]) -> float:
    source = work / "reef-infra"
    (source / "agent-record").mkdir(parents=True)
    name = hashlib.sha256(SCENARIO.encode()).hexdigest() + ".sqlite3"
    with sqlite3.connect(source / "agent-record" / name) as db:
        db.executescript(SCHEMA)
        now = time.time() - len(rows)
        db.executemany(
            "INSERT INTO agent_record (agent_record_id, scenario, request_type, payload_json, created_at, "
            "references_json) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    row["agent_record_id"],
                    SCENARIO,
                    row["request_type"],
                    json.dumps(row["payload"], sort_keys=True, separators=(",", ":")),
                    now + n,
                    json.dumps(row["payload"].get("references", [])),
                )
                for n, row in enumerate(rows)
            ],
        )
    command = [sys.executable, "-m", "reef_cli", "import", "--from-reef-infra", str(source)]
    start = time.perf_counter()
    done = subprocess.run([*command, "--state-dir", str(work / "migrated")], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"reef import failed: {done.stdout}{done.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    rows = dataset(args.records)
    work = Path(tempfile.mkdtemp(prefix="reef-bench-imports-"))
    os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    try:
        results = {"store": store_baseline(work, rows, args.batch)}
        with ScriptedUpstream() as upstream:
            daemon, url = serve(work, upstream)
            try:
                results["route"] = route(url, rows, args.batch, "route")
                results["reef-client"] = reef_client(url, work, rows, args.batch, "client")
            finally:
                daemon.terminate()
                daemon.wait(30)
        results["migrate"] = migrate(work, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = results["store"]
    print(f"{len(rows)} items ({args.records} records and their reports), batches of {args.batch}")
    for name, seconds in results.items():
        print(
            f"  {name:12s} {seconds:7.2f} s  {len(rows) / seconds:8.0f} items/s  {seconds / base:5.2f}x store"
        )


if __name__ == "__main__":
    main()
