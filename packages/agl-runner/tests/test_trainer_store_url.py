"""The Trainer opens a store given as a URL with ``agl.store.open_store`` (and still takes aliases/paths)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agl.runner import SharedMemoryExecutionStrategy, Trainer
from agl.store import InMemoryLightningStore, LightningStoreClient, SqlLightningStore


def test_store_urls_aliases_and_import_paths(tmp_path: Path) -> None:
    shm = SharedMemoryExecutionStrategy
    assert isinstance(Trainer(strategy=shm(), store="memory", progress=False).store, InMemoryLightningStore)
    sql = Trainer(strategy=shm(), store=f"sqlite:///{tmp_path / 'a.db'}", progress=False).store
    assert isinstance(sql, SqlLightningStore)
    assert isinstance(
        Trainer(strategy=shm(), store=str(tmp_path / "b.sqlite"), progress=False).store, SqlLightningStore
    )
    client = Trainer(strategy=shm(), store="http://127.0.0.1:9", progress=False).store
    assert isinstance(client, LightningStoreClient) and client.address == "http://127.0.0.1:9"
    by_path = Trainer(strategy=shm(), store="agl.store.InMemoryLightningStore", progress=False).store
    assert isinstance(by_path, InMemoryLightningStore)
    spec = {"type": "sql", "url": f"sqlite:///{tmp_path / 'c.db'}"}
    assert isinstance(Trainer(strategy=shm(), store=spec, progress=False).store, SqlLightningStore)


def test_unmanaged_default_store_is_a_client_of_the_configured_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGL_SERVER_HOST", "10.1.2.3")
    monkeypatch.setenv("AGL_SERVER_PORT", "4999")
    monkeypatch.setenv("AGL_CURRENT_ROLE", "runner")
    monkeypatch.setenv("AGL_MANAGED_STORE", "0")
    store = Trainer(progress=False).store
    assert isinstance(store, LightningStoreClient) and store.address == "http://10.1.2.3:4999"
