"""The claim route: one request per claim, resources resent only when the client's version is stale."""

from __future__ import annotations

from agl.store import LightningStore, LightningStoreClient
from agl.testing.store.http import call, http_session, running_server
from agl.types import LLM, ResourcesUpdate


def _llm(port: int) -> LLM:
    return LLM(endpoint=f"http://127.0.0.1:{port}/v1", model="m")


async def _snapshot_and_three_rollouts(store: LightningStore) -> ResourcesUpdate:
    """A resources snapshot and three queued rollouts (inputs 0, 1, 2) that use it."""
    snapshot = await store.add_resources({"llm": _llm(1)})
    for i in range(3):
        await store.enqueue_rollout(input=i, resources_id=snapshot.resources_id)
    return snapshot


async def test_claim_sends_resources_only_when_the_known_version_is_stale() -> None:
    with running_server() as server:
        store = server.store
        assert store is not None
        snapshot = await _snapshot_and_three_rollouts(store)
        path = "/v1/agl/queues/rollouts/claim"
        async with http_session() as session:
            status, body, _ = await call(session, server, "POST", path, json_body={"worker_id": "w"})
            assert status == 200
            assert body["rollout"]["input"] == 0 and body["rollout"]["attempt"]["worker_id"] == "w"
            assert body["resources_id"] == snapshot.resources_id and body["resources_version"] == 1
            assert body["resources"]["resources"]["llm"]["endpoint"] == "http://127.0.0.1:1/v1"
            known = {"known_resources": {snapshot.resources_id: 1}}
            status, body, _ = await call(session, server, "POST", path, json_body=known)
            assert status == 200 and body["rollout"]["input"] == 1
            assert body["resources_version"] == 1 and body.get("resources") is None  # not sent again
            await store.update_resources(snapshot.resources_id, {"llm": _llm(2)})
            status, body, _ = await call(session, server, "POST", path, json_body=known)
            assert body["resources_version"] == 2
            assert body["resources"]["resources"]["llm"]["endpoint"] == "http://127.0.0.1:2/v1"
            status, body, _ = await call(session, server, "POST", path, json_body={"timeout": 0})
            assert status == 200 and body == {"rollout": None}
            status, body, _ = await call(session, server, "POST", path, json_body={"known_resources": []})
            assert status == 422 and "known_resources" in body["detail"]


async def test_client_claims_with_its_cache_and_an_agent_cannot_spoil_it() -> None:
    with running_server() as server:
        store = server.store
        assert store is not None
        snapshot = await _snapshot_and_three_rollouts(store)
        client = LightningStoreClient(server.endpoint)
        try:
            got = await client.dequeue_rollout_with_resources("w")
            assert got is not None and got[1] == snapshot
            spoiled = got[1]
            assert spoiled is not None and isinstance(spoiled.resources["llm"], LLM)
            spoiled.resources["llm"].endpoint = "http://spoiled/v1"
            again = await client.dequeue_rollout_with_resources("w")
            assert again is not None and again[1] == snapshot  # from the cache, unspoiled
            updated = await store.update_resources(snapshot.resources_id, {"llm": _llm(2)})
            third = await client.dequeue_rollout_with_resources("w")
            assert third is not None and third[1] == updated
            assert await client.dequeue_rollout_with_resources("w", timeout=0.05) is None
        finally:
            await client.close()
