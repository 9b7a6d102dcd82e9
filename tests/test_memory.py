"""A learning step's memory (``reef_core.memory``): the peak a watch reads covers what
happened inside it and only since it began, an overlapping watch does not reset another's, and
memory a step freed goes back to the system."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from reef_core import memory

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
