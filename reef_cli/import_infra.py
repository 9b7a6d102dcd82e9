"""``reef import --from-reef-infra DIR``: migrate a state directory of the original Reef.

Two passes.  The first reads and checks everything (``infra_source.py``) and what reef already
holds, and writes nothing: any problem stops the import naming the file and row.  The second
writes each scenario directly into the state directory (no daemon may hold it): its releases,
oldest first, through the release chain (``Reef-Source: reef-infra <sha>``), then its rows in
their original order as records, reports and asks, 256 to a group commit.

Each item keeps its original id as its idempotency key and in a ``Reef-Source-Id`` trailer,
and where it came from under ``imported`` (time, store, row); reports' references are
translated to the receipts the records became; asks are marked settled, so no learner acts on
them again.  A rerun skips what is already there: rows by their key, releases by their source.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from reef_cli import output as out
from reef_cli.infra_source import InfraScenario, Row, SourceError, read_state
from reef_cli.output import JsonOption
from reef_cli.state import StateDirOption, open_store
from reef_core.daemon.asks import parse_ask
from reef_core.daemon.imported import SOURCE_TRAILER, inference_item, report_item
from reef_core.errors import InvalidInput, ScenarioLocked
from reef_core.store import GroupEntry, GroupItem, Scenario, Store, build_tree

__all__ = ["import_"]

GROUP = 256
_KINDS = {"inference": "records", "report": "reports", "train": "asks"}
_PLACEHOLDER = "rec_" + "0" * 28  # a well-formed receipt, for checking reports before ids exist


def import_(
    from_reef_infra: Path = typer.Option(
        ...,
        "--from-reef-infra",
        help="A state directory of the original Reef (reef-infra): holds agent-record/ and artifacts.git.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be written; write nothing."),
    scenario_map: list[str] = typer.Option(
        [], "--scenario-map", help="OLD=NEW: import scenario OLD as NEW (repeatable).", show_default=False
    ),
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Migrate the original Reef's records, reports, asks and releases into reef."""
    renames = _renames(scenario_map)
    source = read_state(from_reef_infra, renames)
    store = open_store(state_dir)
    plans = [_plan(store, scenario) for scenario in source.values()]
    if not dry_run:
        _write(store, plans)
    summary = [plan.summary() for plan in plans]
    if as_json:
        out.output.json({"dry_run": dry_run, "state_dir": str(store.state_dir), "scenarios": summary})
        return
    for plan in plans:
        out.output.console.print(plan.line(dry_run), highlight=False, markup=False)
        for note in plan.notes():
            out.output.console.print(f"  note: {note}", highlight=False, markup=False)
    if not plans:
        out.output.console.print(f"{from_reef_infra}: nothing to import", highlight=False, markup=False)
    elif dry_run:
        out.output.console.print("dry run: nothing was written", highlight=False)


def _renames(pairs: list[str]) -> dict[str, str]:
    renames = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise InvalidInput(f"--scenario-map {pair!r}: expected OLD=NEW", field="scenario_map")
        renames[old] = new
    return renames


