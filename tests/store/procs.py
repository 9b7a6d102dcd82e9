"""Worker processes for the crash and race tests (``python -m tests.store.procs COMMAND …``), and
the tests' readers of Linux ``/proc``: processes, their children, whether one runs, its descriptors."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from reef_core.errors import ConflictError
from reef_core.store import ReleaseChain, Store, StoreOptions, build_tree
from reef_core.store.repo import RepoHandle


def append_until_killed(state_dir: str, threads: int) -> None:
    """Append from several threads and print each id once acknowledged, until SIGKILLed."""
    scenario = Store(Path(state_dir), StoreOptions(pack_every=300)).open("crash", create=True)
    out_lock = threading.Lock()

    def loop(k: int) -> None:
        n = 0
        while True:
            # even threads ask to write in place when the writer is idle, odd ones queue
            body = {"thread": k, "n": n, "pad": "x" * (n % 200)}
            item_id = scenario.append("record", body, now=k % 2 == 0).result()
            with out_lock:
                sys.stdout.write(item_id + "\n")
                sys.stdout.flush()
            n += 1

    print("ready", flush=True)
    for k in range(threads):
        threading.Thread(target=loop, args=(k,), daemon=True).start()
    while True:
        time.sleep(1)


def publish_rounds(repo_path: str, worker: int, rounds: int, start_at: float) -> None:
    """Race the other workers: each round, all read the tip, wait for the same instant, publish.

    Prints ``round won|lost`` lines.  Rounds are paced by the wall clock so every worker
    attempts round r at the same moment, from the tip they all saw.
    """
    chain = ReleaseChain(RepoHandle(Path(repo_path)))
    repo = chain._handle.repo
    for r in range(rounds):
        moment = start_at + r * 0.15
        time.sleep(max(0.0, moment - 0.07 - time.time()))
        tip = chain.tip()
        tree = build_tree(repo, {"worker": str(worker).encode(), "round": str(r).encode()})
        time.sleep(max(0.0, moment - time.time()))
        try:
            release = chain.publish(tree, expected=tip.commit if tip else None, operation="evolve")
            print(f"{r} won {release.number}", flush=True)
        except ConflictError:
            print(f"{r} lost", flush=True)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "append":
        append_until_killed(args[0], int(args[1]))
    elif command == "publish":
        publish_rounds(args[0], int(args[1]), int(args[2]), float(args[3]))
    else:
        raise SystemExit(f"unknown command {command}")


def processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, state) for every process (Linux ``/proc``)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[int(entry)] = (int(fields[1]), int(fields[2]), fields[0])
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first."""
    table = processes()
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, (ppid, _, _) in table.items() if ppid == parent]
        found += children
        frontier += children
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process: not gone, and not a zombie (which has already died)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def descriptors(pid: int | str = "self") -> list[str]:
    """What each open descriptor of process ``pid`` points at (a path, ``socket:[inode]``, …);
    one closed while they are listed is left out."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return found
