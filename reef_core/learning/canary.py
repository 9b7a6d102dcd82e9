"""Canary releases: a candidate that passed its checks serves a share of new sessions, and the
sessions' scores decide whether it is published.

Settings (``recipe.config``):

| key | default | meaning |
|---|---|---|
| ``canary-share`` | 0 | the share of new sessions the canary gets; 0 is off (published at once) |
| ``canary-max-sessions`` | 230 | canary sessions after which an undecided canary ends (``expired``) |
| ``canary-min-sessions`` | 10 | scored sessions each arm needs before the test may decide |
| ``canary-alpha`` | 0.05 | the test's error rate (:mod:`reef_core.release.sequential` says what it bounds) |
| ``canary-effect`` | 0.15 | the smallest difference in mean session score the test is tuned to find |

The arms: ``control`` is the release that was current when the canary began (its base), and
``canary`` the candidate, named by its step (``c7``).  A session is assigned once, when reef
first sees it: by a hash of the canary's name and the session tag, so the same session always
lands on the same arm, on every node and after every restart.  Sessions that were already
going when the canary began stay on control and are counted by neither arm (a harness
session's first request opens the conversation; one that already carries an answer of the
model began earlier).  Requests with no session tag are served control.

What is kept where: the canary's definition and its end live in git (``refs/reef/canary``,
:mod:`reef_core.store.canary`); the assignments and the counts are read back from the data
branch, where each record says which release served it (:func:`reef_core.sessions.served_release`:
the launcher's ``release`` tag for a harness tree, the record's ``release`` for weights).  So a
daemon killed mid-canary resumes with the same arms, assignments and counts.

The decision is the sequential test's (:func:`reef_core.release.sequential.decide`) on one score
per session (the person's mean score, else the judge's): ``promote`` publishes the candidate as
the next ``vN`` by compare-and-swap on the base it was tested against (under the scenario's
lease when it syncs with a remote, like any publish); ``retire`` and ``expired`` end it
unpublished.  A person may stop it or promote it at any time.  If the chain moved meanwhile (a
rollback, another node's release), the canary's evidence no longer compares the candidate with
what serves, so it ends ``superseded`` and publishes nothing.  One canary runs per scenario;
the next candidate waits until it ends.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from reef_core.errors import ConfigError, ConflictError, InvalidInput, NotFound
from reef_core.release.sequential import Decision, Design, decide
from reef_core.sessions import group_sessions
from reef_core.store import Release, Scenario, step_name
from reef_core.store.canary import CanaryRecord

__all__ = ["ENDED", "SETTINGS", "CanaryPlan", "CanaryWatch", "arm_of", "canary_key", "plan_from_config"]

log = logging.getLogger(__name__)

#: the ``recipe.config`` keys this module reads (any recipe accepts them; the worker acts on them)
SETTINGS = frozenset(
    {"canary_share", "canary_max_sessions", "canary_min_sessions", "canary_alpha", "canary_effect"}
)
#: how a canary can end; ``running`` is the only other state
ENDED = ("promoted", "retired", "expired", "stopped", "superseded")
_EVALUATE_EVERY_S = 0.5  # a busy scenario re-reads its canary's sessions at most this often


def canary_key(scenario: str) -> str:
    """The engine key a weights canary of ``scenario`` is served under (``@`` is in no
    scenario name, so it never names another scenario's weights)."""
    return f"{scenario}@canary"


@dataclass(frozen=True)
class CanaryPlan:
    share: float
    design: Design

    def to_json(self) -> dict[str, Any]:
        return {"share": self.share, **asdict(self.design)}


def plan_from_config(config: Mapping[str, Any]) -> CanaryPlan | None:
    """The canary settings of ``recipe.config``, checked; None when canaries are off."""

    def number(key: str, default: float, kind: type = float) -> Any:
        given = config.get(key, config.get(key.replace("-", "_"), default))
        value = given
        if isinstance(given, str):  # a flag's value
            try:
                value = float(given)
            except ValueError:
                value = None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise ConfigError(f"recipe.config.{key} must be a number, not {given!r}", field=key)
        if kind is int and value != int(value):
            raise ConfigError(f"recipe.config.{key} must be a whole number, not {given!r}", field=key)
        return kind(value)

    share = number("canary-share", 0.0)
    if not 0 <= share < 1:
        raise ConfigError(
            f"recipe.config.canary-share must be at least 0 (off) and below 1, not {share}",
            field="canary-share",
        )
    try:
        design = Design(
            alpha=number("canary-alpha", Design.alpha),
            effect=number("canary-effect", Design.effect),
            min_sessions=number("canary-min-sessions", Design.min_sessions, int),
            max_sessions=number("canary-max-sessions", Design.max_sessions, int),
        )
    except InvalidInput as exc:
        raise ConfigError(f"recipe.config.{exc.message}", field=exc.field) from exc
    return CanaryPlan(share, design) if share > 0 else None


def arm_of(canary: str, session: str, share: float) -> str:
    """``canary`` or ``control`` for ``session``: the same answer for the same canary and session,
    anywhere (a hash, not a draw)."""
    digest = hashlib.sha256(f"{canary}\0{session}".encode()).digest()
    return "canary" if int.from_bytes(digest[:8], "big") / 2**64 < share else "control"


class CanaryWatch:
    """One scenario's canary: started by the learning worker, read by the inference path (which
    arm serves a session), decided by the worker's polls or by a person.

    ``publish(tree, base, state)`` publishes the candidate (the worker's path: the chain's CAS,
    then delivery to serving); ``serve(state)`` and ``drop(state)`` put the candidate's weights in
    front of its sessions and take them away (weights recipes; a no-op for harness trees).
    """

    def __init__(
        self,
        scenario: Scenario,
        plan: CanaryPlan | None,
        *,
        publish: Callable[[dict[str, Any]], Release],
        serve: Callable[[dict[str, Any]], None] = lambda state: None,
        drop: Callable[[dict[str, Any]], None] = lambda state: None,
    ) -> None:
        self.scenario = scenario
        self.plan = plan
        self._publish = publish
        self._serve = serve
        self._drop = drop
        self._lock = threading.Lock()  # one change of the canary at a time in this process
        self._record: CanaryRecord | None = scenario.canary.read()
        self._assigned: dict[str, str] = {}
        self._decision: Decision | None = None
        self._seen: str | None = None  # the data tip the last evaluation read
        self._checked = 0.0
        if self.running is not None:
            self._resume()

    # -- reading ---------------------------------------------------------------------------

    @property
    def running(self) -> dict[str, Any] | None:
        record = self._record
        return record.state if record is not None and record.state.get("state") == "running" else None

    def status(self) -> dict[str, Any]:
        """The canary now (or the last one, ended), with its arms' counts and the test's state."""
        record = self._record
        if record is None:
            return {"canary": None, "plan": self.plan.to_json() if self.plan else None}
        state = dict(record.state)
        if state.get("state") == "running":
            decision = self._evaluate(force=True)
            state["test"] = decision.to_json() if decision else None
        return {"canary": state, "plan": self.plan.to_json() if self.plan else None}

    def arm(self, session: str | None, *, opens: bool = True) -> tuple[str, str] | None:
        """``(arm, release name)`` for a request of ``session`` while a canary runs, else None.
        ``opens``: the request opens its conversation (no answer of the model in it yet): an
        unseen session that does not began before the canary and stays on control."""
        state = self.running
        if state is None or not session:
            return None
        arm = self._assigned.get(session)
        if arm is None:
            arm = arm_of(state["name"], session, float(state["share"])) if opens else "control"
            if len(self._assigned) < 100_000:  # bounded: a flood of tags cannot grow it without end
                self._assigned[session] = arm
        return arm, state["name"] if arm == "canary" else state["base"]

    # -- starting and ending ---------------------------------------------------------------

    def start(
        self, step: int, *, tree: str, base: Release, operation: str, ask: str | None, kind: str
    ) -> dict:
        """Make candidate ``step`` the canary against ``base``; raises ConflictError if one runs."""
        if self.plan is None:
            raise InvalidInput("canaries are off (recipe.config.canary-share is 0)", field="canary-share")
        with self._lock:
            current = self.scenario.canary.read()
            if current is not None and current.state.get("state") == "running":
                raise ConflictError(f"canary {current.state['name']} is still running")
            state = {
                "name": step_name(step),
                "step": step,
                "tree": tree,
                "kind": kind,
                "operation": operation,
                "ask": ask,
                "base": base.name,
                "base_commit": base.commit,
                "after": str(self.scenario.data.last_id() or ""),
                **self.plan.to_json(),
                "state": "running",
                "started_at": time.time(),
            }
            self._record = self.scenario.canary.write(
                state,
                expected=current.commit if current else None,
                subject=f"canary {state['name']} against {base.name}: {self.plan.share:.0%} of new sessions",
            )
            self._assigned = {}
            self._decision = None
            self._seen = None
        self._serve(state)
        return state

    def decide_now(self) -> dict[str, Any] | None:
        """The worker's poll: evaluate the running canary and act on a decision.  Returns the
        canary's state when it ended now."""
        state = self.running
        if state is None:
            return None
        if self._published(state) is not None:
            return self._end(
                "promoted", self._evaluate(force=True), why="published before the daemon stopped"
            )
        if self._moved():
            return self._end("superseded", None, why="the release chain moved while the canary ran")
        decision = self._evaluate()
        if decision is None or decision.state == "running":
            return None
        if decision.state == "promote":
            return self._end("promoted", decision, why=decision.why)
        return self._end("retired" if decision.state == "retire" else "expired", decision, why=decision.why)

    def stop(self, by: str = "a person") -> dict[str, Any]:
        if self.running is None:
            raise NotFound("no canary is running", field="canary")
        decision = self._evaluate(force=True)
        return self._end("stopped", decision, why=f"stopped by {by}")

    def promote(self, by: str = "a person") -> dict[str, Any]:
        if self.running is None:
            raise NotFound("no canary is running", field="canary")
        if self._moved():
            self._end("superseded", None, why="the release chain moved while the canary ran")
            raise ConflictError("the release chain moved while the canary ran: it was ended, not promoted")
        decision = self._evaluate(force=True)
        state = self._end("promoted", decision, why=f"promoted by {by}")
        if state["state"] != "promoted":  # another node published first: the canary ended unpublished
            raise ConflictError(f"canary {state['name']} was not published: {state['why']}")
        return state

    def _moved(self) -> bool:
        state = self.running or {}
        tip = self.scenario.releases.tip()
        return tip is None or (tip.commit != state.get("base_commit") and self._published(state) is None)

    def _published(self, state: Mapping[str, Any]) -> Release | None:
        """The release the canary became, when a promote published it and stopped before it
        could say so (killed between the two writes): the chain's tip names its step."""
        tip = self.scenario.releases.tip()
        return tip if tip is not None and tip.source == f"candidate {state.get('step')}" else None

    def _end(self, how: str, decision: Decision | None, *, why: str) -> dict[str, Any]:
        with self._lock:
            record = self.scenario.canary.read()
            if record is None or record.state.get("state") != "running":
                self._record = record
                raise ConflictError("the canary already ended")
            state = {
                **record.state,
                "state": how,
                "ended_at": time.time(),
                "why": why,
                "decision": decision.to_json() if decision else None,
            }
            done = self._published(state)
            if how == "promoted" or done is not None:
                how = state["state"] = "promoted"
                try:
                    release = done or self._publish(state)
                except ConflictError as exc:
                    how, state["state"] = "superseded", "superseded"
                    state["why"] = f"{why}; not published: {exc.message}"
                else:
                    state["release"] = release.name
            subject = f"canary {state['name']} {how}" + (
                f" as {state['release']}" if "release" in state else ""
            )
            self._record = self.scenario.canary.write(state, expected=record.commit, subject=subject)
        self._drop(state)
        log.info("%s: %s (%s)", self.scenario.name, subject, state["why"])
        return state

    # -- evidence ----------------------------------------------------------------------------

    def _resume(self) -> None:
        """After a restart: the sessions already assigned, read back from the records."""
        state = self.running or {}
        for session, arm in self._tally(state)[2].items():
            self._assigned[session] = arm
        self._serve(state)

    def _evaluate(self, *, force: bool = False) -> Decision | None:
        """The test on the sessions so far: read again only when the data branch moved (and, for
        the worker's polls, at most every :data:`_EVALUATE_EVERY_S`; ``force``: now).  The
        canary's own design is used, whatever the settings are now."""
        state = self.running
        if state is None:
            return self._decision
        now = time.monotonic()
        tip = self.scenario.data.tip()
        seen = str(tip.id) if tip is not None else None
        if self._decision is not None and seen == self._seen:
            return self._decision
        if not force and now - self._checked < _EVALUATE_EVERY_S:
            return self._decision
        control, canary, _ = self._tally(state)
        design = Design(
            alpha=float(state["alpha"]),
            effect=float(state["effect"]),
            min_sessions=int(state["min_sessions"]),
            max_sessions=int(state["max_sessions"]),
        )
        self._decision = decide(control, canary, design)
        self._seen, self._checked = seen, now
        return self._decision

    def _tally(self, state: Mapping[str, Any]) -> tuple[list[float], list[float], dict[str, str]]:
        """The scored sessions of each arm since the canary began, and every session's arm."""
        after = state.get("after") or None
        items = self.scenario.data.iter_items(("record", "report"), after=after)
        control: list[float] = []
        canary: list[float] = []
        arms: dict[str, str] = {}
        names = {state["base"]: "control", state["name"]: "canary"}
        for session in group_sessions(items):
            served = set(session.releases)
            if session.continues or len(served) != 1:
                continue  # began before the canary, or saw both arms (or another release)
            arm = names.get(next(iter(served)) or "")
            if arm is None:
                continue
            arms[session.id] = arm
            score = session.score
            if score is not None:
                (canary if arm == "canary" else control).append(min(1.0, max(0.0, score)))
        return control, canary, arms
