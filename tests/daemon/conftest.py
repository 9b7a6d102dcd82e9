"""A real reef daemon on a loopback port, in front of the scripted upstream."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from reef_core.config import load_settings
from reef_core.daemon import build_app
from reef_core.daemon.app import announce
from reef_core.store import ScenarioReader, Store
from tests.fakes.upstream import ScriptedUpstream


class RunningReef:
    """``build_app`` served by aiohttp in a thread of its own, on 127.0.0.1 and a free port."""

    def __init__(self, tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> None:
        self.state_dir = tmp_path / "state"
        self.settings = load_settings(
            overrides=["--storage.state-dir", str(self.state_dir), "--storage.pack-every", "0", *flags],
            env=env or {},
            cwd=tmp_path,
        )
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.url = ""

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self.app = build_app(self.settings)
        self._runner = web.AppRunner(self.app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        announce(self.app, self.url)
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def start(self, timeout: float = 10) -> RunningReef:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("reef did not start")
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def reader(self, scenario: str) -> ScenarioReader:
        return Store(self.state_dir).reader(scenario)

    def repo(self, scenario: str) -> str:
        return str(self.state_dir / "scenarios" / f"{scenario}.git")


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        yield server


@pytest.fixture
def make_reef(tmp_path: Path, upstream: ScriptedUpstream):
    started: list[RunningReef] = []

    def make(*flags: str, api: str = "openai", env: dict[str, str] | None = None) -> RunningReef:
        reef = RunningReef(
            tmp_path / f"reef{len(started)}",
            "--inference.upstream-url",
            upstream.url,
            "--inference.upstream-api",
            api,
            *flags,
            env=env,
        )
        started.append(reef.start())
        return reef

    yield make
    for reef in started:
        reef.stop()