@dataclass
class _Plan:
    """One scenario: what is there already and what the import adds."""

    scenario: InfraScenario
    exists: bool
    keys: dict[str, str]  # idempotency keys already on the data branch → item id
    records: dict[str, str]  # original ids of records already there → receipt
    releases_done: int  # releases of this chain reef already holds (a rerun)
    names: dict[str, str]  # original release sha → vN
    rows: list[Row] = field(default_factory=list)  # rows to write

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(_KINDS.values(), 0)
        for row in self.rows:
            counts[_KINDS[row.request_type]] += 1
        return counts

    def new_releases(self) -> list[str]:
        releases = self.scenario.releases
        return [f"v{n} {r.operation}" for n, r in enumerate(releases, 1)][self.releases_done :]

    def summary(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.name,
            "from": self.scenario.original,
            "exists": self.exists,
            **self.counts(),
            "releases": self.new_releases(),
            "already_imported": {
                "rows": len(self.scenario.rows) - len(self.rows),
                "releases": self.releases_done,
            },
            "pending_skipped": self.scenario.pending,
            "notes": self.notes(),
        }

    def line(self, dry_run: bool) -> str:
        counts = self.counts()
        releases = self.new_releases()
        shown = f" ({', '.join(releases)})" if releases else ""
        what = ", ".join(
            [*(_plural(n, kind[:-1]) for kind, n in counts.items()), _plural(len(releases), "release")]
        )
        name = self.scenario.name
        if name != self.scenario.original:
            name += f" (was {self.scenario.original})"
        if dry_run:
            line = f"{name}: {what}{shown}"
        elif any(counts.values()) or releases:
            line = f"{name}: wrote {what}{shown}"
        else:
            line = f"{name}: nothing new"
        line += f"; {self.scenario.pending} pending skipped"
        old_rows = len(self.scenario.rows) - len(self.rows)
        if old_rows or self.releases_done:
            line += (
                f"; already imported: {_plural(old_rows, 'row')}, {_plural(self.releases_done, 'release')}"
            )
        return line

    def notes(self) -> list[str]:
        seen: list[str] = []
        for release in self.scenario.releases[self.releases_done :]:
            seen += [n for n in release.notes if n not in seen]
        return seen


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _plan(store: Store, scenario: InfraScenario) -> _Plan:
    """Pass one for a scenario: compare with what reef holds, check every row; writes nothing."""
    name = scenario.name
    exists = store.exists(name)
    keys: dict[str, str] = {}
    records: dict[str, str] = {}
    done = 0
    if exists:
        reader = store.reader(name)
        try:
            chain = [r.source for r in reversed(list(reader.releases))]
            for item in reader.data.iter_items():
                key = item.data.get("idempotency_key")
                if isinstance(key, str) and key:
                    keys[key] = item.id
                    if item.kind == "record":
                        records[key] = item.id
        finally:
            reader.handle.close()
        wanted = [f"reef-infra {r.sha}" for r in scenario.releases]
        if chain != wanted[: len(chain)]:
            raise SourceError(
                f"scenario {name} already has {len(chain)} releases that are not this reef-infra "
                f"directory's chain for {scenario.original!r}: import it as another scenario with "
                f"--scenario-map '{scenario.original}=NEW'"
            )
        done = len(chain)
    names = {r.sha: f"v{n}" for n, r in enumerate(scenario.releases, 1)}
    plan = _Plan(scenario, exists, keys, records, done, names)
    seen: set[str] = set()
    known = set(records)
    for row in scenario.rows:
        if row.id in seen:
            raise SourceError(f"{row.where}: the id appears twice in scenario {scenario.original!r}")
        seen.add(row.id)
        if row.id in keys:
            continue
        _item(row, names, lambda ref: _PLACEHOLDER if ref in known else None)
        if row.request_type == "inference":
            known.add(row.id)
        plan.rows.append(row)
    return plan


