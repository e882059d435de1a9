"""Inside a runner process of the client-server strategy: wait for the server's address, run the runner
until stopped, report an exception to the parent."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from ._signals import ChildStopEvent, child_stop_event
from .base import run_until_stopped

if TYPE_CHECKING:
    from agl.store import LightningStore

    from ..events import ExecutionEvent
    from .base import RunnerBundle

__all__ = ["preload_for_children", "run_runner_here", "runner_process_main"]

logger = logging.getLogger(__name__)


def preload_for_children() -> None:
    """Import what a runner process needs before it has work: the HTTP client stack and the heartbeat probe."""
    importlib.import_module("psutil")  # heartbeats
    importlib.import_module("agl.store.client")


def _hard_exit_after_stop(event: ChildStopEvent, grace: float) -> None:
    """If the runner has not exited ``grace`` seconds after the stop signal, exit hard."""
    while not event.is_set():
        time.sleep(0.2)
    time.sleep(grace)
    logger.error("runner did not stop within %.0fs of the stop signal; exiting", grace)
    os._exit(1)


async def _run_bundle(
    runner: RunnerBundle, store: LightningStore, worker_id: Any, event: ExecutionEvent, owns_store: bool
) -> None:
    try:
        await run_until_stopped(lambda: runner(store, worker_id, event), event, grace=30.0)
    finally:
        if owns_store:
            await store.close()
        else:
            await store.release_loop_resources()  # the store outlives this loop, its connections do not


def _make_store(
    endpoint: str, token: str | None, store: LightningStore | None
) -> tuple[LightningStore, bool]:
    """A client of the server at ``endpoint`` (owned: closed at the end), else ``store`` itself."""
    if endpoint:
        from agl.store.client import LightningStoreClient

        return LightningStoreClient(endpoint, token=token), True
    if store is None:
        raise RuntimeError("no store to run against: the strategy passed neither an endpoint nor a store")
    return store, False


def run_runner_here(
    runner: RunnerBundle,
    worker_id: Any,
    event: ExecutionEvent,
    endpoint: str,
    token: str | None,
    store: LightningStore,
) -> None:
    """Run one runner in the calling process (role ``runner`` with one in-process runner)."""
    client, owns = _make_store(endpoint, token, store)
    asyncio.run(_run_bundle(runner, client, worker_id, event, owns))


def runner_process_main(
    runner: RunnerBundle,
    worker_id: Any,
    stop_reader: multiprocessing.connection.Connection,
    inherited_stop_writer: int,
    ready_reader: multiprocessing.connection.Connection,
    error_writer: multiprocessing.connection.Connection,
    token: str | None,
    store: LightningStore | None,
) -> None:
    """Body of a runner process: wait for the server's address, then run the runner until stopped."""
    event = child_stop_event(stop_reader, inherited_stop_writer)
    name = multiprocessing.current_process().name
    try:
        preload_for_children()  # a no-op when forked from a parent that preloaded
        ready = multiprocessing.connection.wait([ready_reader, stop_reader])
        if ready_reader not in ready or event.is_set():
            return  # stopped (or the parent died) before the server was up
        try:
            endpoint = ready_reader.recv()
        except EOFError:
            return
        finally:
            ready_reader.close()
        threading.Thread(target=_hard_exit_after_stop, args=(event, 60.0), daemon=True).start()
        client, owns = _make_store(endpoint, token, store)
        from agl.store.serving import run_fast, serving_gc

        with serving_gc():  # a runner's requests leave short-lived objects, as a server's do
            run_fast(_run_bundle(runner, client, worker_id, event, owns))  # on uvloop: less CPU per request
    except KeyboardInterrupt:
        return
    except BaseException as exc:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        with contextlib.suppress(Exception):
            error_writer.send(text)
        sys.stderr.write(f"{name} crashed:\n{text}")
        sys.stderr.flush()
        os._exit(1)
