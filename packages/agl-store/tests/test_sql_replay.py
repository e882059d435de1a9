"""``SqlReplayCache`` of a server without workers (holds in memory): which answers it replays, and that a
new key costs no read of the database."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agl.store import SqlLightningStore
from agl.store.http.server._replay import RecordedAnswer
from agl.store.sql._replay import SqlReplayCache
from agl.testing.clock import ManualClock
from agl.testing.store.sql import SQL_BACKENDS, fresh_database


def _answer(n: int) -> RecordedAnswer:
    return RecordedAnswer(201, [(b"content-type", b"application/json")], b'{"n": %d}' % n)


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_replays_what_this_run_and_the_one_before_recorded_within_its_bounds(
    backend: str, tmp_path: Path
) -> None:
    async def main(url: str, kwargs: dict[str, Any]) -> None:
        clock = ManualClock(1_000_000.0)
        store = SqlLightningStore(url, **kwargs)
        try:
            cache = SqlReplayCache(
                store, "run-1", shared_holds=False, ttl_seconds=60, max_entries=3, clock=clock
            )
            for n in range(4):
                assert await cache.claim(b"k%d" % n) is None
                await cache.release(b"k%d" % n, _answer(n))
            assert await cache.claim(b"k0") is None  # past max_entries: applied again, not replayed
            await cache.release(b"k0", None)
            assert await cache.claim(b"k3") == _answer(3)
            assert await cache.claim(b"new") is None
            await cache.release(b"new", None)  # forgotten: a retry runs for real
            assert await cache.claim(b"new") is None
            await cache.release(b"new", None)

            restarted = SqlReplayCache(
                store, "run-2", shared_holds=False, ttl_seconds=60, max_entries=3, clock=clock
            )
            assert await restarted.claim(b"k2") == _answer(2)
            clock.advance(61)  # past the ttl: applied again
            assert await restarted.claim(b"k3") is None
            await restarted.release(b"k3", _answer(30))
            assert await restarted.claim(b"k3") == _answer(30)
        finally:
            await store.close()

    with fresh_database(backend, tmp_path) as (url, kwargs):
        asyncio.run(main(url, kwargs))


def test_a_new_key_is_claimed_without_reading_the_database(tmp_path: Path) -> None:
    async def main() -> None:
        store = SqlLightningStore(f"sqlite:///{tmp_path / 'r.db'}")
        try:
            cache = SqlReplayCache(store, "run", shared_holds=False)
            assert await cache.claim(b"first") is None  # the first claim reads the keys with answers
            await cache.release(b"first", _answer(1))
            reads_before = store._db.reads
            for n in range(20):
                assert await cache.claim(b"fresh-%d" % n) is None
                await cache.release(b"fresh-%d" % n, _answer(n))
            assert store._db.reads == reads_before
            assert await cache.claim(b"first") == _answer(1)  # a real retry reads its answer
            assert store._db.reads == reads_before + 1
        finally:
            await store.close()

    asyncio.run(main())
