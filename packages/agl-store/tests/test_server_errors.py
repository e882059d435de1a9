"""Bad input gets a 4xx with a message, server faults a 500 without internals, and the server keeps serving."""

from __future__ import annotations

import http.client
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from agl.store import InMemoryLightningStore, LightningStoreServer
from agl.testing.store.http import call, health, http_session, running_server
from agl.types import UNSET, ConflictError, InvalidRequestError, NamedResources, ResourcesUpdate, Worker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@pytest.fixture
def server() -> Any:
    with running_server(max_body_bytes=100_000) as srv:
        yield srv


@pytest.fixture
async def session() -> AsyncIterator[Any]:
    async with http_session() as s:
        yield s


async def _claimed(session: Any, server: LightningStoreServer) -> tuple[str, str]:
    status, body, _ = await call(
        session, server, "POST", "/v1/agl/queues/rollouts/enqueue", json_body={"rollouts": [{"input": 1}]}
    )
    assert status == 201
    status, body, _ = await call(session, server, "POST", "/v1/agl/queues/rollouts/dequeue", json_body={})
    assert status == 200 and len(body) == 1
    return body[0]["rollout_id"], body[0]["attempt"]["attempt_id"]


@pytest.mark.parametrize(
    ("verb", "path", "body", "needle"),
    [
        ("POST", "/v1/agl/rollouts/ro-missing/attempts/latest", {"status": "failed"}, "ro-missing"),
        ("POST", "/v1/agl/rollouts/ro-missing/attempts", {}, "ro-missing"),
        ("POST", "/v1/agl/rollouts/ro-missing", {"status": "cancelled"}, "ro-missing"),
    ],
)
async def test_unknown_ids_are_404_with_the_id_in_the_message(
    server: LightningStoreServer, session: Any, verb: str, path: str, body: Any, needle: str
) -> None:
    status, answer, _ = await call(session, server, verb, path, json_body=body)
    assert status == 404
    assert needle in answer["detail"] and answer["error_type"] == "NotFoundError"


async def test_unknown_attempt_of_known_rollout_is_404(server: LightningStoreServer, session: Any) -> None:
    rollout_id, _ = await _claimed(session, server)
    status, answer, _ = await call(
        session,
        server,
        "POST",
        f"/v1/agl/rollouts/{rollout_id}/attempts/at-nope",
        json_body={"status": "failed"},
    )
    assert status == 404 and "at-nope" in answer["detail"]


async def test_get_of_unknown_ids_is_null_not_an_error(server: LightningStoreServer, session: Any) -> None:
    for path in (
        "/v1/agl/rollouts/ro-x",
        "/v1/agl/rollouts/ro-x/attempts/latest",
        "/v1/agl/resources/rs-x",
        "/v1/agl/workers/w-x",
    ):
        status, answer, _ = await call(session, server, "GET", path)
        assert (status, answer) == (200, None), path


async def test_malformed_json_is_422(server: LightningStoreServer, session: Any) -> None:
    status, answer, _ = await call(
        session,
        server,
        "POST",
        "/v1/agl/queues/rollouts/enqueue",
        data=b'{"rollouts": [',
        headers={"Content-Type": "application/json"},
    )
    assert status == 422
    assert "json" in answer["detail"].lower() and answer["error_type"] == "RequestValidationError"
    assert await health(session, server)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/agl/queues/rollouts/enqueue", {"rollouts": "many"}, "rollouts"),
        ("/v1/agl/queues/rollouts/enqueue", {"rollouts": [{"input": 1, "mode": "play"}]}, "mode"),
        ("/v1/agl/queues/rollouts/enqueue", {"rollouts": [{"mode": "train"}]}, "input"),
        ("/v1/agl/queues/rollouts/dequeue", {"limit": "lots"}, "limit"),
        ("/v1/agl/queues/rollouts/dequeue", {"timeout": -1}, "timeout"),
        ("/v1/agl/rollouts/search", {"status_in": ["done"]}, "status_in"),
        ("/v1/agl/rollouts/search", {"unknown_filter": 1}, "unknown_filter"),
        ("/v1/agl/spans/batch", {"spans": [{"rollout_id": "r"}]}, "attempt_id"),
        ("/v1/agl/waits/rollouts", {"rollout_ids": "ro-1"}, "rollout_ids"),
        ("/v1/agl/resources", {"main": {"resource_type": "llm"}}, "endpoint"),
    ],
)
async def test_wrong_types_are_422_naming_the_field(
    server: LightningStoreServer, session: Any, path: str, body: Any, field: str
) -> None:
    status, answer, _ = await call(session, server, "POST", path, json_body=body)
    assert status == 422, answer
    assert field in answer["detail"]
    assert any(field in ".".join(e["loc"]) or field in e["msg"] for e in answer["errors"])


