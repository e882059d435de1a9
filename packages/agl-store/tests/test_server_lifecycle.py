"""Start, stop, endpoints, in-process delegation, and a child process that talks to the parent's store."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from agl.store import InMemoryLightningStore, LightningStoreClient, LightningStoreServer, StoreConnectionError
from agl.testing.child import run_python
from agl.testing.store.http import child_uses_store, running_server
from agl.testing.threads import run_in_threads


def test_start_is_fast_and_stop_frees_the_port() -> None:
    with running_server():  # first start pays the imports
        pass
    store = InMemoryLightningStore()
    server = LightningStoreServer(store, port=0)
    started = time.perf_counter()
    server.start()
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"start() took {elapsed:.2f} s"
    assert server.endpoint == f"http://127.0.0.1:{server.port}" and server.port > 0
    assert server.otlp_traces_endpoint() == server.endpoint + "/v1/traces"
    with pytest.raises(RuntimeError, match="already running"):
        server.start()
    server.stop()
    with socket.socket() as sock:  # the port can be bound again at once
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", server.port))


def test_port_in_use_is_a_clear_error() -> None:
    with running_server() as first:
        second = LightningStoreServer(InMemoryLightningStore(), port=first.port)
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            second.start()


def test_bad_arguments_are_rejected() -> None:
    store = InMemoryLightningStore()
    with pytest.raises(ValueError, match="max_body_bytes"):
        LightningStoreServer(store, max_body_bytes=0)
    with running_server(store) as server, pytest.raises(ValueError, match="inner store"):
        LightningStoreServer(server)


async def test_server_is_a_store_in_process_before_during_and_after_serving() -> None:
    store = InMemoryLightningStore()
    server = LightningStoreServer(store, port=0)
    assert server.capabilities.get("zero_copy") and server.capabilities.get("otlp_traces")
    before = await server.enqueue_rollout({"n": 1})
    await asyncio.to_thread(server.start)
    try:
        claimed = await server.dequeue_rollout(worker_id="w")
        assert claimed is not None and claimed.rollout_id == before.rollout_id
        client = LightningStoreClient(server.endpoint)
        try:
            over_http = await client.get_rollout_by_id(before.rollout_id)
            assert over_http is not None and over_http.status == "preparing"
        finally:
            await client.close()
    finally:
        await asyncio.to_thread(server.stop)
    assert (await server.get_rollout_by_id(before.rollout_id)) is not None


def test_server_is_usable_from_threads_with_their_own_loops() -> None:
    with running_server() as server:

        async def worker(_: int) -> None:
            for _ in range(5):
                await server.enqueue_rollout({"thread": threading.get_ident()})

        run_in_threads(4, worker)
        assert asyncio.run(server.query_rollouts()).total == 20


@pytest.mark.parametrize("what", ["server", "client"])
def test_child_process_talks_to_the_parents_store(what: str) -> None:
    store = InMemoryLightningStore()
    with running_server(store) as server:
        handle: Any = server if what == "server" else LightningStoreClient(server.endpoint)
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        child = ctx.Process(target=child_uses_store, args=(handle, results))
        child.start()
        try:
            outcome = results.get(timeout=60)
        finally:
            child.join(30)
        assert isinstance(outcome, tuple), outcome
        rollout_id, attempt_id, pid = outcome
        assert pid != child.ident or pid == child.pid
        rollout = asyncio.run(store.get_rollout_by_id(rollout_id))
        assert rollout is not None and rollout.input["from_pid"] == child.pid
        latest = asyncio.run(store.get_latest_attempt(rollout_id))
        assert latest is not None and latest.attempt_id == attempt_id and latest.worker_id == "child"


def test_pickled_server_keeps_only_its_address() -> None:
    with running_server(token="tok") as server:
        copy = pickle.loads(pickle.dumps(server))
        assert copy.store is None and copy.endpoint == server.endpoint and copy.token == "tok"
        with pytest.raises(RuntimeError, match="process that created it"):
            copy.start()


async def test_dequeue_long_poll_wakes_as_soon_as_work_arrives() -> None:
    # One long poll of an hour: a claim back within a minute was woken by the enqueue, not by re-polling.
    with running_server(max_wait_seconds=3600) as server:
        runner = LightningStoreClient(server.endpoint, long_poll_seconds=3600, request_timeout=3700)
        algorithm = LightningStoreClient(server.endpoint)
        try:
            waiting = asyncio.ensure_future(runner.dequeue_rollout(worker_id="w", timeout=3600))
            await asyncio.sleep(0.2)  # let the long poll reach the server (a delay, not a wait for a result)
            assert not waiting.done()
            rollout = await algorithm.enqueue_rollout({"q": 1})
            claimed = await asyncio.wait_for(waiting, 60)
            assert claimed is not None and claimed.rollout_id == rollout.rollout_id
        finally:
            await runner.close()
            await algorithm.close()


async def test_long_polls_longer_than_the_server_bound_are_looped_by_the_client() -> None:
    with running_server(max_wait_seconds=0.2) as server:
        client = LightningStoreClient(server.endpoint)
        try:
            started = time.monotonic()
            assert await client.dequeue_rollout(timeout=0.7) is None
            assert 0.6 < time.monotonic() - started < 3.0
            rollout = await client.enqueue_rollout({"q": 1})
            claimed = await client.dequeue_rollout()
            assert claimed is not None

            async def finish_later() -> None:
                await asyncio.sleep(0.5)
                await client.update_attempt(rollout.rollout_id, "latest", status="succeeded")

            finisher = asyncio.ensure_future(finish_later())
            waiting = client.wait_for_rollouts(rollout_ids=[rollout.rollout_id, "ro-unknown"], timeout=3600)
            done = await asyncio.wait_for(waiting, 60)  # returned when finished, not at the hour's deadline
            await finisher
            assert [r.rollout_id for r in done] == [rollout.rollout_id] and done[0].status == "succeeded"
        finally:
            await client.close()


async def test_stop_ends_pending_long_polls_promptly() -> None:
    server = LightningStoreServer(InMemoryLightningStore(), port=0, max_wait_seconds=30)
    await asyncio.to_thread(server.start)
    client = LightningStoreClient(server.endpoint, retry_delays=())
    try:
        waiting = asyncio.ensure_future(client.dequeue_rollout(timeout=20))
        await asyncio.sleep(0.2)
        started = time.monotonic()
        await asyncio.to_thread(server.stop)
        assert time.monotonic() - started < 3.0
        # The poll is answered (empty) at once; the client's next poll then finds no server.
        with pytest.raises(StoreConnectionError):
            await asyncio.wait_for(waiting, 5)
    finally:
        await client.close()


async def test_start_and_stop_can_be_awaited_as_in_the_reference() -> None:
    """``await server.start()`` / ``await server.stop()`` (the reference's spelling) do what the plain calls do."""
    store = InMemoryLightningStore()
    server = LightningStoreServer(store, port=0)
    await server.start()
    try:
        assert server.is_running
        client = LightningStoreClient(server.endpoint)
        try:
            assert (await client.enqueue_rollout({"q": 1})).status == "queuing"
        finally:
            await client.close()
    finally:
        await server.stop()
    assert not server.is_running
    assert (await store.query_rollouts()).total == 1
    server.start()  # the plain calls are done when they return: nothing left to await
    assert server.is_running
    server.stop()
    assert not server.is_running


async def test_the_references_launch_options_are_accepted_and_say_what_they_do_here() -> None:
    """``LightningStoreServer(store, host, port, launch_mode=..., n_workers=..., tracker=...)`` and
    ``launcher_args=`` as the reference's programs write them: the address is used, the rest warns."""
    store = InMemoryLightningStore()
    with pytest.warns(UserWarning) as caught:
        server = LightningStoreServer(store, "127.0.0.1", 0, launch_mode="mp", n_workers=2, tracker=object())
    assert [str(w.message).split("(")[1].split("=")[0] for w in caught] == [
        "launch_mode",
        "n_workers",
        "tracker",
    ]
    assert all(w.filename == __file__ for w in caught)  # at the caller's line
    await server.start()
    try:
        assert server.is_running and server.port > 0
    finally:
        await server.stop()
    launcher = SimpleNamespace(host="127.0.0.1", port=4999, launch_mode="thread", n_workers=1)
    with pytest.warns(DeprecationWarning, match="launcher_args"):
        server = LightningStoreServer(store, launcher_args=launcher)
    assert (server.host, server.port) == ("127.0.0.1", 4999)
    assert (LightningStoreServer(store).host, LightningStoreServer(store).port) == ("127.0.0.1", 4747)
    with pytest.raises(ValueError, match="cannot be given together with launcher_args"):
        LightningStoreServer(store, port=1, launcher_args=launcher)
    with pytest.raises(ValueError, match="launch_mode must be one of"):
        LightningStoreServer(store, launch_mode="fork")


async def test_awaited_run_forever_serves_until_cancelled_or_stopped() -> None:
    store = InMemoryLightningStore()
    server = LightningStoreServer(store, port=0)
    started = asyncio.Event()
    serving = asyncio.ensure_future(server.run_forever(on_started=started.set))
    await asyncio.wait_for(started.wait(), 30)
    client = LightningStoreClient(server.endpoint, retry_delays=())
    try:
        await client.enqueue_rollout({"q": 1})
    finally:
        await client.close()
    serving.cancel()  # Ctrl+C under asyncio.run cancels the main task: the server stops
    with pytest.raises(asyncio.CancelledError):
        await serving
    assert not server.is_running and (await store.query_rollouts()).total == 1
    with socket.socket() as sock:  # its port was released
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", server.port))

    started.clear()
    serving = asyncio.ensure_future(server.run_forever(on_started=started.set))
    await asyncio.wait_for(started.wait(), 30)
    await asyncio.to_thread(server.stop)  # stop() from elsewhere ends it too
    await asyncio.wait_for(serving, 30)
    assert not server.is_running


def test_run_forever_as_the_reference_runs_it_returns_on_sigterm() -> None:
    """``asyncio.run(server.run_forever())`` (the reference's ``agl store``) and ``await server.run_forever()`` in a
    coroutine both serve until SIGTERM, then return with the server stopped and SIGTERM's handler put back."""
    out = run_python(
        """
        import asyncio, os, signal
        from agl.store import InMemoryLightningStore, LightningStoreServer

        server = LightningStoreServer(InMemoryLightningStore(), port=0)
        sigterm = lambda: os.kill(os.getpid(), signal.SIGTERM)
        asyncio.run(server.run_forever(on_started=sigterm))
        print("run", server.is_running, signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)

        async def main():
            await server.run_forever(on_started=sigterm)

        asyncio.run(main())
        print("awaited", server.is_running, signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
        """,
        timeout=60,
    )
    assert out.split() == ["run", "False", "True", "awaited", "False", "True"]


def test_readme_http_example_runs() -> None:
    """The README's example of serving a store is code that works."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("## Serving a store over HTTP") :]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    exec(compile(code.group(1), "README.md", "exec"), {"__name__": "readme_example"})


async def test_header_only_and_expect_100_answers_are_not_held_back() -> None:
    """The server sends headers and body in one write; answers without a body must still go out at once."""
    import aiohttp

    with running_server() as server:
        async with aiohttp.ClientSession() as session:
            started = time.monotonic()
            # HEAD is not served (405), and its answer has headers only: it must not wait for a body write.
            async with session.head(server.endpoint + "/v1/agl/statistics") as response:
                assert response.status == 405 and response.headers["Allow"] == "GET"
            async with session.post(
                server.endpoint + "/v1/agl/queues/rollouts/enqueue",
                json={"rollouts": [{"input": 1}]},
                expect100=True,
            ) as response:
                assert response.status == 201
            assert time.monotonic() - started < 5
