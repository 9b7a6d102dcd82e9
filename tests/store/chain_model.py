"""A model of "one release chain everywhere" under faults (issue 29), for
``tests/store/test_chain_model.py`` and ``bench/sync.py --fault-events``.

Three nodes (``storage.node`` a, b and c, each its own state directory and scenario repository)
share one file remote (a bare repository).  A run is a list of :class:`Event` drawn from a seed
(:func:`draw_events`, a pure function of the seed: the same seed is the same run), played in
order against the real store, real git and the real remote:

* ``append N``: a record on node N (acknowledged: ``append_sync`` returned its id);
* ``learn N``: a new tree through ``ReleaseChain.publish`` with the ``RemotePublisher``, as the
  learning worker publishes (a lost lease is retried once on the new tip, as its rebase does);
* ``rollback N back=K``: ``ReleaseChain.rollback`` to K releases before the tip (retried on a
  new tip, as ``POST /rollback`` does);
* ``sync N``: :func:`reef_core.store.sync.sync`, vetting what it adopts with the daemon's own
  ``reef_core.release.adoption.admit`` (as do the publisher's lease-lost adoptions; the trees
  are harness rules, so every release is admitted, through the vetting's every step);
* ``away`` / ``back``: the bare repository renamed away and back (every git call fails, then
  works again);
* ``restart N``: node N's scenario closed and opened again (its crash recovery runs);
* ``kill N OP at=K delay=D [children]``: node N's scenario closed, a subprocess (forked from a
  :class:`Forker` that has imported the store, so it starts in milliseconds) opens it, appends one
  record (acknowledged to the test), runs OP (``sync``, ``learn`` or ``rollback``), and is
  SIGKILLed from here at the K-th step of OP (``at=after:move_ref``, ``…#2``: at a step named):
  the entry or exit of a step of ``sync.py``, of the chain's ref moves, of each git command, or
  while a git command runs (then after D ms).  With ``children`` the node's git processes are
  killed too, else they run on as a killed daemon's do; either way what they started on the
  remote's side (``git receive-pack``) runs on, and all are waited for.  Counting steps instead
  of milliseconds makes a kill land in the same place when a run is replayed (but for the D ms
  of a running git command), so a failure replays and shrinks; an OP that ends before step K
  simply completes.  Then the node is opened again (a restart);
* ``check``: every node syncs (a, b, c, a, b: after that every node has seen every other's
  push) and, when the remote is there, the invariants below are checked.

Every run ends with ``back`` and ``check``.  The invariants (:data:`INVARIANTS`), each with the
words a failure is reported under:

* ``one-commit-per-number``: every vN names one commit on every node and on the remote (the
  chains' release N and the tags vN, together);
* ``every-release-tagged``: every release on each node's chain and on the remote's has its tag
  (pointing at it);
* ``no-tag-moved``: no tag of any repository ever names a commit other than the one it named
  when first seen there (checked after every event); the one exception is the documented
  supersede: a node's tag of a release that never reached the remote, kept under
  ``refs/reef/superseded/``;
* ``linear-chain``: each release's only parent is the previous release, down to v1;
* ``records-everywhere``: every acknowledged record is on every node;
* ``fsck-clean``: ``git fsck`` is clean on every repository;
* ``no-unexpected-error``: no operation raised anything but the ``ConflictError`` a lost race
  is (``sync`` never raises for what the remote did; a publish raises only that).

A failing run is cut at the first event that broke an invariant and :func:`shrink`-ed (delta
debugging over the events, each candidate replayed in a fresh directory with ``back, check``
after it, and counted as failing when it breaks one of the same invariants) to the shortest
sequence found within a time budget.  It starts from the events as played, each kill naming the
step it struck (``at=after:_fetch``; ``at=never`` for one whose operation ended first), so that
dropping an earlier event does not move a kill elsewhere.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pygit2

from reef_core.errors import ConflictError
from reef_core.release.adoption import admit
from reef_core.store import RELEASE_REF, Scenario, Store, StoreOptions, build_tree, parse_trailers
from reef_core.store import adopt as adopt_module
from reef_core.store import push as push_module
from reef_core.store import remotes as remotes_module
from reef_core.store import sync as sync_module
from reef_core.store.releases import ReleaseChain
from reef_core.store.remotes import add_remote
from reef_core.store.repo import init_bare
from tests.store.procs import descendants, processes

NODES = ("a", "b", "c")
SCENARIO = "s"
REMOTE = "origin"
CHECK_ORDER = ("a", "b", "c", "a", "b")
INVARIANTS = (
    "one-commit-per-number",
    "every-release-tagged",
    "no-tag-moved",
    "linear-chain",
    "records-everywhere",
    "fsck-clean",
    "no-unexpected-error",
)
#: how often each kind of event is drawn (out of the sum)
WEIGHTS = {
    "append": 24,
    "learn": 14,
    "rollback": 5,
    "sync": 16,
    "away": 3,
    "back": 6,
    "restart": 4,
    "kill": 8,
    "check": 7,
}
#: kill steps are drawn from 1..this per operation: about as many as the operation has
STEPS = {"sync": 30, "learn": 12, "rollback": 12}
_OPTIONS = StoreOptions(pack_every=0)  # no background repack: a replay does what the run did
_GIT_TIMEOUT_S = 60.0
NEVER = "never"  # a kill's step no operation has: it runs to its end


# -- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    kind: str
    node: str = ""
    op: str = ""  # kill: the operation struck
    at: int = 0  # kill: the step it is struck at (counted); rollback: how many releases back
    delay_ms: int = 0  # kill while a git command runs: how long it runs first
    children: bool = False  # kill: its git processes too
    step: str = ""  # kill: the step it is struck at, named (``after:move_ref``, ``…#2``)

    def __str__(self) -> str:
        if self.kind == "kill":
            text = f"kill {self.node} {self.op} at={self.step or self.at} delay={self.delay_ms}"
            return text + (" children" if self.children else "")
        if self.kind == "rollback":
            return f"rollback {self.node} back={self.at}"
        return f"{self.kind} {self.node}".strip()


def parse_event(text: str) -> Event:
    """The event :meth:`Event.__str__` wrote (``"kill a sync at=7 delay=3 children"``)."""
    kind, *words = text.split()
    node = words.pop(0) if words and words[0] in NODES else ""
    values = dict(w.split("=", 1) for w in words if "=" in w)
    if kind == "kill":
        op = next(w for w in words if "=" not in w and w != "children")
        at = values["at"]
        return Event(
            kind,
            node,
            op,
            int(at) if at.isdigit() else 0,
            int(values.get("delay", 0)),
            children="children" in words,
            step="" if at.isdigit() else at,
        )
    if kind == "rollback":
        return Event(kind, node, at=int(values.get("back", 1)))
    return Event(kind, node)


def parse_events(text: str) -> list[Event]:
    return [parse_event(line) for line in text.strip().splitlines() if line.strip()]


def draw_events(seed: int, count: int) -> list[Event]:
    """``count`` events drawn from ``seed`` (the same list for the same seed, whatever the state)."""
    rng = random.Random(seed)
    kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
    events = []
    for _ in range(count):
        kind = rng.choices(kinds, weights)[0]
        node = rng.choice(NODES)
        if kind in ("away", "back", "check"):
            events.append(Event(kind))
        elif kind == "rollback":
            events.append(Event(kind, node, at=rng.randint(1, 3)))
        elif kind == "kill":
            op = rng.choices(("sync", "learn", "rollback"), (5, 4, 1))[0]
            events.append(
                Event(kind, node, op, rng.randint(1, STEPS[op]), rng.randint(0, 30), rng.random() < 0.5)
            )
        else:
            events.append(Event(kind, node))
    return events


# -- the operations, shared by the test process and the killed subprocess --------------------------


def learn(scenario: Scenario, text: str) -> str:
    """Publish a new tree as the learning worker does; a lost race is retried once on the new tip."""
    chain = scenario.releases
    outcome = ""
    for _ in range(2):
        with scenario.publish_lock:
            tip = chain.tip()
            tree = build_tree(scenario.handle.repo, {"rules/agents.md": text.encode()})
            try:
                release = chain.publish(
                    tree,
                    expected=tip.commit if tip else None,
                    operation="learn",
                    verdict="selected",
                    source=text,
                )
            except ConflictError as exc:
                outcome = f"conflict ({exc.message})"
                continue
        return f"published {release.name}"
    return outcome


def rollback(scenario: Scenario, back: int) -> str:
    """Roll back ``back`` releases before the tip, retried on a new tip as ``POST /rollback`` does."""
    chain = scenario.releases
    outcome = "no release"
    for _ in range(3):
        with scenario.publish_lock:
            tip = chain.tip()
            if tip is None:
                return outcome
            target = max(1, tip.number - back)
            try:
                release = chain.rollback(target, expected=tip.commit)
            except ConflictError as exc:
                outcome = f"conflict ({exc.message})"
                if chain.tip() == tip:
                    return outcome
                continue
        return f"published {release.name} (rollback to v{target})"
    return outcome


def open_node(state: Path, node: str) -> Scenario:
    """Node ``node``'s scenario, opened for writing and publishing through the remote."""
    scenario = Store(state, _OPTIONS).open(SCENARIO, create=True, node=node)
    scenario.releases.publisher = sync_module.RemotePublisher(
        scenario, REMOTE, timeout=_GIT_TIMEOUT_S, admit=admit
    )
    return scenario


