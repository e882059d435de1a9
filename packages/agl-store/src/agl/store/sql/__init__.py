"""The SQL store: SQLite (a file; the embedded durable default) and PostgreSQL, one implementation."""

from .store import SqlLightningStore

__all__ = ["SqlLightningStore"]
