"""Live evidence: how each release does in use, from the records it served and their reports.

For every release (``vN``) and every candidate that served as a canary (``cN``):

* **sessions** and **requests** it served.  A record belongs to the release
  :func:`served_release` names; its session is its session tag (:func:`session_of`), and a
  record without one is a session of its own (a request sent without a session tag is one use);
* **scores**, the person's and the judge's apart (a report with ``metadata.source = "judge"`` is
  the judge's, :func:`~reef_core.sessions.is_explicit`).  *The unit is the session*: for each
  session the release served, the mean of one source's scores on it is one number, and a
  release's score is the mean of those numbers, with a Student's t 95% interval over sessions.
  A session with ten reports weighs what a session with one does, and the interval counts
  sessions, not reports (reports within one session are not independent).  A report counts for
  a release when one of its references is a record that release served (a session served by two
  releases, one after the other, has its reports on each release's records counted apart); a
  report without a known reference that names a session (``metadata.session``) counts for every
  release that served that session.  Reports without a numeric score are left out;
* **upstream latency** p50 and p95 in milliseconds, from each answered record's
  ``timings.total_ms``: from the moment reef had read the request to the moment the whole
  answer (a stream's last event) was relayed, taken before the record is written, so it is the
  upstream's time plus reef's translation, never the commit.  ``ttfb_ms`` is the same for a
  plain answer but a stream's first event, so the two cannot be mixed; ``total_ms`` is the one
  timing that means the same for both.  Records that are errors are left out of the latency
  (a refused connection answers in no time) and counted in the error rate.  Percentiles
  interpolate linearly between the closest ranks (numpy's default);
* **tokens** in and out, summed over the answers that carried ``usage``: OpenAI's
  ``prompt_tokens``/``completion_tokens``, the Responses API's ``input_tokens``/``output_tokens``,
  Anthropic's ``input_tokens`` plus its cached input (``cache_read_input_tokens``,
  ``cache_creation_input_tokens``: OpenAI counts those in ``prompt_tokens``) and
  ``output_tokens``.  A stream's record holds the assembled message, whose ``usage`` is what the
  stream reported (an OpenAI stream reports none unless the client asked with
  ``stream_options.include_usage``); ``tokens.requests`` says how many answers were counted;
* **errors**: a status of 400 or more, an ``error``, or ``complete: false``; the rate with
  Wilson's interval.

Which release served a record is :func:`served_release` (defined in :mod:`reef_core.sessions`,
whose sessions list their releases by it too, and named here for evidence's readers): the
record's ``release`` tag when it names a release or candidate (``vN``, ``cN``: a launcher sends
``x-reef-tag-release`` with the tree it installed), else the record's own ``release`` (what the
daemon served: the chain's tip, or for weights the canary candidate whose adapter answered).

:func:`compare` sets two of these side by side (``reef compare``).  :func:`release_evidence` is
pure (items in, evidence out); :func:`scenario_evidence` reads a scenario's data refs and keeps
what it read per scenario, so a second call on an unchanged data branch costs a few ref reads,
and one after new items reads only those (see :class:`EvidenceIndex`).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reef_core.release.intervals import (
    Interval,
    mean_interval,
    newcombe_difference,
    welch_difference,
    wilson,
)
from reef_core.sessions import is_explicit, served_release, session_of
from reef_core.store import DataReader, Item, ScenarioReader
from reef_core.wire.outcome import usage_to_openai

__all__ = [
    "Evidence",
    "EvidenceIndex",
    "Scores",
    "compare",
    "release_evidence",
    "scenario_evidence",
    "served_release",
    "step_evidence",
]

_KINDS = ("record", "report")


@dataclass(frozen=True)
class Scores:
    """One source's scores over the sessions a release served: ``count`` sessions, the mean of
    their per-session means, its sample deviation and 95% interval (None below two sessions)."""

    count: int = 0
    mean: float | None = None
    sd: float | None = None
    interval: Interval | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Scores:
        ordered = sorted(values)  # the sums below then never depend on the order items came in
        n = len(ordered)
        if n == 0:
            return cls()
        mean = math.fsum(ordered) / n
        if n < 2:
            return cls(1, mean)
        sd = math.sqrt(math.fsum((v - mean) ** 2 for v in ordered) / (n - 1))
        return cls(n, mean, sd, mean_interval(mean, sd, n))

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean": self.mean,
            "sd": self.sd,
            "interval": None if self.interval is None else [self.interval.low, self.interval.high],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Scores:
        bounds = data.get("interval")
        return cls(
            int(data.get("count") or 0),
            data.get("mean"),
            data.get("sd"),
            Interval(*bounds) if bounds else None,
        )


@dataclass(frozen=True)
class Evidence:
    """How one release did in use (see the module docstring for each number's definition)."""

    release: str
    sessions: int = 0
    requests: int = 0
    person: Scores = field(default_factory=Scores)
    judge: Scores = field(default_factory=Scores)
    timed: int = 0  # requests with a latency: answered, not errors
    p50_ms: float | None = None
    p95_ms: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    metered: int = 0  # requests whose answer carried usage
    errors: int = 0
    first_at: str | None = None  # the first and last record it served
    last_at: str | None = None

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.requests if self.requests else None

    @property
    def error_interval(self) -> Interval | None:
        return wilson(self.errors, self.requests)

    @property
    def score(self) -> tuple[Scores, str] | None:
        """The person's scores when there are any, else the judge's, with who gave them."""
        if self.person.count:
            return self.person, "person"
        if self.judge.count:
            return self.judge, "judge"
        return None

    def to_json(self) -> dict[str, Any]:
        interval = self.error_interval
        return {
            "release": self.release,
            "sessions": self.sessions,
            "requests": self.requests,
            "person": self.person.to_json(),
            "judge": self.judge.to_json(),
            "latency_ms": {"p50": self.p50_ms, "p95": self.p95_ms, "count": self.timed},
            "tokens": {"in": self.tokens_in, "out": self.tokens_out, "requests": self.metered},
            "errors": {
                "count": self.errors,
                "rate": self.error_rate,
                "interval": None if interval is None else [interval.low, interval.high],
            },
            "first_at": self.first_at,
            "last_at": self.last_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Evidence:
        """The value :meth:`to_json` wrote (what a daemon answered), back."""
        latency, tokens, errors = (
            data.get("latency_ms") or {},
            data.get("tokens") or {},
            data.get("errors") or {},
        )
        return cls(
            release=str(data["release"]),
            sessions=int(data.get("sessions") or 0),
            requests=int(data.get("requests") or 0),
            person=Scores.from_json(data.get("person") or {}),
            judge=Scores.from_json(data.get("judge") or {}),
            timed=int(latency.get("count") or 0),
            p50_ms=latency.get("p50"),
            p95_ms=latency.get("p95"),
            tokens_in=int(tokens.get("in") or 0),
            tokens_out=int(tokens.get("out") or 0),
            metered=int(tokens.get("requests") or 0),
            errors=int(errors.get("count") or 0),
            first_at=data.get("first_at"),
            last_at=data.get("last_at"),
        )


def _percentile(ordered: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of sorted values, interpolating between the closest ranks."""
    if not ordered:
        return None
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _is_error(record: Mapping[str, Any]) -> bool:
    status = record.get("status")
    failed = isinstance(status, int) and not isinstance(status, bool) and status >= 400
    return failed or bool(record.get("error")) or record.get("complete") is False


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _tokens(record: Mapping[str, Any]) -> tuple[int, int] | None:
    """(in, out) from the answer's ``usage``, in any client's dialect; None without usage."""
    response = record.get("response")
    usage = response.get("usage") if isinstance(response, Mapping) else None
    if not isinstance(usage, Mapping):
        return None
    if record.get("client_format") == "anthropic":
        counted = usage_to_openai(dict(usage))
        return counted["prompt_tokens"], counted["completion_tokens"]
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    return _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))


@dataclass
class _Served:
    """Running totals of one release."""

    requests: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    metered: int = 0
    sessions: set[str] = field(default_factory=set)
    first_at: str | None = None
    last_at: str | None = None


@dataclass(frozen=True)
class _Report:
    score: float
    explicit: bool
    references: tuple[str, ...]
    session: str | None  # metadata.session


class _Tally:
    """What :func:`release_evidence` adds up; fed items in any order (reports are matched to
    their records when the evidence is taken, so a report read before its record still counts)."""

    def __init__(self) -> None:
        self.served: dict[str, _Served] = {}
        self.owner: dict[str, tuple[str, str]] = {}  # receipt -> (session, release)
        self.session_releases: dict[str, set[str]] = {}  # session tag -> releases that served it
        self.reports: list[_Report] = []

    def add(self, item: Item) -> None:
        data = item.data
        if item.kind == "record":
            self._record(item.id, data)
        elif item.kind == "report":
            score = data.get("score")
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                return
            metadata = data.get("metadata")
            session = metadata.get("session") if isinstance(metadata, Mapping) else None
            references = data.get("references")
            self.reports.append(
                _Report(
                    float(score),
                    is_explicit(data),
                    tuple(str(r) for r in references) if isinstance(references, list) else (),
                    session if isinstance(session, str) and session else None,
                )
            )

    def _record(self, receipt: str, record: Mapping[str, Any]) -> None:
        release = served_release(record)
        if release is None:
            return
        tagged = session_of(record)
        session = tagged or receipt
        self.owner[receipt] = (session, release)
        if tagged is not None:
            self.session_releases.setdefault(tagged, set()).add(release)
        served = self.served.get(release)
        if served is None:
            served = self.served[release] = _Served()
        served.requests += 1
        served.sessions.add(session)
        if _is_error(record):
            served.errors += 1
        else:
            timings = record.get("timings")
            total = timings.get("total_ms") if isinstance(timings, Mapping) else None
            if isinstance(total, (int, float)) and not isinstance(total, bool):
                served.latencies.append(float(total))
        tokens = _tokens(record)
        if tokens is not None:
            served.tokens_in += tokens[0]
            served.tokens_out += tokens[1]
            served.metered += 1
        created = record.get("created_at")
        if isinstance(created, str) and created:
            served.first_at = created if served.first_at is None else min(served.first_at, created)
            served.last_at = created if served.last_at is None else max(served.last_at, created)

    def evidence(self) -> dict[str, Evidence]:
        # (release, session) -> each source's scores on it
        scored: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        for report in self.reports:
            targets = {self.owner[ref] for ref in report.references if ref in self.owner}
            if not targets and report.session is not None:
                targets = {(report.session, r) for r in self.session_releases.get(report.session, ())}
            for session, release in targets:
                person, judge = scored.setdefault((release, session), ([], []))
                (person if report.explicit else judge).append(report.score)
        person_means: dict[str, list[float]] = {}
        judge_means: dict[str, list[float]] = {}
        for (release, _), (person, judge) in scored.items():
            if person:
                person_means.setdefault(release, []).append(math.fsum(person) / len(person))
            if judge:
                judge_means.setdefault(release, []).append(math.fsum(judge) / len(judge))
        out = {}
        for name, served in self.served.items():
            latencies = sorted(served.latencies)
            out[name] = Evidence(
                release=name,
                sessions=len(served.sessions),
                requests=served.requests,
                person=Scores.of(person_means.get(name, ())),
                judge=Scores.of(judge_means.get(name, ())),
                timed=len(latencies),
                p50_ms=_percentile(latencies, 0.50),
                p95_ms=_percentile(latencies, 0.95),
                tokens_in=served.tokens_in,
                tokens_out=served.tokens_out,
                metered=served.metered,
                errors=served.errors,
                first_at=served.first_at,
                last_at=served.last_at,
            )
        return out


def release_evidence(items: Iterable[Item]) -> dict[str, Evidence]:
    """The evidence of every release and candidate that served a record among ``items`` (a
    data branch's records and reports; other kinds are passed over), by name."""
    tally = _Tally()
    for item in items:
        tally.add(item)
    return tally.evidence()


class EvidenceIndex:
    """One scenario's evidence, kept as its data refs grow.  Thread-safe.

    Each data ref is read forward from the last item read on it: item ids only grow along one
    ref (one writer, a monotonic generator) and refs only fast-forward (the writer, a sync's
    adoption), so what is after the cursor is exactly what is new.  The evidence is taken again
    only when a ref's tip moved, and is otherwise answered as kept: the key is every data ref's
    tip.  Should a ref ever hold fewer items than were read from it, or more than the cursor
    explains (rewritten by hand), everything is read again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._tally = _Tally()
        self._read: dict[str, tuple[str, str | None, int]] = {}  # ref -> (tip, last id read, items)
        self._key: tuple[tuple[str, str], ...] | None = None
        self._evidence: dict[str, Evidence] = {}

    def evidence(self, reader: ScenarioReader) -> dict[str, Evidence]:
        with self._lock:
            views = [DataReader(reader.handle, ref=ref) for ref in reader.data.refs()]
            tips = [(view.own_ref, view.tip()) for view in views]
            key = tuple((ref, str(tip.id)) for ref, tip in tips if tip is not None)
            if key == self._key:
                return self._evidence
            moved = dict(key)
            if set(self._read) - set(moved) or not self._catch_up(views, moved):
                self._reset()  # a ref went away, or was rewritten: read it all again
                self._catch_up(views, moved)
            self._key, self._evidence = key, self._tally.evidence()
            return self._evidence

    def _catch_up(self, views: list[DataReader], tips: Mapping[str, str]) -> bool:
        """Read each moved ref's new items; False when a ref holds what its cursor cannot explain."""
        for view in views:
            tip, cursor, done = self._read.get(view.own_ref, ("", None, 0))
            if tip == tips.get(view.own_ref):
                continue
            counts = view.counts()  # before reading: the ref only grows from here
            expected = sum(counts[kind] for kind in _KINDS) - done
            read = 0
            for item in view.iter_items(_KINDS, after=cursor):
                self._tally.add(item)
                cursor, read = item.id, read + 1
            # the tip seen before reading: had the ref moved meanwhile, the next call reads on
            self._read[view.own_ref] = (tips.get(view.own_ref, ""), cursor, done + read)
            if expected < 0 or read < expected:
                return False
        return True


_INDEXES: OrderedDict[str, EvidenceIndex] = OrderedDict()
_INDEXES_LOCK = threading.Lock()
_KEPT = 64  # scenarios whose evidence is kept in memory, the least recently read dropped first


def scenario_evidence(reader: ScenarioReader) -> dict[str, Evidence]:
    """Every release's evidence in ``reader``'s scenario (all data refs), kept per repository
    between calls (:class:`EvidenceIndex`), so the releases listing can ask on every call."""
    path = str(reader.path)
    with _INDEXES_LOCK:
        index = _INDEXES.get(path)
        if index is None:
            index = _INDEXES[path] = EvidenceIndex()
            while len(_INDEXES) > _KEPT:
                _INDEXES.popitem(last=False)
        _INDEXES.move_to_end(path)
    return index.evidence(reader)


def step_evidence(reader: ScenarioReader, release: str | None, step: int | None) -> tuple[Evidence, ...]:
    """What the page of a step shows in use: the release it became (even before it served a
    request), and the candidate ``c<step>`` when it served as a canary before that."""
    served = scenario_evidence(reader)
    shown = [served.get(release, Evidence(release))] if release else []
    if step is not None and f"c{step}" in served:
        shown.append(served[f"c{step}"])
    return tuple(shown)


def _side(a: float | None, b: float | None) -> dict[str, Any]:
    return {"a": a, "b": b, "difference": None if a is None or b is None else b - a}


def _scores_difference(a: Scores, b: Scores) -> dict[str, Any]:
    row = {**_side(a.mean, b.mean), "interval": None, "method": "welch", "df": None}
    if a.mean is not None and b.mean is not None:
        found = welch_difference(a.mean, a.sd or 0.0, a.count, b.mean, b.sd or 0.0, b.count)
        if found is not None:
            interval, df = found
            row["interval"], row["df"] = [interval.low, interval.high], df
    return row


def compare(a: Evidence, b: Evidence) -> dict[str, Any]:
    """``b`` against ``a``: each difference is b − a, with its 95% interval where one makes sense.

    * ``person_score``, ``judge_score``: the difference of the session means, Welch's t interval
      (``df``: Welch–Satterthwaite); no interval with fewer than two sessions on either side;
    * ``error_rate``: the difference of the two proportions, Newcombe's hybrid score interval;
    * ``p50_ms``: the difference of the medians, without an interval (that needs the latencies
      themselves, which the evidence does not keep).
    """
    errors = {**_side(a.error_rate, b.error_rate), "interval": None, "method": "newcombe"}
    interval = newcombe_difference(a.errors, a.requests, b.errors, b.requests)
    if interval is not None:
        errors["interval"] = [interval.low, interval.high]
    return {
        "a": a.release,
        "b": b.release,
        "person_score": _scores_difference(a.person, b.person),
        "judge_score": _scores_difference(a.judge, b.judge),
        "p50_ms": {**_side(a.p50_ms, b.p50_ms), "interval": None, "method": None},
        "error_rate": errors,
    }
