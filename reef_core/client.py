"""The typed, synchronous HTTP client of a running reef daemon: one method per reef route.

Used by the CLI, the review TUI and the harness launchers.  Answers come back as parsed JSON
(plain dicts, exactly as the daemon sent them) or, where a caller acts on the shape, as a small
frozen dataclass (:class:`Progress`).

What became of an ask (or a ``reef learn`` step) is read here once, into an :class:`Outcome`:
a release, a candidate waiting for a person, or nothing published and why, with its page.
``reef evolve --wait``, ``reef learn`` and the launchers' ``evolve``/``learn`` only render it, in
their own words (what a state is called while it runs is :attr:`Progress.says`).

This is the one place where HTTP becomes reef's own errors: the daemon sends every error as
``{"error": {"message", "code", "param"}}``; ``code`` is the :attr:`ReefError.code` it raised, so
the same class is raised here (falling back on the status: 400 InvalidInput, 401 Unauthorized,
404 NotFound, 409 ConflictError, 413 PayloadTooLarge, 5xx :class:`DaemonError`), with the
daemon's message.  When nothing answers at the URL the error is :class:`DaemonUnavailable`, which
is how callers tell "no daemon" from "the daemon said no".  The token is sent as
``Authorization: Bearer`` and appears in no message, log line or repr.
"""

from __future__ import annotations

import getpass
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from reef_core import __version__, errors
from reef_core.errors import InvalidInput, ReefError
from reef_core.ids import parse_item_id, validate_scenario_name

__all__ = [
    "DEFAULT_URL",
    "PROGRESS_SAYS",
    "PROGRESS_STATES",
    "DaemonError",
    "DaemonUnavailable",
    "Outcome",
    "Progress",
    "ReefClient",
    "approver",
]

DEFAULT_URL = "http://127.0.0.1:8900"
#: the states of an ask or a learn step, in order, each with what a person reads while it is in it
PROGRESS_SAYS = {
    "queued": "waiting for the learner",
    "proposing": "proposing a change",
    "checking": "running the release checks",
    "settled": "settled",
}
PROGRESS_STATES = tuple(PROGRESS_SAYS)
_PAGE = 1000  # the daemon's largest page of records


class DaemonUnavailable(ReefError):
    """No reef daemon answered at the URL: connection refused, host unreachable or unknown."""

    code = "daemon_unavailable"


class DaemonError(ReefError):
    """The daemon failed on its side: a 5xx, or an answer broken off or not sent in time."""

    code = "daemon_error"


# every error the daemon can name in an error body's "code"; UpstreamRejected is relayed in the
# provider's own envelope on inference routes only, never on reef's routes
_BY_CODE: dict[str, type[ReefError]] = {
    cls.code: cls
    for cls in (
        errors.ConfigError,
        errors.ConflictError,
        errors.InvalidInput,
        errors.NotFound,
        errors.PayloadTooLarge,
        errors.ScenarioLocked,
        errors.StoreError,
        errors.Unauthorized,
        errors.UpstreamError,
        errors.UpstreamTimeout,
        errors.UpstreamUnavailable,
    )
}
# an error body without a known code: the class that answers with its status
_BY_STATUS: dict[int, type[ReefError]] = {
    _BY_CODE[code].http_status: _BY_CODE[code]
    for code in ("invalid_input", "unauthorized", "not_found", "conflict", "payload_too_large")
}


@dataclass(frozen=True)
class Progress:
    """Where an ask stands: ``queued``, ``proposing``, ``checking`` or ``settled`` with a result.

    ``result`` (once settled): ``verdict`` ("selected", "pending", "canary", "rejected: …", "skipped: …"),
    ``release`` (the release it became, or None), ``step`` and ``page_path``.
    """

    id: str
    scenario: str
    state: str
    result: dict[str, Any] | None = None

    @property
    def settled(self) -> bool:
        return self.state == "settled"

    @property
    def verdict(self) -> str | None:
        return None if self.result is None else self.result.get("verdict")

    @property
    def says(self) -> str:
        """What a person reads while the ask is in this state: ``running the release checks``."""
        return PROGRESS_SAYS[self.state]

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Progress:
        state = body.get("state")
        if state not in PROGRESS_STATES:
            raise DaemonError(f"the daemon reported an unknown ask state {state!r}")
        result = body.get("result")
        return cls(
            id=str(body.get("id", "")),
            scenario=str(body.get("scenario", "")),
            state=state,
            result=result if isinstance(result, dict) else None,
        )


