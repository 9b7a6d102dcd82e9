"""Traffic through a real daemon for the live-evidence tests, and the evidence worked out by hand.

:func:`serve_traffic` sends, over HTTP to a running reef in front of the scripted upstream:

    v1 serves (the chain's tip):
      session a   three chats (OpenAI)
      session b   a message (Anthropic), an upstream 500, a stream (OpenAI, include_usage)
      untagged    one chat: a session of its own
    v2 serves:
      session c   two chats, an upstream 400
      session d   an Anthropic stream, an OpenAI stream without usage
      session e   tagged release v1 (a harness still on v1): one chat
      session f   tagged release c7 (a canary): two chats, a stream the upstream cuts
      session h   tagged release c7: one chat
      session g   tagged release "banana" (no release name): one chat, served by v2

then reports through ``POST /reef/report``: a person's and the judge's (``metadata.source =
"judge"``), several on one session, one naming its session without references, one with
feedback and no score.

:func:`by_hand` computes what every release's evidence must be from the records and reports
read back through the API, written out plainly and apart from ``reef_core.release.evidence``.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from reef_core.client import ReefClient
from tests.cli.support import publish
from tests.daemon.conftest import RunningReef
from tests.fakes.upstream import Error, Reset, ScriptedUpstream, Text

SCENARIO = "s"
#: Student's t, 0.975 quantile, from a printed table
T975 = {1: 12.706204736, 2: 4.302652730, 3: 3.182446305, 4: 2.776445105, 5: 2.570581836}
Z = 1.959963984540054


@dataclass
class Traffic:
    receipts: dict[str, list[str]]  # session (or "untagged") -> receipts, in order
    statuses: list[int]  # what each request answered the client


@dataclass
class Served:
    """A daemon that served the traffic, and what it recorded, read back through the API."""

    daemon: RunningReef
    traffic: Traffic
    records: list[dict[str, Any]]
    reports: list[dict[str, Any]]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """The traffic through a real daemon, once per module (the tests only read it)."""
    with ScriptedUpstream() as upstream:
        daemon = RunningReef(
            tmp_path_factory.mktemp("reef"),
            "--inference.upstream-url",
            upstream.url,
            "--inference.upstream-api",
            "openai",
        ).start()
        try:
            traffic = serve_traffic(daemon, upstream)
            yield Served(daemon, traffic, *read_back(daemon))
        finally:
            daemon.stop()


def assert_close(actual: Any, expected: Any, where: str = "") -> None:
    """``actual`` holds ``expected``: the same keys (those ``expected`` names), the same values,
    floats to 1e-9."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{where}.{key} is missing"
            assert_close(actual[key], value, f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), f"{where}: {actual!r}"
        for n, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_close(a, e, f"{where}[{n}]")
    elif isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=1e-9, abs=1e-12), f"{where}: {actual} != {expected}"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def _post(daemon: Any, path: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        f"{daemon.url}{path}", json=body, headers={"x-reef-scenario": SCENARIO, **headers}, timeout=15
    )


def _send(
    daemon: Any,
    traffic: Traffic,
    session: str | None,
    *,
    release: str | None = None,
    anthropic: bool = False,
    stream: bool = False,
    usage: bool = True,
) -> None:
    headers = {}
    if session is not None:
        headers["x-reef-tag-session"] = session
    if release is not None:
        headers["x-reef-tag-release"] = release
    messages = [{"role": "user", "content": f"hello from {session}"}]
    if anthropic:
        body: dict[str, Any] = {"model": "m", "max_tokens": 32, "messages": messages, "stream": stream}
        response = _post(daemon, "/v1/messages", body, headers)
    else:
        body = {"model": "m", "messages": messages, "stream": stream}
        if stream and usage:
            body["stream_options"] = {"include_usage": True}
        response = _post(daemon, "/v1/chat/completions", body, headers)
    traffic.statuses.append(response.status_code)
    receipt = response.headers.get("x-reef-agent-record-id")
    if receipt is None:  # a failed exchange is recorded too; its receipt is the newest record
        receipt = _newest_record(daemon)
    traffic.receipts.setdefault(session or "untagged", []).append(receipt)


