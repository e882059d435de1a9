"""The store's HTTP client: :class:`LightningStoreClient`.

- ``store.py``: :class:`LightningStoreClient` (a ``LightningStore`` that talks to a ``LightningStoreServer``);
- ``_transport.py``: connections per event loop, retries, error mapping;
- ``_conn.py``: the lean HTTP/1.1 keep-alive connection pool under it.
"""

from .store import LightningStoreClient

__all__ = ["LightningStoreClient"]