@dataclass(frozen=True)
class Outcome:
    """What became of a settled ask or learn step: the one reading of its :class:`Progress`.

    One of three cases: :attr:`released` (``release`` now serves the scenario); :attr:`pending`
    (:attr:`candidate` changes code that runs on the person's machine, so it waits for a person
    to promote or reject it); else nothing was published, ``verdict`` says why (``rejected: …``,
    ``skipped: …``) and ``failed`` names the first check that did not pass, with its detail.
    ``page_url``: the step's page, else the ask's own (``asked``, what filing it answered).
    """

    verdict: str
    release: str | None = None
    step: int | None = None
    page_url: str | None = None
    failed: tuple[str, str] | None = None

    @classmethod
    def of(cls, progress: Progress, base_url: str, asked: Mapping[str, Any] | None = None) -> Outcome:
        if not progress.settled:
            raise ValueError(f"{progress.id} is {progress.state}: only a settled ask has an outcome")
        result = progress.result or {}
        path = result.get("page_path") or (asked or {}).get("page_path")
        failed = next((c for c in result.get("checks") or [] if c.get("passed") is False), None)
        return cls(
            verdict=str(result.get("verdict") or "unknown"),
            release=result.get("release") or None,
            step=result.get("step"),
            page_url=f"{base_url}{path}" if path else None,
            failed=None if failed is None else (str(failed.get("name")), str(failed.get("detail"))),
        )

    @property
    def released(self) -> bool:
        return self.release is not None

    @property
    def pending(self) -> bool:
        return self.release is None and self.verdict == "pending"

    @property
    def canary(self) -> bool:
        """The candidate passed its checks and serves a share of new sessions as a canary; their
        scores decide whether it is published (``reef canary S status``)."""
        return self.release is None and self.verdict == "canary"

    @property
    def candidate(self) -> str:
        """The step's name as promote and reject take it (``c5``), or ``the candidate``."""
        return f"c{self.step}" if self.step is not None else "the candidate"

    @property
    def why(self) -> str:
        """``: name: detail`` of the first failed check, or nothing."""
        return f": {self.failed[0]}: {self.failed[1]}" if self.failed else ""