async def test_wrong_query_parameter_types_are_422(server: LightningStoreServer, session: Any) -> None:
    status, answer, _ = await call(session, server, "GET", "/v1/agl/rollouts?limit=abc")
    assert status == 422 and "limit" in answer["detail"]
    status, answer, _ = await call(session, server, "GET", "/v1/agl/rollouts?no_such_param=1")
    assert status == 422 and "no_such_param" in answer["detail"]


async def test_bad_query_values_are_422_saying_what_is_allowed(
    server: LightningStoreServer, session: Any
) -> None:
    status, answer, _ = await call(
        session, server, "POST", "/v1/agl/rollouts/search", json_body={"sort_by": "colour"}
    )
    assert status == 422 and "sort_by" in answer["detail"] and "'status'" in answer["detail"]
    status, answer, _ = await call(session, server, "GET", "/v1/agl/spans?rollout_id=r&offset=-3")
    assert status == 422 and "offset" in answer["detail"]


async def test_null_where_a_value_is_needed_is_422(server: LightningStoreServer, session: Any) -> None:
    rollout_id, attempt_id = await _claimed(session, server)
    status, answer, _ = await call(
        session, server, "POST", f"/v1/agl/rollouts/{rollout_id}", json_body={"status": None}
    )
    assert status == 422 and "status" in answer["detail"]
    status, answer, _ = await call(
        session,
        server,
        "POST",
        f"/v1/agl/rollouts/{rollout_id}/attempts/{attempt_id}",
        json_body={"worker_id": None},
    )
    assert status == 422 and "worker_id" in answer["detail"]
    status, answer, _ = await call(
        session, server, "POST", "/v1/agl/workers/w-1", json_body={"heartbeat_stats": None}
    )
    assert status == 422 and "heartbeat_stats" in answer["detail"]


async def test_declared_oversize_body_is_413_before_reading(
    server: LightningStoreServer, session: Any
) -> None:
    big = json.dumps({"rollouts": [{"input": "x" * 200_000}]}).encode()
    status, answer, _ = await call(
        session,
        server,
        "POST",
        "/v1/agl/queues/rollouts/enqueue",
        data=big,
        headers={"Content-Type": "application/json"},
    )
    assert status == 413 and "100000" in answer["detail"]
    assert await health(session, server)


