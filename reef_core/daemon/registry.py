"""The scenarios this daemon has open for writing, opened on first use and kept open.

Opening a scenario takes its writer lock and may repair what a killed predecessor left (a
short, blocking job), so it runs in a thread and each name is opened once, whatever the
number of concurrent first requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from reef_core.errors import NotFound
from reef_core.ids import validate_scenario_name
from reef_core.store import Scenario, ScenarioReader, Store

__all__ = ["OpenScenarios"]


class OpenScenarios:
    def __init__(
        self, store: Store, *, implicit: bool, on_open: Callable[[Scenario], None] | None = None
    ) -> None:
        self.store = store
        self.implicit = implicit
        self.on_open = on_open
        self._open: dict[str, Scenario] = {}
        self._opening: dict[str, asyncio.Lock] = {}

    async def get(self, name: str, *, create: bool | None = None) -> Scenario:
        """The open scenario ``name``; created if allowed (default: implicit creation setting)."""
        validate_scenario_name(name)
        scenario = self._open.get(name)
        if scenario is not None:
            return scenario
        lock = self._opening.setdefault(name, asyncio.Lock())
        async with lock:
            scenario = self._open.get(name)
            if scenario is None:
                allow = self.implicit if create is None else create
                if not allow and not self.store.exists(name):
                    raise NotFound(
                        f"no scenario {name!r} (implicit creation is off)", field="x-reef-scenario"
                    )
                scenario = await asyncio.to_thread(self.store.open, name, create=allow)
                self._open[name] = scenario
                if self.on_open is not None:
                    self.on_open(scenario)
        return scenario

    def peek(self, name: str) -> Scenario | None:
        return self._open.get(name)

    def reader(self, name: str) -> ScenarioReader:
        """For reads: the open scenario when this daemon has it, else a lock-free reader."""
        validate_scenario_name(name)
        return self._open.get(name) or self.store.reader(name)

    async def create(self, name: str) -> bool:
        validate_scenario_name(name)
        created = await asyncio.to_thread(self.store.create, name)
        await self.get(name, create=True)
        return created

    async def archive(self, name: str, before_close: Callable[[str], None] | None = None) -> Path:
        validate_scenario_name(name)
        lock = self._opening.setdefault(name, asyncio.Lock())
        async with lock:
            scenario = self._open.pop(name, None)
            if scenario is not None:
                if before_close is not None:
                    await asyncio.to_thread(before_close, name)
                await asyncio.to_thread(scenario.close)
            return await asyncio.to_thread(self.store.archive, name)

    async def close(self) -> None:
        scenarios, self._open = list(self._open.values()), {}
        for scenario in scenarios:
            await asyncio.to_thread(scenario.close)
