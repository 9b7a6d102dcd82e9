"""Appending from an event loop: asyncio futures the writer settles a batch at a time."""

from __future__ import annotations

import asyncio

import pytest

from reef_core.errors import StoreError
from reef_core.store import DATA_REF
from tests.conftest import git


def _count(repo) -> int:
    return int(git("--git-dir", str(repo), "rev-list", "--count", DATA_REF).stdout.strip())


def test_items_appended_from_a_loop_resolve_there_to_ids_already_on_the_branch(scenario):
    wakes = []

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        original = loop.call_soon_threadsafe

        def counted(callback, *args):
            wakes.append(len(args[0]) if args else 0)
            return original(callback, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        futures = [scenario.append_in_loop("record", {"n": n}) for n in range(300)]
        assert all(isinstance(f, asyncio.Future) for f in futures)
        return list(await asyncio.gather(*futures))

    ids = asyncio.run(main())
    assert ids == sorted(ids) and len(set(ids)) == 300
    assert [scenario.data.get(i).data["n"] for i in ids[::50]] == list(range(0, 300, 50))
    assert _count(scenario.path) == 300
    # one call into the loop per batch, not one per item
    assert sum(wakes) == 300 and len(wakes) < 300


def test_an_item_written_inline_from_a_loop_is_done_when_appended(scenario):
    scenario.append_sync("record", {"n": 0})  # the tip's trees are in memory now

    async def main() -> str:
        future = scenario.append_in_loop("record", {"n": 1}, now=True)
        assert future.done()  # the writer was idle: written in the loop's own thread
        return future.result()

    item_id = asyncio.run(main())
    assert scenario.data.get(item_id).data["n"] == 1


def test_a_wait_given_up_does_not_stop_the_write(scenario):
    async def main() -> None:
        future = scenario.append_in_loop("record", {"n": "left"})
        future.cancel()  # the client went away
        await asyncio.sleep(0)

    asyncio.run(main())
    later = scenario.append_sync("record", {"n": "after"})
    assert _count(scenario.path) == 2
    assert [item.data["n"] for item in scenario.data.iter_items()] == ["left", "after"]
    assert scenario.data.get(later).data["n"] == "after"


def test_a_failed_write_reaches_the_loops_callers_as_an_error(scenario, monkeypatch):
    def broken(batch):
        raise OSError("disk full")

    scenario.append_sync("record", {"n": "before"})
    monkeypatch.setattr(scenario.writer, "_commit_batch", broken)

    async def main() -> None:
        futures = [scenario.append_in_loop("record", {"n": n}) for n in range(5)]
        for future in futures:
            with pytest.raises(StoreError, match="disk full"):
                await future

    asyncio.run(main())
    assert _count(scenario.path) == 1
