from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agl.testing.postgres import fresh_postgres_database, require_postgres


@pytest.fixture
def server_database(tmp_path: Path) -> Callable[[str], contextlib.AbstractContextManager[str]]:
    """``with server_database(backend) as url``: a new, empty database for ``agl store`` in another process
    (which creates its own schema): a SQLite file in ``tmp_path``, or a PostgreSQL database (dropped after)."""

    @contextlib.contextmanager
    def make(backend: str) -> Iterator[str]:
        if backend == "sqlite":
            yield f"sqlite:///{tmp_path / 'store.db'}"
            return
        with fresh_postgres_database(require_postgres(), prefix="agl_server_") as url:
            yield url

    return make
