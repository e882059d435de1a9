"""The in-memory store: the fastest backend, for one process (any number of threads and event loops).

- ``store.py``: :class:`InMemoryLightningStore`, locking and waiting around the data;
- ``_core.py``: the data and its status transitions (every decision from :mod:`agl.store._rules`);
- ``_records.py``: what the store keeps per rollout and the copies it hands out;
- ``_spans.py``: the span cache (flat tuples, content as JSON bytes; the SQL store's spans are in
  :mod:`agl.store.sql`);
- ``_query.py``: filtering, sorting and pagination of rows, with the SQL backend's semantics;
- ``_cap.py``: the optional memory cap and the estimated cost of what the store keeps.
"""

from .store import InMemoryLightningStore

__all__ = ["InMemoryLightningStore"]
