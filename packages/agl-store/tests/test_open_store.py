"""``open_store(url)``: every accepted form opens a working store; anything else is refused with the forms."""

from __future__ import annotations

from pathlib import Path

import pytest
from agl.store import (
    DEFAULT_MEMORY_MAX_BYTES,
    InMemoryLightningStore,
    LightningStore,
    LightningStoreClient,
    SqlLightningStore,
    is_store_url,
    open_store,
)
from agl.store.cli import _store_parser, open_store_backend
from agl.testing.postgres import (
    create_schema,
    drop_schema,
    require_postgres,
    schema_connect_args,
)
from agl.testing.store.http import running_server
from hypothesis import given
from hypothesis import strategies as st


async def _round_trip(store: LightningStore) -> None:
    try:
        rollout = await store.enqueue_rollout(input={"x": 1})
        found = await store.get_rollout_by_id(rollout.rollout_id)
        assert found is not None and found.input == {"x": 1}
    finally:
        await store.close()


@pytest.mark.parametrize("url", ["memory", "", "  memory  ", None])
async def test_memory(url: str | None) -> None:
    store = open_store(url)
    assert isinstance(store, InMemoryLightningStore)
    await _round_trip(store)


@pytest.mark.parametrize("form", ["url", "plain path"])
async def test_sqlite_by_url_or_plain_path(tmp_path: Path, form: str) -> None:
    path = tmp_path / "sub" / "store.db"
    store = open_store(f"sqlite:///{path}" if form == "url" else str(path), scan_debounce_seconds=0.5)
    assert isinstance(store, SqlLightningStore)
    await _round_trip(store)
    assert path.exists()


async def test_postgresql() -> None:
    url = require_postgres()
    schema = await create_schema(url)
    try:
        store = open_store(url, **schema_connect_args(schema))
        assert isinstance(store, SqlLightningStore)
        await _round_trip(store)
    finally:
        await drop_schema(url, schema)


async def test_http_client_of_a_real_server() -> None:
    backing = InMemoryLightningStore()
    with running_server(backing, token="s3cret") as server:
        client = open_store(server.endpoint + "/", token="s3cret", retry_delays=())
        assert isinstance(client, LightningStoreClient)
        assert client.address == server.endpoint
        await _round_trip(client)
    assert len(await backing.query_rollouts()) == 1


@pytest.mark.parametrize(
    "url", ["redis://localhost", "mysql://u@h/db", "store.txt", "InMemoryLightningStore", "ftp://x"]
)
def test_other_forms_are_refused_with_the_accepted_ones(url: str) -> None:
    assert not is_store_url(url)
    with pytest.raises(
        ValueError, match=r"unknown store backend .*memory.*sqlite:///.*postgresql://.*http://"
    ):
        open_store(url)


def test_a_refused_url_does_not_echo_its_password() -> None:
    with pytest.raises(ValueError) as caught:
        open_store("mysql://user:hunter2@db/agl")
    assert "hunter2" not in str(caught.value) and "***" in str(caught.value)


def test_options_that_do_not_fit_the_form_are_refused() -> None:
    with pytest.raises(ValueError, match="token= is only for a store server URL"):
        open_store("memory", token="t")
    with pytest.raises(ValueError, match="scan_debounce_seconds applies to local stores"):
        open_store("http://127.0.0.1:9", scan_debounce_seconds=1.0)


def test_the_cli_opens_backends_through_open_store(tmp_path: Path) -> None:
    assert isinstance(open_store_backend("memory", watchdog_interval=0.1), InMemoryLightningStore)
    assert isinstance(open_store_backend(f"sqlite:///{tmp_path / 's.db'}"), SqlLightningStore)
    with pytest.raises(ValueError, match="unknown store backend"):
        open_store_backend("bogus")


@given(st.text())
def test_is_store_url_agrees_with_open_store(text: str) -> None:
    if is_store_url(text):
        return  # accepted forms are checked above (opening one here would create files or connections)
    with pytest.raises(ValueError, match="unknown store backend"):
        open_store(text)


def test_a_memory_store_opened_by_url_is_capped_by_default() -> None:
    """A long-running ``agl store --backend memory`` must not grow without bound (issue 27, defect 11)."""
    store = open_store("memory")
    assert isinstance(store, InMemoryLightningStore)
    assert store._cap.max_bytes == DEFAULT_MEMORY_MAX_BYTES
    unbounded = open_store("memory", max_bytes=None)
    assert isinstance(unbounded, InMemoryLightningStore)
    assert unbounded._cap.max_bytes is None


async def test_agl_store_memory_caps_evict_finished_rollouts() -> None:
    args = _store_parser().parse_args(["--backend", "memory", "--memory-max-rollouts", "5"])
    store = open_store_backend(
        args.backend, memory_max_bytes=args.memory_max_bytes, memory_max_rollouts=args.memory_max_rollouts
    )
    for i in range(20):
        rollout = await store.start_rollout(input=i)
        await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
    assert len(await store.query_rollouts()) == 5
    assert open_store_backend("memory", memory_max_bytes=0)._cap.max_bytes is None  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(ValueError, match="--backend memory only"):
        open_store_backend("sqlite:///x.db", memory_max_rollouts=5)
