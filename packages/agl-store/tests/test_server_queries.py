"""The query routes: ``GET`` query strings and ``POST /search`` bodies are the same query objects."""

from __future__ import annotations

from typing import Any

from agl.store import InMemoryLightningStore
from agl.testing.spans import claim, span_for
from agl.testing.store.http import call, http_session, running_server

P = "/v1/agl"


async def test_get_and_post_queries_give_the_same_answers() -> None:
    store = InMemoryLightningStore()
    a, b = await claim(store, worker_id="w-1"), await claim(store, worker_id="w-2")
    await span_for(store, a, name="x")
    await span_for(store, b, name="y")
    await store.update_attempt(a.rollout_id, "latest", status="succeeded")
    with running_server(store) as server:
        async with http_session() as session:

            async def both(path: str, query: str, body: dict[str, Any]) -> Any:
                got, answer, _ = await call(session, server, "GET", f"{P}{path}?{query}")
                posted, same, _ = await call(session, server, "POST", f"{P}{path}/search", json_body=body)
                assert (got, posted) == (200, 200), (answer, same)
                assert answer == same
                return answer

            page = await both(
                "/rollouts", "status_in=succeeded&limit=1", {"status_in": ["succeeded"], "limit": 1}
            )
            assert [r["rollout_id"] for r in page["items"]] == [a.rollout_id] and page["total"] == 1
            both_ids = f"rollout_id={a.rollout_id}&rollout_id={b.rollout_id}&attempt_id=latest"
            spans = await both(
                "/spans", both_ids, {"rollout_id": [a.rollout_id, b.rollout_id], "attempt_id": "latest"}
            )
            assert sorted(s["name"] for s in spans["items"]) == ["x", "y"]
            one = await both("/spans", f"rollout_id={a.rollout_id}", {"rollout_id": a.rollout_id})
            assert [s["name"] for s in one["items"]] == ["x"]
            workers = await both(
                "/workers",
                "status_in=idle&status_in=busy&sort_by=worker_id",
                {"status_in": ["idle", "busy"], "sort_by": "worker_id"},
            )
            assert [w["worker_id"] for w in workers["items"]] == ["w-1", "w-2"]
            await both("/resources", "limit=0", {"limit": 0})
            attempts = await both(
                f"/rollouts/{a.rollout_id}/attempts", "sort_order=desc", {"sort_order": "desc"}
            )
            assert [x["sequence_id"] for x in attempts["items"]] == [1]

            for path in (
                "/rollouts?status_in=bogus",
                "/workers?status_in=lazy",
                "/spans?rollout_id=r&limit=x",
            ):
                status, answer, _ = await call(session, server, "GET", P + path)
                assert status == 422, answer
            status, answer, _ = await call(
                session, server, "POST", f"{P}/spans/search", json_body={"rollout_id": []}
            )
            assert status == 422 and "rollout_id" in answer["detail"]
            status, answer, _ = await call(
                session,
                server,
                "POST",
                f"{P}/rollouts/{a.rollout_id}/attempts/search",
                json_body={"rollout_id": "x"},
            )
            assert status == 422 and "rollout_id" in answer["detail"]  # the rollout is the path's
