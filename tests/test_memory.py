"""A learning step's memory (``reef_core.memory``): the peak a watch reads covers what
happened inside it and only since it began, an overlapping watch does not reset another's,
memory a step freed goes back to the system, and ``reef serve``'s threads share two malloc
arenas (the operator's ``MALLOC_ARENA_MAX`` left as it is)."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch

from reef_core import memory
from tests.daemon.test_process import CHAT, start
from tests.fakes.upstream import ScriptedUpstream, upstream_fixture

__all__ = ["upstream_fixture"]

MB = 1 << 20

pytestmark = pytest.mark.skipif(
    not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux's /proc/self/clear_refs"
)


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def touch(megabytes: int) -> None:
    """Make ``megabytes`` resident, then free them."""
    block = torch.ones(megabytes * MB // 4)
    assert float(block[-1]) == 1.0
    del block


def test_the_peak_covers_the_block_and_only_since_it_began():
    with memory.watch() as peak:
        before = rss()
        touch(300)
        high = peak.read()
    assert high is not None and high >= before + 250 * MB
    with memory.watch() as quiet:
        low = quiet.read()
    assert low is not None and low < high - 200 * MB  # the mark was reset: the old peak is not read


def test_a_watch_that_overlaps_another_does_not_reset_its_peak():
    with memory.watch() as outer:
        before = rss()
        touch(300)
        with memory.watch() as inner:
            inner_peak = inner.read()
        outer_peak = outer.read()
    assert outer_peak is not None and outer_peak >= before + 250 * MB
    assert inner_peak is not None and inner_peak >= outer_peak - MB  # the first watch's start holds


def test_memory_freed_in_small_blocks_goes_back_to_the_system():
    blocks = [bytes(64 * 1024) + b"x" for _ in range(3000)]  # ~190 MB of malloc'd blocks
    kept = blocks[-1]  # the heap's top stays in use: glibc does not shrink it by itself
    held = rss()
    del blocks
    memory.give_back()
    assert rss() < held - 100 * MB
    assert kept.endswith(b"x")


HEAP = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit


def arena_heaps(pid: int) -> list[str]:
    """The heaps of the malloc arenas other than the main one in process ``pid``, as their
    ``/proc/PID/maps`` lines.  glibc reserves each as 64 MiB at a multiple of 64 MiB, with no
    access, and opens it read-write from its start as it grows: an anonymous read-write mapping
    at such an address that is the whole 64 MiB, or that the reserved rest follows up to the
    64 MiB boundary.  (A looser reading, any anonymous read-write mapping at such an address,
    also counted a thread stack or a large block that happened to start there.)"""
    rows = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        span, perms, *rest = line.split()
        start, end = (int(half, 16) for half in span.split("-"))
        rows.append((start, end, perms, len(rest) == 3, line))  # offset, device, inode: no path
    heaps = []
    for (start, end, perms, anonymous, line), after in zip(rows, [*rows[1:], None], strict=True):
        if not (anonymous and perms.startswith("rw") and start % HEAP == 0 and end - start <= HEAP):
            continue
        reserved = after is not None and after[0] == end and after[2].startswith("---") and after[3]
        if end - start == HEAP or (reserved and after[1] >= start + HEAP):
            heaps.append(line)
    return heaps


@pytest.mark.parametrize("operator_cap", [None, "8"], ids=["reef's cap", "the operator's"])
def test_the_daemons_threads_share_two_malloc_arenas(
    tmp_path: Path, upstream: ScriptedUpstream, operator_cap: str | None
):
    """Every thread the daemon starts (event loop, its executors, the store's writers) allocates
    from the same two arenas, so their freed memory is one pool, not one high-water per thread;
    with ``MALLOC_ARENA_MAX`` set, the operator's number holds (and the threads spread wider)."""
    env = {"MALLOC_ARENA_MAX": operator_cap or ""}  # empty: unset, whatever the tests run under
    proc, url = start(tmp_path, upstream.url, env=env)
    try:

        def ask(n: int) -> int:
            headers = {"x-reef-scenario": f"s{n % 4}"}
            answer = httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=headers, timeout=30)
            return answer.status_code

        with ThreadPoolExecutor(8) as pool:  # concurrent requests: records written from several threads
            assert set(pool.map(ask, range(32))) == {200}
        heaps = arena_heaps(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    if operator_cap is None:
        assert len(heaps) <= memory.ARENAS - 1, heaps  # the main arena is the heap's, not a mapping
    else:
        assert len(heaps) > memory.ARENAS - 1, heaps