def _item(row: Row, names: dict[str, str], resolve: Callable[[str], str | None]) -> GroupItem:
    """The reef item a row becomes; a row reef cannot take raises :class:`SourceError`."""
    when = (
        datetime.fromtimestamp(row.created_at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )
    imported: dict[str, Any] = {
        "from": "reef-infra",
        "agent_record_id": row.id,
        "created_at": when,
        "release_id": row.release_sha,
        "store": row.store.name,
        "sequence": row.sequence,
    }
    try:
        if row.request_type == "inference":
            release = names.get(row.release_sha) if row.release_sha else None
            kind, body, summary, trailers = inference_item(
                row.payload, key=row.id, release=release, imported=imported
            )
        elif row.request_type == "report":
            payload = {**row.payload, "references": _references(row)}
            kind, body, summary, trailers = report_item(
                payload, key=row.id, resolve=resolve, imported=imported, strict=False
            )
        else:
            kind, body, summary, trailers = _ask(row, names, imported)
    except InvalidInput as exc:
        raise SourceError(f"{row.where}: {exc.message}") from None
    return GroupItem(kind, body, summary, {**trailers, "Imported-At": when})


def _references(row: Row) -> list[Any]:
    """What a report judges: its payload's ``references`` (the column repeats them)."""
    found = row.payload.get("references", list(row.references))
    return found if isinstance(found, list) else [found]


def _ask(row: Row, names: dict[str, str], imported: dict[str, Any]) -> tuple[str, dict, str, dict]:
    """A train row as reef's ask: what the user asked for, settled (the original acted on it)."""
    payload = row.payload
    original = payload.get("release_id")
    ask = parse_ask(
        {
            "text": payload.get("text"),
            "session": payload.get("session") or None,
            "release_id": names.get(original) if isinstance(original, str) else None,
            "agent_record_id": row.id,
        }
    )
    origin = {**imported, "release_id": original, "settled": True}
    if payload.get("requires"):
        origin["requires"] = payload["requires"]
    body = {**ask.content(), "idempotency_key": row.id, "imported": origin}
    return "ask", body, f"{ask.summary()} imported {row.id}", {SOURCE_TRAILER: row.id}


# -- pass two -----------------------------------------------------------------------------


def _write(store: Store, plans: list[_Plan]) -> None:
    work = [p for p in plans if p.rows or p.releases_done < len(p.scenario.releases)]
    total = sum(len(p.rows) + len(p.scenario.releases) - p.releases_done for p in work)
    opened: dict[str, Scenario] = {}
    try:
        # existing scenarios first: one a daemon holds stops the import before anything is made
        for plan in sorted(work, key=lambda p: not p.exists):
            opened[plan.scenario.name] = _open(store, plan)
        with _progress(total) as advance:
            for plan in work:
                _write_scenario(opened[plan.scenario.name], plan, advance)
    finally:
        for scenario in opened.values():
            scenario.close()


def _open(store: Store, plan: _Plan) -> Scenario:
    try:
        return store.open(plan.scenario.name, create=not plan.exists)
    except ScenarioLocked as exc:
        raise ScenarioLocked(
            f"{exc.message}: reef import writes the state directory itself; stop the daemon "
            "(reef serve) and run the import again"
        ) from None


@contextlib.contextmanager
def _progress(total: int) -> Any:
    progress = Progress(
        TextColumn("importing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=out.output.errors,
        transient=True,
        disable=total < GROUP,
    )
    task = progress.add_task("import", total=total)
    with progress:
        yield lambda n: progress.advance(task, n)


def _write_scenario(scenario: Scenario, plan: _Plan, advance: Callable[[int], None]) -> None:
    chain = scenario.releases
    with scenario.publish_lock:
        for release in plan.scenario.releases[plan.releases_done :]:
            tip = chain.tip()
            tree = build_tree(scenario.handle.repo, release.files)
            chain.publish(
                tree,
                expected=tip.commit if tip else None,
                operation=release.operation,
                ask=release.ask,
                verdict=release.verdict,
                source=f"reef-infra {release.sha}",
                when=release.time,
            )
            advance(1)
    receipts = dict(plan.records)  # original id of a record → its receipt
    for at in range(0, len(plan.rows), GROUP):
        chunk = plan.rows[at : at + GROUP]
        ids = scenario.append_group([_entry(row, chunk, plan.names, receipts) for row in chunk]).result()
        receipts.update(
            {row.id: i for row, i in zip(chunk, ids, strict=True) if row.request_type == "inference"}
        )
        advance(len(chunk))


def _entry(row: Row, chunk: list[Row], names: dict[str, str], receipts: dict[str, str]) -> GroupEntry:
    """The row's item, made once the items before it in its group have ids (a report may
    judge a record of its own group)."""
    if row.request_type != "report":
        return _item(row, names, receipts.get)

    def build(earlier: list[str]) -> GroupItem:
        local = {r.id: i for r, i in zip(chunk, earlier, strict=False) if r.request_type == "inference"}
        return _item(row, names, lambda ref: local.get(ref) or receipts.get(ref))

    return build
