"""The page of one step: why (the ask), how it does in use, what changed (the diff), the
verdicts, how to use it.

A self-contained HTML document (inline CSS, no scripts, nothing fetched), so it opens from a
link in a terminal, a browser without network, or a saved file.  Links to pages carry a page
key (an HMAC of the scenario under a daemon token) instead of the token itself.
"""

from __future__ import annotations

import hashlib
import hmac
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from reef_core.harness.diff import diff_files
from reef_core.release.evidence import Evidence, Scores

__all__ = ["StepView", "page_key", "page_path", "render_step_page", "request_page_path"]


def page_key(token: str, scenario: str) -> str:
    """The key that opens the pages of ``scenario`` (read-only) for holders of ``token``."""
    return hmac.new(token.encode(), f"reef-page:{scenario}".encode(), hashlib.sha256).hexdigest()[:32]


def page_path(scenario: str, step: int | str, tokens: Sequence[str] = ()) -> str:
    """The link to step ``step``'s page (or release ``vN``'s)."""
    return _keyed(f"/reef/harness/releases/{step}/page", scenario, tokens)


def request_page_path(scenario: str, ask_id: str, tokens: Sequence[str] = ()) -> str:
    """The link to an ask's page: it waits while the step runs, then leads to the step page."""
    return _keyed(f"/reef/harness/requests/{ask_id}/page", scenario, tokens)


def _keyed(path: str, scenario: str, tokens: Sequence[str]) -> str:
    path += f"?scenario={quote(scenario)}"
    if tokens:
        path += f"&key={page_key(tokens[0], scenario)}"
    return path


@dataclass(frozen=True)
class StepView:
    scenario: str
    step: int
    status: str  # "selected", "pending", "rejected", "skipped", "rejected by a person"
    verdict: str
    ask: str | None
    record: Mapping[str, Any]
    base_name: str | None  # the release the candidate was built on
    release_name: str | None  # the release it became, if any
    base_files: Mapping[str, bytes]
    files: Mapping[str, bytes]
    #: how the release it became (and the candidate, as a canary) did in use (``step_evidence``)
    evidence: tuple[Evidence, ...] = ()


