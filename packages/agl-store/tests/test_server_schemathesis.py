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
import atexit
import os
import shutil
import tempfile
from typing import Any

import schemathesis
from agl.store import InMemoryLightningStore, LightningStoreServer, SqlLightningStore
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection

TOKEN = "schemathesis-token"
_AUTH = {"Authorization": f"Bearer {TOKEN}"}
_MAX_EXAMPLES = 3


def _postgres_store() -> SqlLightningStore | None:
    from agl.testing.postgres import POSTGRES_URL, postgres_available

    if not postgres_available():
        return None  # test_every_operation_on_postgres reports it (skip, or fail in CI)
    from agl.testing.postgres import drop_schema, fresh_postgres_store

    store = asyncio.run(fresh_postgres_store(POSTGRES_URL, lambda: __import__("time").time()))
    atexit.register(lambda: asyncio.run(drop_schema(POSTGRES_URL, store.schema)))  # type: ignore[attr-defined]
    return store


def _schema(store: Any, token: str | None) -> Any:
    server = LightningStoreServer(store, port=0, max_wait_seconds=0.01, token=token)
    _ = server.app  # build the app and its served ASGI stack
    headers = {} if token is None else _AUTH
    schema = schemathesis.openapi.from_asgi("/openapi.json", server._asgi, headers=headers)
    schema.config.generation.update(allow_x00=False)
    # /v1/traces takes protobuf, which schemathesis cannot generate; test_bad_input.py and test_otlp.py cover it.
    return schema.exclude(path="/v1/traces")


# The schemas are built at import (parametrize needs them), before any pytest fixture: the directory goes at exit.
_tmp = tempfile.mkdtemp(prefix="agl-schemathesis-")
atexit.register(shutil.rmtree, _tmp, ignore_errors=True)
memory_schema = _schema(InMemoryLightningStore(), None)
memory_token_schema = _schema(InMemoryLightningStore(), TOKEN)
sqlite_token_schema = _schema(SqlLightningStore(f"sqlite:///{os.path.join(_tmp, 'store.sqlite')}"), TOKEN)
_pg = _postgres_store()
postgres_schema = _schema(_pg if _pg is not None else InMemoryLightningStore(), None)

_SETTINGS = settings(
    max_examples=_MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


def _check(case: Any, headers: dict[str, str] | None = None) -> None:
    # In a query string one value and a one-item array look the same, so "negative" GET cases that send a
    # scalar for an array parameter are in fact valid; every other check runs on every operation.
    excluded = [negative_data_rejection] if case.method == "GET" else []
    case.call_and_validate(headers=headers, excluded_checks=excluded)


@memory_schema.parametrize()
@_SETTINGS
def test_every_operation_on_memory(case: Any) -> None:
    _check(case)


@sqlite_token_schema.parametrize()
@_SETTINGS
def test_every_operation_on_sqlite_with_token(case: Any) -> None:
    _check(case, _AUTH)


@postgres_schema.parametrize()
@_SETTINGS
def test_every_operation_on_postgres(case: Any) -> None:
    if _pg is None:
        from agl.testing.postgres import require_postgres

        require_postgres()
    _check(case)


@memory_token_schema.parametrize()
@settings(max_examples=1, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_without_the_token_every_operation_but_health_is_refused(case: Any) -> None:
    response = case.call()
    assert response.status_code < 500, (case.method, case.path, response.status_code)
    if case.path.endswith("/health") or case.method.upper() != case.operation.method.upper():
        return  # health is public; a method the path does not serve is a 405 before authentication
    assert response.status_code == 401, (case.method, case.path, response.status_code, response.text[:200])