# -- the subprocess that is killed ------------------------------------------------------------------


class _Stopped(Exception):
    pass


class _Steps:
    """Counts the steps of an operation in the subprocess; at step ``at`` (or the step named
    ``step``: ``after:move_ref`` its first, ``after:move_ref#2`` its second) it tells the test
    where it is and waits to be killed."""

    def __init__(self, conn: Connection, at: int, step: str) -> None:
        self.conn, self.at, self.count = conn, at, 0
        self.name, _, nth = step.partition("#")
        self.nth = int(nth or 1)
        self.seen: dict[str, int] = {}

    def step(self, label: str) -> None:
        self.count += 1
        self.seen[label] = self.seen.get(label, 0) + 1
        named = bool(self.name) and label == self.name and self.seen[label] == self.nth
        if self.count == self.at or named:
            nth = self.seen[label]
            self.conn.send(("at", label if nth == 1 else f"{label}#{nth}", self.count))
            time.sleep(3600)  # SIGKILLed here
            raise _Stopped(label)

    def wrap(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        def traced(*args: Any, **kwargs: Any) -> Any:
            label = f"git-{_verb(args[1])}" if name == "run_git" else name
            self.step(f"before:{label}")
            result = fn(*args, **kwargs)
            self.step(f"after:{label}")
            return result

        return traced

    def install(self) -> None:
        for name in (
            "_fetch",
            "_adopt_data",
            "_adopt_release",
            "_adopt_tags",
            "_supersede",
            "_pending_for",
            "_admitted",
            "_hold",
            "_settle_held",
            "_push_lfs",
            "_push_refs",
            "_push_chain",
            "_lease_push",
            "_chain_push",
            "push_release",
            "move_ref",
            "create_ref_exclusive",
            "run_git",
        ):
            for module in (sync_module, adopt_module, push_module):  # where the steps live
                if hasattr(module, name):  # the steps the sync modules have now
                    setattr(module, name, self.wrap(getattr(module, name), name))
        for name in ("_swap", "_tag_ref", "repair_tags", "create_candidate", "mark_pending"):
            setattr(ReleaseChain, name, self.wrap(getattr(ReleaseChain, name), name))
        steps = self

        class Popen(subprocess.Popen[bytes]):
            def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
                super().__init__(args, *rest, **kwargs)
                steps.step(f"running:git-{_verb(args)}")

        remotes_module.subprocess.Popen = Popen  # type: ignore[assignment,misc]


def _verb(arguments: Iterable[str]) -> str:
    return next((a for a in arguments if a in ("fetch", "push", "lfs")), "?")


def child_op(
    conn: Connection, state: str, node: str, op: str, at: int, step: str, text: str, code: str
) -> None:
    """The killed subprocess: open node ``node``, append one record (told to the test once
    acknowledged), run ``op``, stopping at step ``at`` (or ``step``) to be killed.  ``code``: the
    test's ``sync.py``, which this process must be running too."""
    try:
        if sync_module.__file__ != code:
            raise RuntimeError(f"the subprocess runs {sync_module.__file__}, the test {code}")
        scenario = open_node(Path(state), node)
        item = scenario.append_sync("record", {"node": node, "by": "subprocess", "text": text})
        conn.send(("ack", item))
        steps = _Steps(conn, at, step)
        steps.install()
        if op == "sync":
            result = f"sync {sync_module.sync(scenario, REMOTE, timeout=_GIT_TIMEOUT_S, admit=admit).outcome}"
        elif op == "learn":
            result = learn(scenario, text)
        else:
            result = rollback(scenario, 1)
        scenario.close()
        conn.send(("done", result, steps.count))
    except _Stopped:
        pass
    except BaseException:
        conn.send(("error", traceback.format_exc()))


# -- what the repositories hold ---------------------------------------------------------------------


@dataclass
class View:
    """One repository's release chain (newest first), tags and superseded releases."""

    chain: list[tuple[str, int, list[str]]]  # commit, release number, parents
    tags: dict[int, str]  # N -> the commit vN names
    superseded: set[str]


def _number(commit: pygit2.Commit) -> int:
    value = parse_trailers(commit.message).get("Reef-Release", "")
    return int(value) if value.isdigit() else -1


def read_view(path: Path) -> View:
    repo = pygit2.Repository(str(path))
    try:
        chain: list[tuple[str, int, list[str]]] = []
        ref = repo.references.get(RELEASE_REF)
        commit = None if ref is None else repo[ref.target].peel(pygit2.Commit)
        while commit is not None and len(chain) < 10_000:
            chain.append((str(commit.id), _number(commit), [str(p) for p in commit.parent_ids]))
            commit = commit.parents[0] if commit.parents else None
        tags, superseded = {}, set()
        for name in repo.references:
            if name.startswith("refs/tags/v") and name[len("refs/tags/v") :].isdigit():
                tags[int(name[len("refs/tags/v") :])] = str(repo.references[name].peel(pygit2.Commit).id)
            elif name.startswith("refs/reef/superseded/"):
                superseded.add(str(repo.references[name].peel(pygit2.Commit).id))
        return View(chain, tags, superseded)
    finally:
        repo.free()


class InvariantBroken(AssertionError):
    """A run broke an invariant (the message is :func:`report`'s)."""


@dataclass(frozen=True)
class Broken:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


def one_commit_per_number(views: dict[str, View]) -> list[Broken]:
    named: dict[int, dict[str, list[str]]] = {}
    for where, view in views.items():
        for commit, number, _ in view.chain:
            named.setdefault(number, {}).setdefault(commit, []).append(f"{where}'s chain")
        for number, commit in view.tags.items():
            named.setdefault(number, {}).setdefault(commit, []).append(f"{where}'s tag")
    return [
        Broken(
            "one-commit-per-number",
            f"v{n} names {len(commits)} commits: "
            + "; ".join(f"{c[:10]} ({', '.join(sources)})" for c, sources in commits.items()),
        )
        for n, commits in sorted(named.items())
        if len(commits) > 1
    ]


def every_release_tagged(views: dict[str, View]) -> list[Broken]:
    found = []
    for where, view in views.items():
        for commit, number, _ in view.chain:
            tag = view.tags.get(number)
            if tag != commit:
                said = "no tag" if tag is None else f"its tag names {tag[:10]}"
                found.append(Broken("every-release-tagged", f"{where}: v{number} ({commit[:10]}) has {said}"))
    return found


def linear_chain(views: dict[str, View]) -> list[Broken]:
    found = []
    for where, view in views.items():
        below_each: list[tuple[str, int, list[str]] | None] = [*view.chain[1:], None]
        for (commit, number, parents), below in zip(view.chain, below_each[: len(view.chain)], strict=True):
            if below is None:
                ok = not parents and number == 1
            else:
                ok = parents == [below[0]] and number == below[1] + 1
            if not ok:
                found.append(
                    Broken(
                        "linear-chain",
                        f"{where}: release {commit[:10]} (v{number}) has parents "
                        f"{[p[:10] for p in parents]}, below it v{below[1] if below else '-'}",
                    )
                )
    return found


def fsck(paths: dict[str, Path]) -> list[Broken]:
    found = []
    for where, path in paths.items():
        result = subprocess.run(
            ["git", "--git-dir", str(path), "fsck", "--no-dangling", "--no-progress"],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
        )
        if result.returncode != 0:
            words = " | ".join((result.stdout + result.stderr).strip().splitlines()[:3])
            found.append(Broken("fsck-clean", f"{where}: git fsck exited {result.returncode}: {words}"))
    return found


# -- processes ------------------------------------------------------------------------------------


def _wait_gone(pids: list[int], timeout: float = 30.0) -> None:
    """Until none of ``pids`` runs.  A zombie counts as gone only once its last thread is: the
    leader of a process killed with threads running shows ``Z`` while they are still exiting,
    and holding its files (the scenario's writer lock)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        table = processes()
        if all(pid not in table or (table[pid][2] == "Z" and _threads(pid) <= 1) for pid in pids):
            return
        time.sleep(0.002)


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


class Forker:
    """A process that has imported this module (and so the store) and forks one child per
    killed operation, so that a child starts in milliseconds whatever the test's ``__main__``
    imported (multiprocessing's forkserver would import that again in every child).

    Each child connects back on a unix socket for its messages; the forker ignores SIGCHLD so
    the kernel reaps its children (each sets it back before starting git)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="chain-model-forker-"))
        self.address = str(self.dir / "socket")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.address)
        self.listener.listen()
        self.listener.settimeout(60)
        code = f"import sys; sys.path[:] = {sys.path!r}; from {__name__} import _forker; _forker()"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def start(self, *args: Any) -> tuple[int, Connection]:
        """A child running :func:`child_op` ``(connection, *args)``: its pid and connection."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps([self.address, *args]) + "\n")
        self.proc.stdin.flush()
        pid = int(self.proc.stdout.readline())
        accepted, _ = self.listener.accept()
        return pid, Connection(accepted.detach())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)
        self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _forker() -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for line in sys.stdin:
        address, *args = json.loads(line)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # or subprocess cannot wait for git
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the forker's stdout is its answers
            try:
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.connect(address)
                child_op(Connection(client.detach()), *args)
            finally:
                os._exit(0)
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()


_FORKER: Forker | None = None


def forker() -> Forker:
    """The one :class:`Forker` of this process (started at its first kill, ended at exit)."""
    global _FORKER
    if _FORKER is None or _FORKER.proc.poll() is not None:
        _FORKER = Forker()
        atexit.register(_FORKER.close)
    return _FORKER


# -- a run ----------------------------------------------------------------------------------------


@dataclass
class Run:
    """What playing a list of events came to."""

    events: list[Event]
    played: int = 0
    seconds: float = 0.0
    broken: list[Broken] = field(default_factory=list)
    failed_at: int | None = None  # index of the event after which an invariant broke
    log: list[str] = field(default_factory=list)
    unstruck: list[str] = field(default_factory=list)  # kills whose operation ended first
    #: the events as played, each kill naming the step it struck (``NEVER``: none), so that
    #: dropping other events before it does not move it (what :func:`shrink` starts from)
    resolved: list[Event] = field(default_factory=list)

    @property
    def invariants(self) -> set[str]:
        return {b.invariant for b in self.broken}


class Model:
    """Three nodes and their remote under ``root``; :meth:`play` runs the events."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.remote = root / "remote.git"
        self.away = root / "away.git"
        init_bare(self.remote)
        self.nodes: dict[str, Scenario] = {}
        for node in NODES:
            store = Store(root / node, _OPTIONS)
            store.create(SCENARIO)
            add_remote(store.path_of(SCENARIO), REMOTE, str(self.remote))
            self.nodes[node] = open_node(root / node, node)
        self.acked: dict[str, str] = {}  # record id -> the node that acknowledged it
        self.first_seen: dict[tuple[str, int], str] = {}  # (repository, N) -> commit vN named first
        self.on_remote: dict[int, set[str]] = {}  # N -> every commit the remote's vN has named
        self.counter = 0
        self._peeled: dict[str, str] = {}  # tag object -> the commit it names
        self._listed: dict[str, tuple[Any, dict[int, str]]] = {}  # path -> (stamps, its tags)
        self.unstruck: list[str] = []  # kill events whose operation ended before their step
        self.resolved: Event | None = None  # the last kill, with the step it struck named

    def close(self) -> None:
        for scenario in self.nodes.values():
            scenario.close()

    def paths(self) -> dict[str, Path]:
        paths = {node: scenario.path for node, scenario in self.nodes.items()}
        paths["remote"] = self.remote if self.remote.exists() else self.away
        return paths

    # -- events -----------------------------------------------------------------------------

    def apply(self, event: Event) -> tuple[str, list[Broken]]:
        """Play one event; what it did, and the invariants it broke."""
        self.counter += 1
        kind, node = event.kind, event.node
        scenario = self.nodes.get(node)
        try:
            if kind == "append":
                assert scenario is not None
                item = scenario.append_sync("record", {"node": node, "n": self.counter})
                self.acked[item] = node
                return f"acknowledged {item}", []
            if kind == "learn":
                assert scenario is not None
                return learn(scenario, f"learned on {node} at {self.counter}"), []
            if kind == "rollback":
                assert scenario is not None
                return rollback(scenario, event.at), []
            if kind == "sync":
                assert scenario is not None
                report = sync_module.sync(scenario, REMOTE, timeout=_GIT_TIMEOUT_S, admit=admit)
                return f"sync {report.outcome}" + (f" adopted {report.adopted}" if report.adopted else ""), []
            if kind == "away":
                if self.remote.exists():
                    self.remote.rename(self.away)
                return "remote away", []
            if kind == "back":
                if self.away.exists():
                    self.away.rename(self.remote)
                return "remote back", []
            if kind == "restart":
                assert scenario is not None
                scenario.close()
                self.nodes[node] = open_node(self.root / node, node)
                return "restarted", []
            if kind == "kill":
                return self._kill(event)
            if kind == "check":
                return self._check()
        except Exception as exc:
            return "raised", [Broken("no-unexpected-error", f"{event}: {type(exc).__name__}: {exc}")]
        raise ValueError(f"unknown event {event}")

    def _kill(self, event: Event) -> tuple[str, list[Broken]]:
        node = event.node
        self.resolved = event
        self.nodes[node].close()
        text = f"learned on {node} at {self.counter} (killed)"
        state = str(self.root / node)
        pid, receive = forker().start(state, node, event.op, event.at, event.step, text, sync_module.__file__)
        what, broken = f"{event.op} ran to its end", []
        try:
            while receive.poll(120):
                try:
                    message = receive.recv()
                except EOFError:
                    break
                if message[0] == "ack":
                    self.acked[message[1]] = node
                elif message[0] == "done":
                    what = f"{message[1]} (not struck: {message[2]} steps, none {event.step or event.at})"
                    self.unstruck.append(str(event))
                    self.resolved = dataclasses.replace(event, at=0, step=NEVER)
                elif message[0] == "error":
                    broken.append(Broken("no-unexpected-error", f"{event}: in the subprocess: {message[1]}"))
                elif message[0] == "at":
                    if message[1].startswith("running:"):
                        time.sleep(event.delay_ms / 1000)
                    self._strike(pid, event.children)
                    what = f"killed at {message[1]} (step {message[2]})"
                    self.resolved = dataclasses.replace(event, at=0, step=message[1])
                    break
            else:
                self._strike(pid, True)
                broken.append(Broken("no-unexpected-error", f"{event}: the subprocess hung"))
        finally:
            receive.close()
            _wait_gone([pid])
            self.nodes[node] = open_node(self.root / node, node)
        return what, broken

    @staticmethod
    def _strike(pid: int, children: bool) -> None:
        """SIGKILL ``pid`` (stopped at a step, so it starts nothing meanwhile); with ``children``
        its git processes too, else they run on and are waited for, as after a daemon's death.

        Only the node's own git processes: the ``git receive-pack`` or ``upload-pack`` that a
        push or fetch to a path runs beside them is the remote's side, which a node's death
        does not kill (on a forge it runs on another machine) and is waited for.  Killed too,
        with the process group, it can leave the bare repository's ref locks behind, after
        which the remote refuses every push of those refs until a person removes them (git's
        own behaviour, not reef's: see the report of issue 29)."""
        below = descendants(pid)
        if children:
            table = processes()
            for child in [p for p in below if table.get(p, (0,))[0] == pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(below)

    def _check(self) -> tuple[str, list[Broken]]:
        if not self.remote.exists():
            return "remote away: not checked", []
        outcomes = []
        for node in CHECK_ORDER:
            report = sync_module.sync(self.nodes[node], REMOTE, timeout=_GIT_TIMEOUT_S, admit=admit)
            outcomes.append(f"{node} {report.outcome}")
        paths = self.paths()
        views = {where: read_view(path) for where, path in paths.items()}
        broken = one_commit_per_number(views) + every_release_tagged(views) + linear_chain(views)
        for item, writer in self.acked.items():
            missing = [n for n, s in self.nodes.items() if not s.data.exists(item)]
            if missing:
                broken.append(
                    Broken("records-everywhere", f"{item} (acknowledged on {writer}) is not on {missing}")
                )
        broken += fsck(paths)
        return "checked after syncs " + ", ".join(outcomes), broken

    def observe(self) -> list[Broken]:
        """``no-tag-moved``, after every event, on every repository."""
        broken = []
        for where, path in self.paths().items():
            for number, commit in self._tags(path).items():
                if where == "remote":
                    self.on_remote.setdefault(number, set()).add(commit)
                first = self.first_seen.setdefault((where, number), commit)
                if first == commit:
                    continue
                kept = first in read_view(path).superseded
                superseded = kept and first not in self.on_remote.get(number, set())
                if where != "remote" and superseded:
                    self.first_seen[(where, number)] = commit  # the documented supersede
                    continue
                broken.append(
                    Broken("no-tag-moved", f"{where}'s v{number} moved from {first[:10]} to {commit[:10]}")
                )
                self.first_seen[(where, number)] = commit  # reported once
        return broken

    def _tags(self, path: Path) -> dict[int, str]:
        """N -> the commit vN names in the repository at ``path``, read from its ref files (a
        tag object is read once: objects never change).

        Read again only when ``refs/tags`` or ``packed-refs`` changed: a ref is written by
        renaming a lock file over it, which changes the directory's mtime; a listing made
        within 50 ms of that mtime is not kept (two changes within one timestamp tick would
        leave the mtime as it was)."""
        stamps = []
        for where in (path / "refs" / "tags", path / "packed-refs"):
            try:
                st = os.stat(where)
            except FileNotFoundError:
                stamps.append((0, 0, 0))
                continue
            stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
        key = (str(path), tuple(stamps))
        kept = self._listed.get(str(path))
        if kept is not None and kept[0] == key:
            return kept[1]
        fresh = all(time.time_ns() - mtime > 50_000_000 for _, mtime, _ in stamps)
        tags = self._read_tags(path)
        self._listed[str(path)] = (key if fresh else None, tags)
        return tags

    def _read_tags(self, path: Path) -> dict[int, str]:
        targets = {}
        with contextlib.suppress(FileNotFoundError), open(path / "packed-refs") as packed:
            for line in packed:
                oid, _, name = line.strip().partition(" ")
                if name.startswith("refs/tags/v"):
                    targets[name] = oid
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(path / "refs" / "tags"):
                with contextlib.suppress(FileNotFoundError), open(entry.path) as ref:
                    targets[f"refs/tags/{entry.name}"] = ref.read().strip()
        tags, repo = {}, None
        try:
            for name, oid in targets.items():
                tail = name[len("refs/tags/v") :]
                if not tail.isdigit() or len(oid) != 40:
                    continue  # a lock file, or a ref being written
                if oid not in self._peeled:
                    repo = repo or pygit2.Repository(str(path))
                    self._peeled[oid] = str(repo[oid].peel(pygit2.Commit).id)
                tags[int(tail)] = self._peeled[oid]
        finally:
            if repo is not None:
                repo.free()
        return tags

    def play(
        self,
        events: list[Event],
        *,
        on_event: Callable[[int, str], None] | None = None,
        final_check: bool = True,
    ) -> Run:
        """Play ``events``, then ``back`` and ``check``; stops after the first event that broke
        an invariant."""
        run = Run(list(events))
        started = time.perf_counter()
        tail = [Event("back"), Event("check")] if final_check else []
        for index, event in enumerate([*events, *tail]):
            self.resolved = None
            what, broken = self.apply(event)
            run.resolved.append(self.resolved or event)
            broken += self.observe()
            line = f"{index:4d} {event!s:<36} {what}"
            run.log.append(line)
            if on_event is not None:
                on_event(index, line)
            run.played = index + 1
            if broken:
                run.broken, run.failed_at = broken, index
                break
        run.seconds = time.perf_counter() - started
        run.unstruck = list(self.unstruck)
        return run


def play(events: list[Event], root: Path | None = None) -> Run:
    """Play ``events`` in a fresh directory (under ``root``, else a temporary one, removed after)."""
    where = Path(tempfile.mkdtemp(prefix="chain-model-", dir=root))
    model = Model(where)
    try:
        return model.play(events)
    finally:
        model.close()
        shutil.rmtree(where, ignore_errors=True)


# -- shrinking ------------------------------------------------------------------------------------


def shrink(
    events: list[Event], invariants: set[str], *, budget_s: float, root: Path | None = None
) -> tuple[list[Event], Run | None, int]:
    """The shortest sublist of ``events`` found within ``budget_s`` that still breaks one of
    ``invariants`` (delta debugging: drop chunks, halving their size when none can go); the
    last failing replay and how many replays it took."""
    deadline = time.monotonic() + budget_s
    replays = 0
    best: Run | None = None

    def fails(candidate: list[Event]) -> bool:
        nonlocal replays, best
        replays += 1
        run = play(candidate, root)
        if run.invariants & invariants:
            best = run
            return True
        return False

    current = list(events)
    chunks = 2
    while len(current) > 1 and time.monotonic() < deadline:
        size = max(1, len(current) // chunks)
        for start in range(len(current) - size, -1, -size):  # later events first: they matter less
            if time.monotonic() >= deadline:
                break
            candidate = current[:start] + current[start + size :]
            if fails(candidate):
                if best is not None and best.failed_at is not None:
                    candidate = candidate[: best.failed_at + 1]  # nothing after the break matters
                current = candidate
                chunks = max(chunks - 1, 2)
                break
        else:
            if size == 1:
                break
            chunks = min(len(current), chunks * 2)
    return current, best, replays


def _listed(broken: list[Broken], most: int = 12) -> list[str]:
    lines = [f"  {b}" for b in broken[:most]]
    return lines + ([f"  … and {len(broken) - most} more"] if len(broken) > most else [])


def report(seed: int | None, run: Run, minimal: list[Event] | None, last: Run | None, replays: int) -> str:
    """A failure, for a person: the invariants, where, and the minimal sequence to replay."""
    lines = [
        f"seed {seed}: after event {run.failed_at} of {len(run.events)} (+ back, check) "
        + ", ".join(sorted(run.invariants))
        + " broke:",
        *_listed(run.broken),
        "the run's last events:",
        *run.log[-8:],
    ]
    if minimal is not None:
        shown = last if last is not None else run
        lines += [
            f"shrunk in {replays} replays to {len(minimal)} events (+ back, check), which break:",
            *_listed(shown.broken),
            "replay it with chain_model.play(chain_model.parse_events('''",
            *(str(e) for e in minimal),
            "'''))",
            "its log:",
            *shown.log,
        ]
    return "\n".join(lines)