_CSS = """
body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1d2327}
h1{font-size:1.5rem} h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
.badge{display:inline-block;padding:.1rem .6rem;border-radius:1rem;color:#fff;font-weight:600}
.selected{background:#1a7f37}.pending{background:#9a6700}.rejected,.skipped{background:#cf222e}
table{border-collapse:collapse;width:100%} td,th{border:1px solid #ddd;padding:.3rem .5rem;text-align:left;
vertical-align:top} pre{background:#f6f8fa;padding:.75rem;overflow-x:auto;font-size:13px}
.add{color:#1a7f37}.del{color:#cf222e}.hunk{color:#8250df} blockquote{border-left:4px solid #ddd;margin:0;
padding-left:1rem} .pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _diff_html(view: StepView) -> str:
    diffs = diff_files(view.base_files, view.files)
    if not diffs:
        return "<p>No files changed.</p>"
    parts = []
    for diff in diffs:
        lines = []
        for line in diff.lines:
            css = "add" if line.startswith("+") else "del" if line.startswith("-") else ""
            css = "hunk" if line.startswith("@@") else css
            lines.append(f'<span class="{css}">{_e(line)}</span>' if css else _e(line))
        parts.append(
            f"<h3>{_e(diff.path)} <small>({diff.status}, +{diff.added} −{diff.removed})</small></h3>"
            f"<pre>{chr(10).join(lines)}</pre>"
        )
    return "".join(parts)


def _checks_html(record: Mapping[str, Any]) -> str:
    checks = record.get("checks") or []
    if not checks:
        return "<p>No checks ran (the step stopped before its candidate was complete).</p>"
    rows = "".join(
        f'<tr><td>{_e(c.get("name"))}</td><td class="{"pass" if c.get("passed") else "fail"}">'
        f"{'passed' if c.get('passed') else 'failed'}</td><td>{_e(c.get('detail', ''))}</td></tr>"
        for c in checks
    )
    return f"<table><tr><th>check</th><th>result</th><th>detail</th></tr>{rows}</table>"


def _learned_html(record: Mapping[str, Any]) -> str:
    """A usage step: the sessions, lessons and edits (``usage``), and the replay table."""
    used = record.get("usage")
    parts = []
    if isinstance(used, Mapping):
        rows = "".join(
            f"<tr><td>{_e(x.get('session'))}</td><td>{_e(x.get('score'))}</td><td>{_e(x.get('scored_by'))}</td></tr>"
            for x in used.get("sessions") or []
        )
        parts.append(
            f"<h2>Sessions learned from</h2><p>{_e(used.get('held_out_sessions', 0))} held-out session(s) "
            "are never learned from.</p><table><tr><th>session</th><th>score</th><th>scored by</th></tr>"
            f"{rows}</table>"
        )
        lessons = "".join(
            f"<li>{_e(x.get('instead'))}"
            + (f" <em>(dropped: {_e(x['dropped'])})</em>" if x.get("dropped") else "")
            + "<ul>"
            + "".join(
                f"<li>{_e(q.get('source'))}: “{_e(q.get('quote'))}”</li>" for q in x.get("evidence") or []
            )
            + "</ul></li>"
            for x in used.get("lessons") or []
        )
        parts.append(f"<h2>Lessons</h2><ol start=0>{lessons or '<li>none</li>'}</ol>")
        edits = "".join(
            f"<tr><td>{_e(x.get('op'))} {_e(x.get('target'))} {_e(x.get('id') or x.get('name') or '')}</td>"
            f"<td>{_e(x.get('text', ''))}</td><td>{_e(x.get('why', ''))}</td></tr>"
            for x in used.get("edits") or []
        )
        if edits:
            parts.append(
                f"<h2>Edits</h2><table><tr><th>edit</th><th>text</th><th>why</th></tr>{edits}</table>"
            )
        held = "".join(
            f"<li>{_e(x.get('text') or x.get('id'))}: {_e('; '.join(x.get('why_held') or []))}<ul>"
            + "".join(
                f"<li>{_e(q.get('source'))}: “{_e(q.get('quote'))}”</li>" for q in x.get("evidence") or []
            )
            + "</ul></li>"
            for x in used.get("held_for_a_person") or []
        )
        if held:
            parts.append(f"<h2>Waiting for a person</h2><ul>{held}</ul>")
        if used.get("why"):
            parts.append(f"<p>The curator: {_e(used['why'])}</p>")
    replay = next((c for c in record.get("checks") or [] if c.get("name") == "replay"), None)
    table = (replay or {}).get("data", {}).get("table") if isinstance(replay, Mapping) else None
    if table:
        rows = "".join(
            f"<tr><td>{_e(x.get('session'))}<br>{_e(x.get('task'))}</td><td>{_e(x.get('current'))}</td>"
            f"<td>{_e(x.get('candidate'))}</td><td>"
            + "<br>".join(
                f"{_e(v.get('order'))}: {_e(v.get('prefers'))} ({_e(v.get('reason'))})"
                for v in x.get("verdicts") or []
            )
            + f"</td><td>{_e(x.get('result'))}</td></tr>"
            for x in table
        )
        parts.append(
            "<h2>Replay on held-out sessions</h2><table><tr><th>task</th><th>current</th><th>candidate</th>"
            f"<th>verdicts</th><th>result</th></tr>{rows}</table>"
        )
    return "\n".join(parts)


def _number(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _scores_cell(scores: Scores) -> str:
    if not scores.count:
        return "–"
    interval = scores.interval
    spread = f" [{interval.low:.2f}, {interval.high:.2f}]" if interval is not None else ""
    return f"{scores.mean:.2f}{spread} <small>({scores.count} sessions)</small>"


def _in_use_html(view: StepView) -> str:
    """Live evidence: what it served and how that went (``reef_core.release.evidence``)."""
    if not view.evidence:
        return ""
    rows = []
    for e in view.evidence:
        rate = e.error_rate
        interval = e.error_interval
        errors = "–" if rate is None else f"{e.errors} of {e.requests} ({100 * rate:.1f}%"
        if interval is not None:
            errors += f", 95% {100 * interval.low:.1f}–{100 * interval.high:.1f}%"
        errors += ")" if rate is not None else ""
        latency = f"{_number(e.p50_ms, 0)} / {_number(e.p95_ms, 0)}"
        rows.append(
            f"<tr><td>{_e(e.release)}</td><td>{e.sessions}</td><td>{e.requests}</td>"
            f"<td>{_scores_cell(e.person)}</td><td>{_scores_cell(e.judge)}</td><td>{_e(latency)}</td>"
            f"<td>{e.tokens_in} / {e.tokens_out}</td><td>{_e(errors)}</td></tr>"
        )
    return (
        "<h2>In use</h2><table><tr><th>served by</th><th>sessions</th><th>requests</th>"
        "<th>person's score</th><th>judge's score</th><th>upstream p50 / p95 ms</th>"
        f"<th>tokens in / out</th><th>errors</th></tr>{''.join(rows)}</table>"
        "<p><small>Scores: the mean over sessions of each session's mean score, with its 95% "
        "interval (Student's t); errors with Wilson's interval.</small></p>"
    )


def _usage_html(view: StepView) -> str:
    s = _e(view.scenario)
    if view.status == "selected" and view.release_name:
        r = _e(view.release_name)
        return (
            f"<p>{r} is published. Install it into pi with <code>reef-pi update</code> (or "
            f"<code>/versions {r} install</code> inside a session, then <code>/reload</code>); "
            f"with the CLI: <code>reef install {s} --adapter pi --release {r}</code>. "
            f"Undo with <code>reef rollback {s} &lt;earlier release&gt;</code>.</p>"
        )
    if view.status == "pending":
        what = (
            "This change holds a lesson a person must see first (see Waiting for a person)"
            if view.record.get("learned_from") == "usage"
            else "This change adds or changes extension code"
        )
        return (
            f"<p>{what}, so a person must approve it: "
            f"<code>reef promote {s} c{view.step}</code> (or <code>reef review {s}</code>), or turn it "
            f"down with <code>reef reject {s} c{view.step}</code>.</p>"
        )
    return "<p>Nothing was published. Rephrase the ask and try again: <code>reef evolve …</code>.</p>"


def render_step_page(view: StepView) -> str:
    record = view.record
    title = f"{view.scenario} · step {view.step}"
    badge_class = view.status.split()[0]
    became = f" → <strong>{_e(view.release_name)}</strong>" if view.release_name else ""
    design = record.get("design")
    review = record.get("self_review") or {}
    review_html = (
        f"<p>The proposer's own review: <strong>{_e(review.get('verdict'))}</strong>"
        + (f": {_e(review.get('missing'))}" if review.get("missing") else "")
        + "</p>"
        if review
        else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>{_CSS}</style></head>
<body>
<h1>{_e(view.scenario)}: step {view.step} <span class="badge {_e(badge_class)}">{_e(view.status)}</span></h1>
<p>Built on {_e(view.base_name or "an empty harness")}{became}. Verdict: {_e(view.verdict)}</p>
{_in_use_html(view)}
<h2>Why: {"what the sessions taught" if record.get("learned_from") == "usage" else "the ask"}</h2>
<blockquote>{_e(view.ask or "(no ask: this step learned from records)")}</blockquote>
{_learned_html(record)}
<h2>The design</h2>
<p>{_e(design) if design else "(the proposer gave no design)"}</p>
{review_html}
<h2>What changed</h2>
{_diff_html(view)}
<h2>Checks</h2>
{_checks_html(record)}
<h2>How to use it</h2>
{_usage_html(view)}
</body></html>
"""
