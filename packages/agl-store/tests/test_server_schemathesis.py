"""Schemathesis drives every operation of the OpenAPI schema with generated requests (valid and invalid)
through the full served ASGI stack and checks each answer against the schema: no server errors, documented
status codes, content types and response bodies.

It runs on every store backend (memory, SQLite, PostgreSQL), with a server without token and one with a
token (requests carrying it, and requests without it, which must all be 401s). The example count is
bounded to keep the whole module under a minute. NUL characters are not generated: the API refuses them in
ids (400, see ``agl.types.validation``) where the schema cannot say so; ``test_bad_input.py`` covers them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import schemathesis
from agl.store import InMemoryLightningStore, LightningStoreServer, SqlLightningStore
from agl.testing.postgres import drop_schema, fresh_postgres_store, require_postgres
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection

TOKEN = "schemathesis-token"
_AUTH = {"Authorization": f"Bearer {TOKEN}"}
_MAX_EXAMPLES = 3


def _app(store: Any, token: str | None = None) -> Any:
    """The served ASGI stack of a server of ``store`` (nothing is bound: schemathesis calls it in process, as
    host ``testserver``: a token-less server answers only to its own names, see test_server_hosts.py)."""
    server = LightningStoreServer(store, port=0, max_wait_seconds=0.01, token=token, access_host="testserver")
    return server.asgi_app


# The OpenAPI schema is the same for every backend: it is read at import (parametrize needs it) from a server of
# an in-memory store; each test sends its cases to its own backend's app, made by a fixture, so collecting this
# module touches no database and no socket.
api = schemathesis.openapi.from_asgi("/openapi.json", _app(InMemoryLightningStore()))
api.config.generation.update(allow_x00=False)
# /v1/traces takes protobuf, which schemathesis cannot generate; test_bad_input.py and test_otlp.py cover it.
api = api.exclude(path="/v1/traces")


@pytest.fixture(scope="module")
def memory_app() -> Any:
    return _app(InMemoryLightningStore())


@pytest.fixture(scope="module")
def memory_token_app() -> Any:
    return _app(InMemoryLightningStore(), TOKEN)


@pytest.fixture(scope="module")
def sqlite_token_app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path: Path = tmp_path_factory.mktemp("schemathesis") / "store.sqlite"
    return _app(SqlLightningStore(f"sqlite:///{path}"), TOKEN)


@pytest.fixture(scope="module")
def postgres_app() -> Iterator[Any]:
    url = require_postgres()
    store = asyncio.run(fresh_postgres_store(url, time.time))
    yield _app(store)
    asyncio.run(drop_schema(url, store.schema))  # pyright: ignore[reportAttributeAccessIssue]  # the schema-scoped store


_SETTINGS = settings(
    max_examples=_MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=cast("list[HealthCheck]", list(HealthCheck)),
)


def _check(case: Any, app: Any, headers: dict[str, str] | None = None) -> None:
    # In a query string one value and a one-item array look the same, so "negative" GET cases that send a
    # scalar for an array parameter are in fact valid; every other check runs on every operation.
    excluded = [negative_data_rejection] if case.method == "GET" else []
    case.call_and_validate(headers=headers, excluded_checks=excluded, app=app)


@api.parametrize()
@_SETTINGS
def test_every_operation_on_memory(case: Any, memory_app: Any) -> None:
    _check(case, memory_app)


@api.parametrize()
@_SETTINGS
def test_every_operation_on_sqlite_with_token(case: Any, sqlite_token_app: Any) -> None:
    _check(case, sqlite_token_app, _AUTH)


@api.parametrize()
@_SETTINGS
def test_every_operation_on_postgres(case: Any, postgres_app: Any) -> None:
    _check(case, postgres_app)


@api.parametrize()
@settings(
    max_examples=1,
    deadline=None,
    derandomize=True,
    suppress_health_check=cast("list[HealthCheck]", list(HealthCheck)),
)
def test_without_the_token_every_operation_but_health_is_refused(case: Any, memory_token_app: Any) -> None:
    response = case.call(app=memory_token_app)
    assert response.status_code < 500, (case.method, case.path, response.status_code)
    if case.path.endswith("/health") or case.method.upper() != case.operation.method.upper():
        return  # health is public; a method the path does not serve is a 405 before authentication
    assert response.status_code == 401, (case.method, case.path, response.status_code, response.text[:200])