def _newest_record(daemon: Any) -> str:
    with ReefClient(daemon.url) as client:
        return list(client.iter_items(SCENARIO, ["record"]))[-1]["id"]


def report(daemon: Any, body: dict[str, Any]) -> str:
    response = _post(daemon, "/reef/report", body, {})
    assert response.status_code == 200, response.text
    return response.json()["agent_record_id"]


def serve_traffic(daemon: Any, upstream: ScriptedUpstream) -> Traffic:
    """The traffic above, through ``daemon``; v1 and v2 are published with the real store."""
    state = daemon.state_dir
    with ReefClient(daemon.url) as client:
        client.create_scenario(SCENARIO)
    publish(state, SCENARIO, {"rules/style.md": b"one"})
    traffic = Traffic({}, [])
    upstream.script(Text("a0", usage=(11, 4)), Text("a1", usage=(12, 5)), Text("a2", usage=(13, 6)))
    for _ in range(3):
        _send(daemon, traffic, "a")
    upstream.script(Text("b0", usage=(20, 7)), Error(500, "upstream broke"), Text("b2", usage=(9, 3)))
    _send(daemon, traffic, "b", anthropic=True)
    _send(daemon, traffic, "b")
    _send(daemon, traffic, "b", stream=True)
    upstream.script(Text("u", usage=(10, 5)))
    _send(daemon, traffic, None)

    publish(state, SCENARIO, {"rules/style.md": b"two"}, operation="evolve", ask="shorter")
    upstream.script(Text("c0", usage=(30, 10)), Text("c1", usage=(31, 11)), Error(400, "bad request"))
    for _ in range(3):
        _send(daemon, traffic, "c")
    upstream.script(Text("d0", usage=(14, 8)), Text("d1", usage=(15, 9)))
    _send(daemon, traffic, "d", anthropic=True, stream=True)
    _send(daemon, traffic, "d", stream=True, usage=False)
    upstream.script(Text("e", usage=(16, 2)))
    _send(daemon, traffic, "e", release="v1")
    upstream.script(Text("f0", usage=(17, 3)), Text("f1", usage=(18, 4)), Reset(after_chunks=2))
    _send(daemon, traffic, "f", release="c7")
    _send(daemon, traffic, "f", release="c7")
    _send(daemon, traffic, "f", release="c7", stream=True)
    upstream.script(Text("h", usage=(19, 5)))
    _send(daemon, traffic, "h", release="c7")
    upstream.script(Text("g", usage=(21, 6)))
    _send(daemon, traffic, "g", release="banana")

    r = traffic.receipts
    judge = {"source": "judge"}
    report(daemon, {"score": 1, "references": [r["a"][0]]})
    report(daemon, {"score": 0, "references": [r["a"][2]]})
    report(daemon, {"score": 0.25, "references": [r["a"][1]], "metadata": judge})
    report(daemon, {"score": 1, "references": [r["a"][0]], "metadata": judge})
    report(daemon, {"score": 1, "references": [r["b"][0]]})
    report(daemon, {"score": 0, "references": [r["b"][2]], "metadata": judge})
    report(daemon, {"score": 0, "references": [r["untagged"][0]]})
    report(daemon, {"score": 1, "references": [r["c"][0]]})
    report(daemon, {"score": 0.5, "references": [r["c"][1]]})
    report(daemon, {"score": 1, "references": [r["c"][0]], "metadata": judge})
    report(daemon, {"feedback": "no score, so no number", "references": [r["c"][1]]})
    report(daemon, {"score": 0, "references": [], "metadata": {"session": "d"}})
    report(daemon, {"score": 1, "references": [r["e"][0]]})
    report(daemon, {"score": 1, "references": [r["f"][0]]})
    report(daemon, {"score": 0.25, "references": [r["f"][1]], "metadata": judge})
    report(daemon, {"score": 0, "references": [r["h"][0]]})
    report(daemon, {"score": 1, "references": [r["g"][0]], "metadata": judge})
    return traffic


