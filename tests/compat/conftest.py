"""Compatibility tests: the daemon fixtures of tests/daemon."""

from __future__ import annotations

from tests.daemon.conftest import RunningReef, make_reef, upstream

__all__ = ["RunningReef", "make_reef", "upstream"]
