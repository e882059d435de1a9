"""Issue 27, defect 3: an ``Idempotency-Key`` sent again with a different body is a client's mistake, not a
retry. The server answers 422 naming the mismatch (as payment APIs do) instead of replaying the first
answer, on the hot routes and the general ones, for the in-memory store and the SQL store alike; and the
key still replays its first request's answer."""

from __future__ import annotations

from pathlib import Path

import pytest
from agl.store import InMemoryLightningStore, LightningStore, SqlLightningStore
from agl.testing.store.http import call, http_session, running_server

HOT = "/v1/agl/queues/rollouts/enqueue"
GENERAL = "/v1/agl/resources"


def _store(backend: str, tmp_path: Path) -> LightningStore:
    if backend == "memory":
        return InMemoryLightningStore()
    return SqlLightningStore(f"sqlite:///{tmp_path / 'reuse.db'}")


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("path", [HOT, GENERAL], ids=["hot", "general"])
async def test_the_same_key_with_another_body_is_a_422_naming_the_mismatch(
    backend: str, path: str, tmp_path: Path
) -> None:
    if path == HOT:
        first, other = {"rollouts": [{"input": 1}]}, {"rollouts": [{"input": 2}]}
    else:
        prompt = {"resource_type": "prompt_template", "engine": "f-string"}
        first, other = {"p": {**prompt, "template": "a"}}, {"p": {**prompt, "template": "b"}}
    store = _store(backend, tmp_path)
    key = {"Idempotency-Key": "k-reused"}
    with running_server(store) as server:
        async with http_session() as session:
            status, answer, _ = await call(session, server, "POST", path, json_body=first, headers=key)
            assert status == 201
            status, refused, headers = await call(session, server, "POST", path, json_body=other, headers=key)
            assert status == 422, (status, refused)
            assert "agl-replayed" not in headers
            assert "Idempotency-Key" in refused["detail"] and "different" in refused["detail"], refused
            # the key still belongs to its first request: a true retry replays that answer
            status, again, headers = await call(session, server, "POST", path, json_body=first, headers=key)
            assert (status, again, headers.get("agl-replayed")) == (201, answer, "true")
            if path == HOT:
                status, page, _ = await call(session, server, "GET", "/v1/agl/rollouts")
                assert status == 200 and [r["input"] for r in page["items"]] == [1]


async def test_a_sql_key_reused_after_a_restart_is_still_refused(tmp_path: Path) -> None:
    """The body's fingerprint is kept with the answer in the database: a restarted server refuses too."""
    url = f"sqlite:///{tmp_path / 'restart.db'}"
    key = {"Idempotency-Key": "k-restart"}
    with running_server(SqlLightningStore(url)) as server:
        async with http_session() as session:
            status, _, _ = await call(
                session, server, "POST", HOT, json_body={"rollouts": [{"input": 1}]}, headers=key
            )
            assert status == 201
    with running_server(SqlLightningStore(url)) as server:
        async with http_session() as session:
            body = {"rollouts": [{"input": 2}]}
            status, refused, _ = await call(session, server, "POST", HOT, json_body=body, headers=key)
            assert status == 422 and "Idempotency-Key" in refused["detail"], refused
