"""Ctrl-C for commands that poll the daemon: a flag, not an exception raised mid-request."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["until_interrupted"]


@contextlib.contextmanager
def until_interrupted() -> Iterator[threading.Event]:
    """An event Ctrl-C sets, instead of raising KeyboardInterrupt wherever the program is:
    raised inside the HTTP client, it can leave the connection pool's lock taken, and the
    process then hangs on its way out.  A request under way finishes; the caller's loop
    stops after it.  A second Ctrl-C (a request that does not finish) interrupts as usual."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop  # signals reach only the main thread; nothing to install elsewhere
        return

    def interrupted(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)
