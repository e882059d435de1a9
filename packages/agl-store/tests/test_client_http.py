"""LightningStoreClient: error types, what is retried and what is not, writes applied once, threads, pickling."""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agl.store import (
    InMemoryLightningStore,
    LightningStoreClient,
    StoreConnectionError,
    StoreInvalidRequestError,
    StoreNotFoundError,
    StoreServerError,
)
from agl.testing.store.http import call, http_session, running_server
from agl.testing.threads import run_in_threads
from agl.types import UNSET, InvalidRequestError, NotFoundError, RolloutQuery


class _CountingStore(InMemoryLightningStore):
    """A real in-memory store that counts calls and can be told to fail the next few with a fault."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}
        self.faults_left = 0

    def _tick(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.faults_left > 0:
            self.faults_left -= 1
            raise RuntimeError("transient fault")

    async def update_attempt(self, *args: Any, **kwargs: Any) -> Any:
        self._tick("update_attempt")
        return await super().update_attempt(*args, **kwargs)

    async def get_latest_resources(self) -> Any:
        self._tick("get_latest_resources")
        return await super().get_latest_resources()


def _client(server: Any, **kwargs: Any) -> LightningStoreClient:
    kwargs.setdefault("retry_delays", (0.01, 0.01, 0.01))
    kwargs.setdefault("health_retry_delays", (0.01,))
    return LightningStoreClient(server.endpoint, **kwargs)


async def test_errors_keep_their_in_process_types_and_say_which_call_failed() -> None:
    store = _CountingStore()
    with running_server(store) as server:
        client = _client(server)
        try:
            with pytest.raises(NotFoundError) as caught:
                await client.update_attempt("ro-missing", "latest", status="failed")
            err = caught.value
            assert isinstance(err, StoreNotFoundError) and isinstance(err, ValueError)
            assert err.status == 404 and err.method == "update_attempt"
            assert "update_attempt" in str(err) and "ro-missing" in str(err) and "404" in str(err)
            assert store.calls["update_attempt"] == 1  # a 4xx is never retried

            with pytest.raises(InvalidRequestError) as invalid:  # checked before sending, as in process
                await client.query_rollouts(sort_by="colour")
            assert "sort_by" in str(invalid.value)
            unchecked = RolloutQuery.model_construct(sort_by="colour")  # the server checks it again
            with pytest.raises(InvalidRequestError) as invalid:
                await client._query_rollouts(unchecked)
            assert isinstance(invalid.value, StoreInvalidRequestError) and invalid.value.status == 422
            assert "sort_by" in str(invalid.value)
        finally:
            await client.close()


async def test_server_faults_are_retried_then_succeed() -> None:
    store = _CountingStore()
    with running_server(store) as server:
        client = _client(server)
        try:
            store.faults_left = 2
            assert await client.get_latest_resources() is None
            assert store.calls["get_latest_resources"] == 3
            store.faults_left = 10
            with pytest.raises(StoreServerError) as caught:
                await client.get_latest_resources()
            assert caught.value.status == 500 and store.calls["get_latest_resources"] == 3 + 4
        finally:
            await client.close()


async def test_unreachable_server_is_a_connection_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = LightningStoreClient(
        f"http://127.0.0.1:{port}", retry_delays=(0.01, 0.01), health_retry_delays=(0.01,)
    )
    started = time.monotonic()
    with pytest.raises(StoreConnectionError, match="cannot reach the store") as caught:
        await client.enqueue_rollout(1)
    assert isinstance(caught.value, ConnectionError) and caught.value.method == "enqueue_rollout"
    assert time.monotonic() - started < 5
    await client.close()


def test_address_must_be_http() -> None:
    with pytest.raises(ValueError, match="http://"):
        LightningStoreClient("127.0.0.1:4747")


async def test_same_idempotency_key_is_applied_once() -> None:
    store = InMemoryLightningStore()
    with running_server(store) as server:
        async with http_session() as session:
            body = {"rollouts": [{"input": {"q": 1}}]}
            key = {"Idempotency-Key": "k-123"}
            s1, first, h1 = await call(
                session, server, "POST", "/v1/agl/queues/rollouts/enqueue", json_body=body, headers=key
            )
            s2, second, h2 = await call(
                session, server, "POST", "/v1/agl/queues/rollouts/enqueue", json_body=body, headers=key
            )
            assert s1 == s2 == 201 and first == second
            assert h2.get("agl-replayed") == "true" and "agl-replayed" not in h1
            s3, third, _ = await call(
                session, server, "POST", "/v1/agl/queues/rollouts/enqueue", json_body=body
            )
            assert s3 == 201 and third != first
        assert (await store.query_rollouts()).total == 2


class _AnswerDroppingProxy:
    """A TCP proxy on 127.0.0.1 that forwards requests but cuts the connection instead of relaying the
    first ``drops`` answers, like a network failure after the server did the work."""

    def __init__(self, target_port: int, drops: int) -> None:
        self.target_port = target_port
        self.drops = drops
        self.port = 0
        self._server: asyncio.AbstractServer | None = None

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answers: bool) -> None:
        try:
            while data := await reader.read(65536):
                if answers and self.drops > 0:
                    self.drops -= 1
                    writer.transport.abort()
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        await asyncio.gather(
            self._pipe(client_reader, upstream_writer, answers=False),
            self._pipe(upstream_reader, client_writer, answers=True),
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[_AnswerDroppingProxy]:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self._server.close()


@pytest.mark.parametrize("operation", ["enqueue", "start_attempt", "add_resources", "next_sequence_id"])
async def test_a_write_whose_answer_was_lost_is_retried_without_writing_twice(operation: str) -> None:
    store = InMemoryLightningStore()
    with running_server(store) as server:
        setup = _client(server)
        rollout = await setup.start_rollout({"q": 0})
        proxy = _AnswerDroppingProxy(server.port, drops=1)
        async with proxy.running():
            client = LightningStoreClient(
                f"http://127.0.0.1:{proxy.port}", retry_delays=(0.05, 0.1), health_retry_delays=(0.01,)
            )
            try:
                if operation == "enqueue":
                    await client.enqueue_rollout({"q": 1})
                    assert (await store.query_rollouts()).total == 2
                elif operation == "start_attempt":
                    again = await client.start_attempt(rollout.rollout_id)
                    assert again.attempt.sequence_id == 2
                    assert (await store.query_attempts(rollout.rollout_id)).total == 2
                elif operation == "add_resources":
                    from agl.types import PromptTemplate

                    await client.add_resources({"p": PromptTemplate(template="hi")})
                    assert (await store.query_resources()).total == 1
                else:
                    assert (
                        await client.get_next_span_sequence_id(rollout.rollout_id, rollout.attempt.attempt_id)
                        == 1
                    )
                    assert (
                        await setup.get_next_span_sequence_id(rollout.rollout_id, rollout.attempt.attempt_id)
                        == 2
                    )
                assert proxy.drops == 0  # the answer really was dropped once
            finally:
                await client.close()
        await setup.close()


async def test_unset_and_none_survive_the_wire() -> None:
    with running_server() as server:
        client = _client(server)
        try:
            rollout = await client.enqueue_rollout({"q": 1}, mode="train", metadata={"k": "v"})
            updated = await client.update_rollout(rollout.rollout_id, mode=None, metadata=UNSET)
            assert updated.mode is None and updated.metadata == {"k": "v"} and updated.input == {"q": 1}
        finally:
            await client.close()


async def test_add_span_returns_the_span_given_or_none_for_a_duplicate() -> None:
    from agl.testing.spans import make_span

    with running_server() as server:
        client = _client(server)
        try:
            rollout = await client.start_rollout({"q": 1})
            span = make_span(rollout.rollout_id, rollout.attempt.attempt_id, 1)
            assert await client.add_span(span) is span
            assert await client.add_span(span) is None
            batch = [make_span(rollout.rollout_id, rollout.attempt.attempt_id, i) for i in (2, 3)]
            stored = await client.add_many_spans([span, *batch, batch[0]])
            assert stored == batch and all(a is b for a, b in zip(stored, batch, strict=True))
        finally:
            await client.close()


def test_one_client_from_several_threads_each_with_its_own_loop() -> None:
    with running_server() as server:
        client = _client(server)

        async def worker(_: int) -> None:
            for _ in range(5):
                await client.enqueue_rollout({"t": threading.get_ident()})
            await client.close()

        run_in_threads(4, worker)

        async def count() -> int:
            try:
                return (await client.query_rollouts()).total
            finally:
                await client.close()

        assert asyncio.run(count()) == 20


def test_pickling_keeps_the_configuration() -> None:
    client = LightningStoreClient("http://127.0.0.1:9", token="t", retry_delays=(0.5,), request_timeout=3.0)
    copy = pickle.loads(pickle.dumps(client))
    assert (copy.address, copy.token, copy.retry_delays, copy.request_timeout) == (
        "http://127.0.0.1:9",
        "t",
        (0.5,),
        3.0,
    )
    assert copy.otlp_traces_endpoint() == "http://127.0.0.1:9/v1/traces"