def read_back(daemon: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The scenario's records and reports, through the API."""
    with ReefClient(daemon.url) as client:
        return list(client.iter_items(SCENARIO, ["record"])), list(client.iter_items(SCENARIO, ["report"]))


# -- by hand ---------------------------------------------------------------------------------------


def _release_of(record: dict[str, Any]) -> str | None:
    tagged = (record.get("tags") or {}).get("release")
    if isinstance(tagged, str) and re.fullmatch(r"[vc]\d+", tagged):
        return tagged
    return record.get("release")


def _mean_and_interval(values: list[float]) -> dict[str, Any]:
    n = len(values)
    if n == 0:
        return {"count": 0, "mean": None, "sd": None, "interval": None}
    mean = sum(values) / n
    if n == 1:
        return {"count": 1, "mean": mean, "sd": None, "interval": None}
    sd = statistics.stdev(values)
    half = T975[n - 1] * sd / math.sqrt(n)
    return {"count": n, "mean": mean, "sd": sd, "interval": [mean - half, mean + half]}


def wilson(k: int, n: int) -> tuple[float, float]:
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z / (1 + Z * Z / n) * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def by_hand(records: list[dict[str, Any]], reports: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each release's evidence, in the shape of ``Evidence.to_json`` (without the times)."""
    releases: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        name = _release_of(record)
        if name:
            releases.setdefault(name, []).append(record)
    session_of = {r["id"]: (r.get("tags") or {}).get("session") or r["id"] for r in records}
    release_of = {r["id"]: _release_of(r) for r in records}
    out = {}
    for name, served in releases.items():
        errors = [r for r in served if r["status"] >= 400 or r.get("error") or r.get("complete") is False]
        latencies = sorted(r["timings"]["total_ms"] for r in served if r not in errors)
        usages = [
            r["response"]["usage"]
            for r in served
            if isinstance(r.get("response"), dict) and isinstance(r["response"].get("usage"), dict)
        ]
        tokens_in = tokens_out = 0
        for u in usages:
            if "prompt_tokens" in u:  # OpenAI
                tokens_in, tokens_out = tokens_in + u["prompt_tokens"], tokens_out + u["completion_tokens"]
            else:  # Anthropic: the cached input counts as input, as OpenAI counts it
                cached = u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0)
                tokens_in, tokens_out = (
                    tokens_in + u["input_tokens"] + cached,
                    tokens_out + u["output_tokens"],
                )
        sessions = {session_of[r["id"]] for r in served}
        scores: dict[str, dict[str, list[float]]] = {"person": {}, "judge": {}}
        for report_ in reports:
            if not isinstance(report_.get("score"), (int, float)):
                continue
            source = "judge" if (report_.get("metadata") or {}).get("source") == "judge" else "person"
            mine = [session_of[ref] for ref in report_["references"] if release_of.get(ref) == name]
            if not report_["references"] and report_["metadata"].get("session") in sessions:
                mine = [report_["metadata"]["session"]]
            for session in set(mine):
                scores[source].setdefault(session, []).append(report_["score"])
        means = {
            source: [sum(v) / len(v) for v in by_session.values()] for source, by_session in scores.items()
        }
        n, k = len(served), len(errors)
        out[name] = {
            "release": name,
            "sessions": len(sessions),
            "requests": n,
            "person": _mean_and_interval(means["person"]),
            "judge": _mean_and_interval(means["judge"]),
            "latency_ms": {
                "p50": statistics.median(latencies) if latencies else None,
                "p95": statistics.quantiles(latencies, n=20, method="inclusive")[18]
                if len(latencies) > 1
                else (latencies[0] if latencies else None),
                "count": len(latencies),
            },
            "tokens": {"in": tokens_in, "out": tokens_out, "requests": len(usages)},
            "errors": {"count": k, "rate": k / n, "interval": list(wilson(k, n))},
        }
    return out
