"""``reef report SCENARIO RECEIPT… --score S [--feedback T]``: feedback on answers, by receipt."""

from __future__ import annotations

import math

import typer

from reef_cli import output as out
from reef_cli.output import JsonOption
from reef_cli.sources import UrlOption, connect
from reef_core.errors import InvalidInput
from reef_core.ids import parse_item_id

__all__ = ["report"]


def report(
    scenario: str = typer.Argument(..., help="The scenario the answers came from."),
    receipts: list[str] = typer.Argument(..., help="The receipts (rec_…) this feedback is about."),
    score: float | None = typer.Option(None, "--score", help="A number: how good the answer was."),
    feedback: str | None = typer.Option(None, "--feedback", help="What was good or wrong, in words."),
    key: str | None = typer.Option(
        None, "--id", help="Your own id for this report: sending it again returns the stored one."
    ),
    url: str = UrlOption,
    as_json: bool = JsonOption,
) -> None:
    """Attach a score and/or feedback to one or more receipts."""
    for i, receipt in enumerate(receipts):
        if parse_item_id(receipt, field="receipt").kind != "record":
            raise InvalidInput(f"{receipt} is not a receipt (rec_…)", field=f"references[{i}]")
    if score is None and feedback is None:
        raise InvalidInput("a report needs --score or --feedback", field="score")
    if score is not None and not math.isfinite(score):
        raise InvalidInput("--score must be a finite number", field="score")
    with connect(url) as client:
        result = client.report(scenario, receipts, score=score, feedback=feedback, agent_record_id=key)
    verb = "reported" if result.get("created", True) else "already reported as"
    line = f"{verb} {result['agent_record_id']} on {', '.join(receipts)} in {scenario}"
    out.output.done(result, line, as_json=as_json)
