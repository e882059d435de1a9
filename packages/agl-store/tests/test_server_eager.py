"""Running a request's coroutine at once (``_eager``) and the serving GC thresholds (``serving_gc``)."""

from __future__ import annotations

import asyncio
import gc

import pytest
from agl.store.http.server._eager import run_eagerly
from agl.store.serving import SERVING_GC_THRESHOLD, serving_gc


async def test_a_coroutine_that_does_not_wait_finishes_in_the_caller() -> None:
    async def quick() -> int:
        return 7

    assert run_eagerly(quick(), asyncio.get_running_loop()) == (True, 7, None)


async def test_a_coroutine_that_waits_goes_on_in_a_task() -> None:
    steps: list[str] = []

    async def slow() -> int:
        steps.append("before")
        await asyncio.sleep(0.01)
        await asyncio.sleep(0)
        steps.append("after")
        return 8

    done, result, task = run_eagerly(slow(), asyncio.get_running_loop())
    assert (done, result, steps) == (False, None, ["before"])
    assert task is not None and await task == 8 and steps == ["before", "after"]


async def test_cancelling_the_task_reaches_the_coroutine_and_errors_propagate() -> None:
    seen: list[str] = []
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def waits() -> None:
        try:
            await gate
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    _, _, task = run_eagerly(waits(), asyncio.get_running_loop())
    assert task is not None
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise KeyError("x")

    _, _, failing = run_eagerly(fails_later(), asyncio.get_running_loop())
    assert failing is not None
    with pytest.raises(KeyError):
        await failing

    async def fails_at_once() -> None:
        raise KeyError("y")

    with pytest.raises(KeyError):
        run_eagerly(fails_at_once(), asyncio.get_running_loop())


def test_serving_gc_raises_the_threshold_and_restores_it() -> None:
    before = gc.get_threshold()
    with serving_gc():
        assert gc.get_threshold() == (SERVING_GC_THRESHOLD, *before[1:])
    assert gc.get_threshold() == before
    gc.set_threshold(100_000, *before[1:])
    try:
        with serving_gc():  # already rarer: left as it is
            assert gc.get_threshold()[0] == 100_000
    finally:
        gc.set_threshold(*before)
