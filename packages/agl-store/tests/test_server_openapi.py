"""The OpenAPI schema is the contract: every real answer of every route validates against it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agl.testing.spans import make_span
from agl.testing.store.http import call, http_session, running_server
from jsonschema import Draft202012Validator

PREFIX = "/v1/agl"


def _validator(openapi: dict[str, Any], verb: str, template: str, status: int) -> Draft202012Validator | None:
    operation = openapi["paths"][template][verb.lower()]
    response = operation["responses"].get(str(status))
    assert response is not None, f"{verb} {template} answered {status}, which the schema does not document"
    content = response.get("content", {}).get("application/json")
    if content is None:
        return None
    schema = {**content["schema"], "components": openapi["components"]}
    return Draft202012Validator(schema)


def test_schema_is_a_valid_openapi_document() -> None:
    with running_server() as server:
        openapi = server.app.openapi()
    assert openapi["openapi"].startswith("3.1")
    Draft202012Validator.check_schema({"components": openapi["components"]})
    operations = {(verb.upper(), path) for path, item in openapi["paths"].items() for verb in item}
    assert len(operations) >= 32
    for path, item in openapi["paths"].items():
        for verb, operation in item.items():
            assert "422" in operation["responses"] or path == "/v1/agl/health" or verb == "get", (verb, path)
            for response in operation["responses"].values():
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                if schema is not None:
                    Draft202012Validator.check_schema({**schema, "components": openapi["components"]})


async def test_real_answers_match_the_schema() -> None:
    with running_server(max_wait_seconds=0.1) as server:
        openapi = server.app.openapi()
        seen: set[tuple[str, str]] = set()
        async with http_session() as session:

            async def check(
                verb: str, template: str, path: str | None = None, body: Any = None, expect: int | None = None
            ) -> Any:
                status, answer, _ = await call(session, server, verb, path or template, json_body=body)
                if expect is not None:
                    assert status == expect, (verb, path or template, status, answer)
                validator = _validator(openapi, verb, template, status)
                if validator is not None:
                    errors = sorted(validator.iter_errors(answer), key=str)
                    assert not errors, (
                        f"{verb} {template} → {status}: {errors[0].message} in {json.dumps(answer)[:400]}"
                    )
                seen.add((verb, template))
                return answer

            P = PREFIX
            await check("GET", P + "/health", expect=200)
            llm = {"resource_type": "llm", "endpoint": "http://127.0.0.1:1/v1", "model": "m"}
            res = await check("POST", P + "/resources", body={"main": llm}, expect=201)
            rid_res = res["resources_id"]
            await check(
                "POST",
                P + "/resources/{resources_id}",
                f"{P}/resources/{rid_res}",
                body={"main": llm},
                expect=200,
            )
            await check("GET", P + "/resources/{resources_id}", f"{P}/resources/{rid_res}", expect=200)
            await check("GET", P + "/resources/{resources_id}", f"{P}/resources/rs-none", expect=200)
            await check("GET", P + "/resources/latest", expect=200)
            await check("GET", P + "/resources", f"{P}/resources?limit=5", expect=200)
            await check("POST", P + "/resources/search", body={"resources_id_contains": "rs"}, expect=200)

            queued = await check(
                "POST",
                P + "/queues/rollouts/enqueue",
                body={"rollouts": [{"input": {"q": 1}}, {"input": 2, "mode": "val"}]},
                expect=201,
            )
            claimed = await check(
                "POST", P + "/queues/rollouts/dequeue", body={"limit": 1, "worker_id": "w-1"}, expect=200
            )
            await check(
                "POST", P + "/queues/rollouts/dequeue", body={"limit": 2, "timeout": 0.05}, expect=200
            )
            await check(
                "POST", P + "/queues/rollouts/dequeue", body={"limit": 1, "timeout": 0.05}, expect=200
            )
            await check("POST", P + "/queues/rollouts/enqueue", body={"rollouts": [{"input": 3}]}, expect=201)
            await check("POST", P + "/queues/rollouts/claim", body={"worker_id": "w-1"}, expect=200)
            await check("POST", P + "/queues/rollouts/claim", body={"timeout": 0.05}, expect=200)
            rollout_id, attempt_id = claimed[0]["rollout_id"], claimed[0]["attempt"]["attempt_id"]
            started = await check(
                "POST", P + "/rollouts", body={"input": "direct", "worker_id": "w-2"}, expect=201
            )

            started_id, here = started["rollout_id"], f"{P}/rollouts/{rollout_id}"
            rollouts, waits, workers = P + "/rollouts", P + "/waits/rollouts", P + "/workers"
            rollout, worker = rollouts + "/{rollout_id}", workers + "/{worker_id}"
            attempts, attempt = rollout + "/attempts", rollout + "/attempts/{attempt_id}"
            span = make_span(rollout_id, attempt_id, 1).model_dump(mode="json")
            batch = [make_span(rollout_id, attempt_id, i).model_dump(mode="json") for i in (2, 3)]
            unnumbered = [make_span(rollout_id, attempt_id, 0).model_dump(mode="json") for _ in range(2)]
            pairs = [[rollout_id, attempt_id], ["ro-b", "at-b"]]
            first_queued, second_queued = (q["rollout_id"] for q in queued)
            # (verb, route template, path when it is not the template, body, expected status), in order
            cases: list[tuple[str, str, str | None, Any, int]] = [
                ("GET", rollouts, f"{rollouts}?status_in=preparing&status_in=queuing&limit=10", None, 200),
                ("POST", rollouts + "/search", None, {"rollout_id_in": [first_queued]}, 200),
                ("GET", rollout, here, None, 200),
                ("GET", rollout, f"{rollouts}/ro-none", None, 200),
                ("POST", rollout, f"{rollouts}/{started_id}", {"metadata": {"x": 1}}, 200),
                ("POST", rollout, f"{rollouts}/ro-none", {"status": "cancelled"}, 404),
                ("POST", rollout, here, {"status": None}, 422),
                ("POST", attempts, f"{rollouts}/{started_id}/attempts", {"worker_id": "w-3"}, 201),
                ("GET", attempts, f"{here}/attempts", None, 200),
                ("POST", attempts + "/search", f"{here}/attempts/search", {"sort_order": "desc"}, 200),
                ("GET", attempts + "/latest", f"{here}/attempts/latest", None, 200),
                ("POST", P + "/spans", None, span, 201),
                ("POST", P + "/spans", None, span, 201),  # duplicate → null
                ("POST", P + "/spans/batch", None, {"spans": batch}, 201),
                ("POST", P + "/spans/batch", None, {"spans": [{"name": "x"}]}, 422),
                ("POST", P + "/spans/in-order", None, {"spans": unnumbered}, 201),
                ("POST", P + "/spans/in-order", None, {"spans": [{"name": "x"}]}, 422),
                ("GET", P + "/spans", f"{P}/spans?rollout_id={rollout_id}&attempt_id=latest", None, 200),
                ("POST", P + "/spans/search", None, {"rollout_id": rollout_id, "name_contains": "st"}, 200),
                ("POST", P + "/spans/next", None, {"rollout_id": rollout_id, "attempt_id": attempt_id}, 200),
                ("POST", P + "/spans/next/batch", None, {"pairs": pairs}, 200),
                (
                    "POST",
                    attempt + "/finish",
                    f"{here}/attempts/{attempt_id}/finish",
                    {"spans": unnumbered},
                    200,
                ),
                ("POST", attempt + "/finish", f"{here}/attempts/at-none/finish", {"status": "failed"}, 404),
                ("POST", attempt + "/finish", f"{here}/attempts/{attempt_id}/finish", {"spans": [{}]}, 422),
                ("POST", attempt, f"{here}/attempts/{attempt_id}", {"status": "succeeded"}, 200),
                ("POST", attempt, f"{here}/attempts/at-none", {"status": "failed"}, 404),
                ("POST", waits, None, {"rollout_ids": [rollout_id, "ro-none"], "timeout": 0}, 200),
                ("POST", waits, None, {"rollout_ids": [second_queued], "timeout": 0.05}, 200),
                ("POST", worker, f"{workers}/w-1", {"heartbeat_stats": {"gpu": 0.5}}, 200),
                ("POST", worker, f"{workers}/w-9", None, 200),
                ("GET", worker, f"{workers}/w-1", None, 200),
                ("GET", worker, f"{workers}/w-none", None, 200),
                ("GET", workers, f"{workers}?status_in=busy", None, 200),
                ("POST", workers + "/search", None, {"worker_id_contains": "w-"}, 200),
                ("GET", P + "/statistics", None, None, 200),
                ("GET", rollouts, f"{rollouts}?sort_by=nothing", None, 422),
                ("GET", rollouts, f"{rollouts}?limit=x", None, 422),
            ]
            for verb, template, path, body, expect in cases:
                await check(verb, template, path, body, expect)

        documented = {
            (verb.upper(), path)
            for path, item in openapi["paths"].items()
            for verb in item
            if path.startswith(PREFIX)
        }
        missing = documented - seen
        assert not missing, f"routes not exercised: {sorted(missing)}"


@pytest.mark.parametrize("path", ["/openapi.json", "/docs"])
async def test_docs_are_served(path: str) -> None:
    with running_server() as server:
        async with http_session() as session:
            status, _, _ = await call(session, server, "GET", path)
            assert status == 200