def approver(via: str) -> str:
    """Who approves from this process, as a release records it: ``alice via reef review``."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        user = f"uid {os.getuid()}"
    return f"{user} via {via}"


def _segment(value: str) -> str:
    return quote(value, safe="")


def _step_name(value: str | int) -> str:
    """``c5``, ``5`` or 5 → ``c5``: how the daemon names a pending candidate."""
    text = str(value).strip()
    digits = text[1:] if text[:1] in ("c", "C") else text
    if isinstance(value, bool) or not digits.isdigit() or int(digits) < 1:
        if text[:1] == "v" and text[1:].isdigit():
            raise InvalidInput(
                f"{text} is a published release; a pending candidate is named by its step, such as c5",
                field="release",
            )
        raise InvalidInput(f"{text!r} is not a candidate (expected c1, c2, …)", field="release")
    return f"c{int(digits)}"


class ReefClient:
    """A connection to one reef daemon.  Not thread-safe; open one per thread."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidInput(f"{url!r} is not a reef URL such as {DEFAULT_URL}", field="url")
        self.url = url.strip().rstrip("/")
        self.timeout = timeout
        headers = {"user-agent": f"reef-client/{__version__}"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            transport=transport,
        )

    def __repr__(self) -> str:  # never the token
        return f"ReefClient({self.url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ReefClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the daemon --------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``GET /healthz``: ``{"ok": true, "version"}``; needs no token."""
        return self._call("GET", "/healthz")

    def status(self) -> dict[str, Any]:
        """``GET /reef/status``: version, recipe, upstream, state_dir and one row per scenario."""
        return self._call("GET", "/reef/status")

    # -- scenarios ---------------------------------------------------------------------------

    def scenarios(self) -> list[dict[str, Any]]:
        """Every scenario: ``{"name", "counts", "release", "pending"}``."""
        return list(self._call("GET", "/reef/scenarios")["scenarios"])

    def create_scenario(self, name: str) -> dict[str, Any]:
        """``{"name", "created"}``; ``created`` is False when it already existed."""
        return self._call(
            "POST", "/reef/scenarios", json={"name": validate_scenario_name(name, field="name")}
        )

    def archive_scenario(self, name: str) -> dict[str, Any]:
        """``{"name", "archived_to"}``: the repository is kept whole under the archive."""
        return self._call("DELETE", f"/reef/scenarios/{self._name(name)}")

    # -- audit reads -------------------------------------------------------------------------

    def records(
        self, scenario: str, *, after: str | None = None, limit: int = 50, tag: str | None = None
    ) -> dict[str, Any]:
        """One page: ``{"records": [...], "next": id or None}``, oldest first; ``tag`` (``name:value``)
        keeps only the records carrying that tag."""
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["after"] = str(parse_item_id(after, field="after"))
        if tag is not None:
            params["tag"] = tag
        return self._call("GET", f"/reef/scenarios/{self._name(scenario)}/records", params=params)

    def iter_records(
        self, scenario: str, *, after: str | None = None, tag: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every record after ``after`` (with ``tag``, if given), page by page."""
        while True:
            page = self.records(scenario, after=after, limit=_PAGE, tag=tag)
            yield from page["records"]
            after = page.get("next")
            if not after:
                return

    def items(
        self,
        scenario: str,
        kinds: Sequence[str] | None = None,
        *,
        after: str | None = None,
        limit: int = 50,
    ) -> dict[str, Any]:
        """One page of records, reports and asks: ``{"items": [...], "next": id or None}``."""
        params: dict[str, Any] = {"limit": limit}
        if kinds:
            params["kind"] = ",".join(kinds)
        if after is not None:
            params["after"] = str(parse_item_id(after, field="after"))
        return self._call("GET", f"/reef/scenarios/{self._name(scenario)}/items", params=params)

    def iter_items(
        self, scenario: str, kinds: Sequence[str] | None = None, *, after: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every item of ``kinds`` after ``after``, page by page."""
        while True:
            page = self.items(scenario, kinds, after=after, limit=_PAGE)
            yield from page["items"]
            after = page.get("next")
            if not after:
                return

    def sessions(
        self, scenario: str, *, after: str | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """One page of sessions: ``{"sessions": [...], "next": id or None}``, oldest first.

        Each session holds its records after ``after``; one that began before is marked
        ``continues``.  ``next`` starts the next page with the first session left out, whole;
        a session that goes on past it appears there again, marked ``continues``."""
        params: dict[str, Any] = {}
        if limit is not None:
            params["limit"] = limit
        if after is not None:
            params["after"] = str(parse_item_id(after, field="after"))
        return self._call("GET", f"/reef/scenarios/{self._name(scenario)}/sessions", params=params or None)

    def session(self, scenario: str, session: str, *, after: str | None = None) -> dict[str, Any]:
        """One session in full, with the ``transcript`` of its last record (each message with its
        ``source``: user, assistant, tool or system); NotFound when no record carries it."""
        if not session:
            raise InvalidInput("session must name a session", field="session")
        params = None if after is None else {"after": str(parse_item_id(after, field="after"))}
        path = f"/reef/scenarios/{self._name(scenario)}/sessions/{_segment(session)}"
        return self._call("GET", path, params=params)

    def record(self, scenario: str, record_id: str) -> dict[str, Any]:
        receipt = str(parse_item_id(record_id, field="id"))
        return self._call("GET", f"/reef/scenarios/{self._name(scenario)}/records/{receipt}")

    # -- releases ----------------------------------------------------------------------------

    def releases(self, scenario: str) -> dict[str, Any]:
        """``{"releases": [...newest first], "steps": [...]}`` (see the daemon's route)."""
        return self._call("GET", f"/reef/scenarios/{self._name(scenario)}/releases")

    def rollback(self, scenario: str, release: str | int, *, expected: str | None = None) -> dict[str, Any]:
        """Publish ``release``'s content again as a new release; ``expected``: the tip commit
        the caller saw (a conflict if the chain moved since)."""
        body: dict[str, Any] = {"release": release}
        if expected is not None:
            body["expected"] = expected
        return self._call("POST", f"/reef/scenarios/{self._name(scenario)}/rollback", json=body)

    def promote(
        self, scenario: str, candidate: str | int, *, approved_by: str | None = None
    ) -> dict[str, Any]:
        """Publish a pending candidate (``c5`` or 5): ``{"release", "commit", "source"}``.

        ``approved_by`` (see :func:`approver`) is kept with the release, with the moment."""
        body = {"release": _step_name(candidate)}
        if approved_by is not None:
            body["approved_by"] = approved_by
        return self._call("POST", f"/reef/scenarios/{self._name(scenario)}/promote", json=body)

    def reject(self, scenario: str, candidate: str | int) -> dict[str, Any]:
        """Turn down a pending candidate: ``{"step", "rejected": true}``."""
        body = {"release": _step_name(candidate)}
        return self._call("POST", f"/reef/scenarios/{self._name(scenario)}/reject", json=body)

    def canary(self, scenario: str) -> dict[str, Any]:
        """``{"canary": state or None, "plan": settings or None}``: the running (or last) canary,
        with its arms and the sequential test's state while it runs."""
        return self._call("GET", f"/reef/scenarios/{self._name(scenario)}/canary")

    def canary_stop(self, scenario: str, *, by: str | None = None) -> dict[str, Any]:
        """End the running canary unpublished: ``{"canary": its final state}``."""
        return self._call("POST", f"/reef/scenarios/{self._name(scenario)}/canary/stop", json=_given(by=by))

    def canary_promote(self, scenario: str, *, by: str | None = None) -> dict[str, Any]:
        """Publish the running canary now: ``{"canary": {..., "release": "vN"}}``."""
        return self._call(
            "POST", f"/reef/scenarios/{self._name(scenario)}/canary/promote", json=_given(by=by)
        )

    def harness(self, scenario: str, release: str | None = None) -> dict[str, Any]:
        """The served tree (or ``release``): ``files`` (path → text), release, requires."""
        params = {"release": release} if release else None
        return self._call("GET", "/reef/harness", params=params, scenario=scenario)

    def sync(self, scenario: str, remote: str | None = None) -> list[dict[str, Any]]:
        """Sync a scenario the daemon holds with its git remotes (or ``remote``): what each did."""
        body = {"remote": remote} if remote else {}
        return list(self._call("POST", f"/reef/scenarios/{self._name(scenario)}/sync", json=body)["remotes"])

    def add_remote(
        self, scenario: str, name: str, url: str, *, create: bool = False, trusted: bool = False
    ) -> dict[str, Any]:
        """Add a git remote to a scenario the daemon holds; it syncs with it at once (``sync``).
        ``create`` (a path under the daemon's state directory), ``trusted``: see the route."""
        body = {"name": name, "url": url, "create": create, "trusted": trusted}
        return dict(self._call("POST", f"/reef/scenarios/{self._name(scenario)}/remotes", json=body))

    def remove_remote(self, scenario: str, name: str) -> dict[str, Any]:
        """Forget a git remote of a scenario the daemon holds."""
        return dict(
            self._call("DELETE", f"/reef/scenarios/{self._name(scenario)}/remotes/{quote(name, safe='')}")
        )

    def versions(self, scenario: str) -> list[dict[str, Any]]:
        """The releases oldest first, each with the gate metrics of the step that made it."""
        return list(self._call("GET", "/reef/harness/versions", scenario=scenario)["versions"])

    def installer(self, scenario: str, adapter: str = "pi", release: str | None = None) -> str:
        """The self-contained sh script that installs the scenario's harness for ``adapter``."""
        params: dict[str, Any] = {"adapter": adapter}
        if release:
            params["release"] = release
        return self._call("GET", "/reef/harness/install", params=params, scenario=scenario, text=True)

    def installed(self, scenario: str, adapter: str) -> dict[str, Any]:
        """Tell the daemon the installer for ``adapter`` ran (``reefine`` then checks candidates
        with that harness too); fetching the script notes nothing."""
        return dict(
            self._call("POST", "/reef/harness/installed", json={"adapter": adapter}, scenario=scenario)
        )

    # -- feedback and asks -------------------------------------------------------------------

    def report(
        self,
        scenario: str,
        references: list[str],
        *,
        score: float | None = None,
        feedback: str | dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        agent_record_id: str | None = None,
    ) -> dict[str, Any]:
        """Feedback on receipts: ``{"agent_record_id", "scenario", "created"}``."""
        body = _given(
            references=list(references),
            score=score,
            feedback=feedback,
            metadata=metadata,
            agent_record_id=agent_record_id,
        )
        return self._call("POST", "/reef/report", json=body, scenario=scenario)

    def train(
        self,
        scenario: str,
        text: str,
        *,
        session: str | None = None,
        release_id: str | None = None,
        agent_record_id: str | None = None,
        harness: str | None = None,
    ) -> dict[str, Any]:
        """An ask in plain language: ``{"agent_record_id": "ask_…", "scenario", "page_path"}``;
        ``harness`` names the adapter it came from (pi, claude_code)."""
        body = _given(
            text=text,
            session=session,
            release_id=release_id,
            agent_record_id=agent_record_id,
            harness=harness,
        )
        return self._call("POST", "/reef/train", json=body, scenario=scenario)

    def learn(self, scenario: str) -> dict[str, Any]:
        """A usage step now (reefine): ``{"scenario", "ticket", "progress_path"}``; follow the
        ticket with :meth:`wait` like an ask."""
        return dict(self._call("POST", f"/reef/scenarios/{self._name(scenario)}/learn", json={}))

    def progress(self, scenario: str, ask_id: str) -> Progress:
        """Where an ask (``ask_…``) or a learn ticket (``learn_…``) stands."""
        if ask_id.startswith("learn_"):
            path = f"/reef/scenarios/{self._name(scenario)}/learn/{_segment(ask_id)}"
            return Progress.from_json(self._call("GET", path))
        ask = str(parse_item_id(ask_id, field="ask"))
        body = self._call("GET", f"/reef/harness/requests/{ask}/progress", scenario=scenario)
        return Progress.from_json(body)

    def wait(
        self,
        scenario: str,
        ask_id: str,
        *,
        timeout: float,
        interval: float = 0.5,
        on_progress: Callable[[Progress], None] | None = None,
        stop: threading.Event | None = None,
    ) -> Progress:
        """Poll an ask until it settles, ``timeout`` seconds pass or ``stop`` is set; returns
        the last progress (check :attr:`Progress.settled`)."""
        deadline = time.monotonic() + timeout
        stop = stop or threading.Event()
        while True:
            progress = self.progress(scenario, ask_id)
            if on_progress is not None:
                on_progress(progress)
            left = deadline - time.monotonic()
            if progress.settled or left <= 0 or stop.wait(min(interval, left)):
                return progress

    # -- the one HTTP call -------------------------------------------------------------------

    @staticmethod
    def _name(scenario: str) -> str:
        return _segment(validate_scenario_name(scenario))

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        scenario: str | None = None,
        text: bool = False,
    ) -> Any:
        headers = {}
        if scenario is not None:
            headers["x-reef-scenario"] = validate_scenario_name(scenario)
        try:
            response = self._http.request(method, path, json=json, params=params, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise DaemonUnavailable(f"no reef daemon answers at {self.url} ({_reason(exc)})") from exc
        except httpx.TimeoutException as exc:
            raise DaemonError(
                f"the reef daemon at {self.url} did not answer {method} {path} within {self.timeout:g}s"
            ) from exc
        except httpx.TransportError as exc:
            raise DaemonError(
                f"the reef daemon at {self.url} broke off {method} {path}: {_reason(exc)}"
            ) from exc
        if response.is_success:
            if text:
                return response.text
            try:
                return response.json()
            except ValueError as exc:
                raise DaemonError(
                    f"{self.url} answered {method} {path} with something that is not JSON"
                ) from exc
        raise self._error(method, path, response)

    def _error(self, method: str, path: str, response: httpx.Response) -> ReefError:
        status = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        message = str(error.get("message") or f"{status} {response.reason_phrase}")
        code = error.get("code")
        field = error.get("param") if isinstance(error.get("param"), str) else None
        if code == "http_error" and status in (404, 405):  # a route this daemon does not have
            return DaemonError(
                f"the reef daemon at {self.url} has no route {method} {path.split('?')[0]} "
                f"({message}; is it an older reef?)"
            )
        kind = _BY_CODE.get(code) if isinstance(code, str) else None
        if kind is None:
            kind = _BY_STATUS.get(status, DaemonError if status >= 500 else ReefError)
        return kind(message, field=field)


def _reason(exc: httpx.HTTPError) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


def _given(**fields: Any) -> dict[str, Any]:
    """A request body of the fields that were given (None means: leave it out)."""
    return {key: value for key, value in fields.items() if value is not None}
