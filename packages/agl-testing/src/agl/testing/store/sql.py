"""Fresh SQL databases for SQL-store tests that open several stores (threads, processes) on one database."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator
from pathlib import Path
from typing import Any

SQL_BACKENDS = ["sqlite", "postgres"]


@contextlib.contextmanager
def fresh_database(backend: str, tmp_path: Path) -> Generator[tuple[str, dict[str, Any]], None, None]:
    """``(url, engine_kwargs)`` of a new, empty database: a SQLite file, or a PostgreSQL schema (dropped after)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}", {}
        return
    from agl.testing.postgres import create_schema, drop_schema, require_postgres, schema_connect_args

    url = require_postgres()
    schema = asyncio.run(create_schema(url))
    try:
        yield url, schema_connect_args(schema)
    finally:
        asyncio.run(drop_schema(url, schema))
