"""Who carries out what a person decides in the review TUI: the daemon, or nobody.

Approving, rejecting, rolling back and stopping or promoting a canary go through the daemon's
routes, so its publish lock, its rebase of a stale candidate and its delivery of the new release
stay in charge, exactly as for ``reef promote | reject | rollback | canary``.  The daemon is
also the one to say how a running canary's test stands (it holds the sessions' tally).  With no
daemon the TUI still reads the repositories, and each operation says to start the daemon
instead of writing behind its back.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from reef_core.client import DaemonUnavailable, ReefClient
from reef_core.errors import ConflictError

__all__ = ["DaemonOperator", "Operator", "ReadOnly"]


class Operator(Protocol):
    live: bool  # a daemon answers: operations can be carried out
    description: str  # shown under the title

    def approve(self, scenario: str, step: int) -> str: ...

    def reject(self, scenario: str, step: int) -> str: ...

    def rollback(self, scenario: str, release: str, *, expected: str | None) -> str: ...

    def canary(self, scenario: str) -> dict[str, Any]: ...

    def stop_canary(self, scenario: str) -> str: ...

    def promote_canary(self, scenario: str) -> str: ...

    def page_url(self, page_path: str) -> str: ...

    def close(self) -> None: ...


class DaemonOperator:
    """Operations through a running daemon; each returns the line the TUI shows."""

    live = True

    def __init__(self, client: ReefClient, *, approver: str) -> None:
        self.client = client
        self.approver = approver  # who the releases it approves name: "alice via reef review"
        self.description = f"daemon at {client.url}"
        self._lock = threading.Lock()  # one client, called from worker threads, one at a time

    def approve(self, scenario: str, step: int) -> str:
        with self._lock:
            result = self.client.promote(scenario, step, approved_by=self.approver)
        return f"approved c{step}: {result['release']} now serves {scenario}"

    def reject(self, scenario: str, step: int) -> str:
        with self._lock:
            self.client.reject(scenario, step)
        return f"rejected c{step}: it will never serve {scenario}"

    def rollback(self, scenario: str, release: str, *, expected: str | None) -> str:
        with self._lock:
            result = self.client.rollback(scenario, release, expected=expected)
        return f"rolled back {scenario}: {result['release']} serves the content of {release} again"

    def canary(self, scenario: str) -> dict[str, Any]:
        with self._lock:
            return self.client.canary(scenario)

    def stop_canary(self, scenario: str) -> str:
        with self._lock:
            state = self.client.canary_stop(scenario, by=self.approver)["canary"]
        return f"stopped canary {state['name']}: {state['base']} serves every new session of {scenario}"

    def promote_canary(self, scenario: str) -> str:
        with self._lock:
            state = self.client.canary_promote(scenario, by=self.approver)["canary"]
        if not state.get("release"):  # the chain moved under it: ended, and nothing published
            raise ConflictError(f"canary {state['name']} was {state['state']}, not published: {state['why']}")
        return f"promoted canary {state['name']}: {state['release']} now serves {scenario}"

    def page_url(self, page_path: str) -> str:
        return self.client.url + page_path

    def close(self) -> None:
        self.client.close()


class ReadOnly:
    """No daemon answers: the repositories are shown, and operations say what to do."""

    live = False
    description = "read-only: no daemon answers"

    def __init__(self, url: str) -> None:
        self.url = url

    def _refuse(self, what: str) -> DaemonUnavailable:
        return DaemonUnavailable(
            f"no reef daemon answers at {self.url}: start the daemon (reef serve) to {what}"
        )

    def approve(self, scenario: str, step: int) -> str:
        raise self._refuse("approve")

    def reject(self, scenario: str, step: int) -> str:
        raise self._refuse("reject")

    def rollback(self, scenario: str, release: str, *, expected: str | None) -> str:
        raise self._refuse("roll back")

    def canary(self, scenario: str) -> dict[str, Any]:
        raise self._refuse("see how a canary's test stands")

    def stop_canary(self, scenario: str) -> str:
        raise self._refuse("stop a canary")

    def promote_canary(self, scenario: str) -> str:
        raise self._refuse("promote a canary")

    def page_url(self, page_path: str) -> str:
        raise self._refuse("open release pages")

    def close(self) -> None:
        pass
