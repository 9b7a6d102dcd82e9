"""``reef export SCENARIO``: records joined with their reports, as JSONL for offline training.

One line per record that has an answer::

    {"id": "rec_…", "created_at": "…", "scenario": "…", "format": "openai", "model": "…",
     "release": "v3", "messages": [...], "system": …, "tools": [...],
     "answer": {"role": "assistant", ...},
     "reports": [{"id": "rep_…", "created_at": "…", "score": 1.0, "feedback": "…"}]}

``messages`` (and ``system``/``tools`` when the request had them) are the request as the
client sent it and ``answer`` is the assistant message it received, both in the client's own
format (``format``): ``messages + [answer]`` is an SFT example, and the scores make it RL data.
A Responses API record (``/v1/responses``) is given in chat form, ``format`` ``openai``: its
``instructions`` and ``input`` as messages, its tools as chat tools, its Response as the
assistant message.  Records without an answer (upstream errors, broken streams, embeddings)
are skipped and counted.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from reef_cli import output as out
from reef_cli.output import JsonOption
from reef_cli.sources import ScenarioArgument, Source, UrlOption, open_source
from reef_cli.state import StateDirOption
from reef_core.errors import InvalidInput, StoreError
from reef_core.ids import ItemId, parse_item_id
from reef_core.wire.responses_api import response_to_chat_message, responses_request_to_chat

__all__ = [
    "export",
    "export_lines",
    "since_cursor",
]


def export(
    scenario: str = ScenarioArgument,
    since: str | None = typer.Option(
        None,
        "--since",
        help="Only records after this id (rec_…, exclusive), or from this ISO time on "
        "(2025-01-31 or 2025-01-31T12:00:00Z; local time when no zone is given).",
    ),
    out_file: Path | None = typer.Option(None, "--out", "-o", help="Write to this file instead of stdout."),
    url: str = UrlOption,
    state_dir: Path | None = StateDirOption,
    as_json: bool = JsonOption,
) -> None:
    """Write records with their reports as JSONL, ready for SFT or RL."""
    cursor = since_cursor(since)
    source = open_source(url, state_dir)
    counts = {"records": 0, "reports": 0, "skipped": 0}
    if out_file is None:
        for line in export_lines(source, scenario, after=cursor, counts=counts):
            out.output.jsonl(line)
    else:
        _write_file(out_file, export_lines(source, scenario, after=cursor, counts=counts))
    summary = {"scenario": scenario, "out": str(out_file) if out_file else None, **counts}
    if as_json and out_file is not None:
        out.output.json(summary)
        return
    where = f" to {out_file}" if out_file else ""
    skipped = f" ({counts['skipped']} without an answer skipped)" if counts["skipped"] else ""
    out.output.errors.print(
        f"exported {counts['records']} records with {counts['reports']} reports{where}{skipped}",
        highlight=False,
    )


def _write_file(path: Path, lines: Iterator[dict[str, Any]]) -> None:
    """Written beside the target and renamed into place: a failed export leaves no half file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with out.output.errors.status("exporting…") as spinner, tmp.open("w", encoding="utf-8") as handle:
            for n, line in enumerate(lines, 1):
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
                if n % 500 == 0:
                    spinner.update(f"exporting… {n} records")
        os.replace(tmp, path)
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)


def since_cursor(since: str | None) -> str | None:
    """``--since`` as a data-branch cursor: an id as given, a time as the last id before it."""
    if since is None:
        return None
    text = since.strip()
    if text[:4] in ("rec_", "rep_", "ask_"):
        return str(parse_item_id(text, field="--since"))
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            f"--since {since!r} is neither a reef id (rec_…) nor an ISO time such as 2025-01-31T12:00",
            field="since",
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a time without a zone is the person's local time
    millis = int(moment.timestamp() * 1000)
    # ids sort by their millisecond prefix: everything at or after `millis` sorts after this one
    return str(ItemId(hex=f"{max(millis - 1, 0):012x}{'f' * 16}", kind="record"))


def export_lines(
    source: Source, scenario: str, *, after: str | None, counts: dict[str, int]
) -> Iterator[dict[str, Any]]:
    """The export, line by line; ``counts`` is kept up to date (records, reports, skipped)."""
    # a report always comes after the records it judges, so the reports after the cursor are
    # all the reports any exported record can have
    judged: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for report in source.items(scenario, ["report"], after=after):
        for ref in report.get("references") or []:
            judged[ref].append(
                {
                    "id": report["id"],
                    "created_at": report.get("created_at"),
                    "score": report.get("score"),
                    "feedback": report.get("feedback"),
                }
            )
    for record in source.items(scenario, ["record"], after=after):
        line = _line(scenario, record, judged.get(record["id"], []))
        if line is None:
            counts["skipped"] += 1
            continue
        counts["records"] += 1
        counts["reports"] += len(line["reports"])
        yield line


def _line(scenario: str, record: dict[str, Any], reports: list[dict[str, Any]]) -> dict[str, Any] | None:
    request = record.get("request")
    answer = _answer(record)
    if not isinstance(request, dict) or answer is None:
        return None
    form = record.get("client_format")
    if form == "responses":
        try:
            request = responses_request_to_chat(request, strict=False)
        except InvalidInput:
            return None
        form = "openai"
    line: dict[str, Any] = {
        "id": record["id"],
        "created_at": record.get("created_at"),
        "scenario": scenario,
        "format": form,
        "model": record.get("model"),
        "release": record.get("release"),
        "messages": request.get("messages") or [],
    }
    for key in ("system", "tools"):
        if request.get(key) is not None:
            line[key] = request[key]
    line["answer"] = answer
    line["reports"] = reports
    return line


def _answer(record: dict[str, Any]) -> dict[str, Any] | None:
    """The assistant message the client received, in its own format; None if there was none."""
    response = record.get("response")
    status = record.get("status")
    if (
        not isinstance(response, dict)
        or record.get("complete") is False
        or not (isinstance(status, int) and 200 <= status < 300)
    ):
        return None
    if record.get("client_format") == "responses":
        return response_to_chat_message(response)
    choices = response.get("choices")
    if isinstance(choices, list):  # OpenAI chat completion
        if choices and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict):
            return choices[0]["message"]
        return None
    content = response.get("content")
    if isinstance(content, list):  # Anthropic message
        return {"role": response.get("role", "assistant"), "content": content}
    return None