def test_streamed_oversize_body_is_cut_off_at_the_cap(server: LightningStoreServer) -> None:
    """A chunked body with no Content-Length is counted as it arrives and refused once past the cap."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.putrequest("POST", "/v1/agl/queues/rollouts/enqueue")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    chunk = b"x" * 16_384
    sent = 0
    try:
        for _ in range(40):  # up to 640 KB; the server answers after ~100 KB
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    response = conn.getresponse()
    assert response.status == 413
    assert "limit" in json.loads(response.read())["detail"]
    conn.close()
    # The store is unharmed and still serving.
    check = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    check.request("GET", "/v1/agl/health")
    assert check.getresponse().status == 200
    check.close()


async def test_unknown_route_and_method_are_json_4xx(server: LightningStoreServer, session: Any) -> None:
    status, answer, _ = await call(session, server, "GET", "/v1/agl/nowhere")
    assert status == 404 and answer["detail"]
    status, answer, _ = await call(session, server, "DELETE", "/v1/agl/rollouts")
    assert status == 405 and answer["detail"]


class _FaultyStore(InMemoryLightningStore):
    """A real store whose statistics() is broken, and whose add_resources reports a conflict."""

    async def statistics(self) -> Any:
        raise RuntimeError("secret internal detail")

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        raise ConflictError("resources conflict with the current snapshot")

    async def update_worker(self, worker_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        raise InvalidRequestError(f"worker id {worker_id!r} is reserved; pick another")


@pytest.fixture
def faulty_server(request: pytest.FixtureRequest) -> Any:
    """A server over a :class:`_FaultyStore`; its options from ``parametrize("faulty_server", [options],
    indirect=True)``."""
    with running_server(_FaultyStore(), **getattr(request, "param", {})) as srv:
        yield srv


async def test_server_fault_is_500_without_traceback(
    faulty_server: LightningStoreServer, session: Any
) -> None:
    status, answer, _ = await call(session, faulty_server, "GET", "/v1/agl/statistics")
    assert status == 500
    assert "traceback" not in answer and "secret internal detail" not in json.dumps(answer)
    assert answer["error_type"] == "RuntimeError"
    assert await health(session, faulty_server)


@pytest.mark.parametrize("faulty_server", [{"debug": True}], indirect=True)
async def test_debug_server_fault_includes_the_traceback(
    faulty_server: LightningStoreServer, session: Any
) -> None:
    status, answer, _ = await call(session, faulty_server, "GET", "/v1/agl/statistics")
    assert status == 500
    assert "secret internal detail" in answer["detail"] and "Traceback" in answer["traceback"]


async def test_invalid_request_from_the_store_is_400(
    faulty_server: LightningStoreServer, session: Any
) -> None:
    status, answer, _ = await call(session, faulty_server, "POST", "/v1/agl/workers/w-0", json_body={})
    assert status == 400 and "reserved" in answer["detail"] and answer["error_type"] == "InvalidRequestError"


async def test_conflict_is_409(faulty_server: LightningStoreServer, session: Any) -> None:
    body = {"p": {"resource_type": "prompt_template", "template": "x"}}
    status, answer, _ = await call(session, faulty_server, "POST", "/v1/agl/resources", json_body=body)
    assert status == 409 and "conflict" in answer["detail"]


_POST_PATHS = [
    "/v1/agl/queues/rollouts/enqueue",
    "/v1/agl/queues/rollouts/dequeue",
    "/v1/agl/rollouts",
    "/v1/agl/rollouts/search",
    "/v1/agl/rollouts/ro-x",
    "/v1/agl/rollouts/ro-x/attempts",
    "/v1/agl/rollouts/ro-x/attempts/search",
    "/v1/agl/rollouts/ro-x/attempts/latest",
    "/v1/agl/waits/rollouts",
    "/v1/agl/resources",
    "/v1/agl/resources/search",
    "/v1/agl/resources/rs-x",
    "/v1/agl/spans",
    "/v1/agl/spans/batch",
    "/v1/agl/spans/search",
    "/v1/agl/spans/next",
    "/v1/agl/spans/next/batch",
    "/v1/agl/workers/search",
    "/v1/agl/workers/w-x",
    "/v1/traces",
]


@pytest.fixture(scope="module")
def shared_server() -> Any:
    with running_server(max_body_bytes=100_000, max_wait_seconds=0.05) as srv:
        yield srv


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=cast("list[HealthCheck]", list(HealthCheck)),
)
@given(
    path=st.sampled_from(_POST_PATHS),
    body=st.one_of(
        st.binary(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
            ),
            max_leaves=12,
        ).map(lambda v: json.dumps(v).encode()),
    ),
    content_type=st.sampled_from(
        ["application/json", "application/octet-stream", "application/x-protobuf", "text/plain"]
    ),
)
def test_random_bodies_never_break_the_server(
    shared_server: LightningStoreServer, path: str, body: bytes, content_type: str
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", shared_server.port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": content_type})
        response = conn.getresponse()
        raw = response.read()
        # Random bodies may happen to be valid (e.g. {} to dequeue); a server fault never is.
        assert response.status < 500, (response.status, raw[:300])
        if response.status >= 400 and path != "/v1/traces":
            assert json.loads(raw)["detail"]
        conn.request("GET", "/v1/agl/health")
        assert conn.getresponse().status == 200
    finally:
        conn.close()
