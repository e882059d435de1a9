"""The store's HTTP client: :class:`LightningStoreClient`.

- ``store.py``: :class:`LightningStoreClient` (a ``LightningStore`` that talks to a ``LightningStoreServer``);
- ``_transport.py``: connections per event loop, retries, error mapping;
- ``_conn.py``: the lean HTTP/1.1 keep-alive connection pool under it, and the :class:`Transport` seam;
- ``_asgi.py``: :class:`ASGITransport`, the client calling an ASGI app in-process (``transport=``).
"""

from ._asgi import ASGITransport
from ._conn import Transport
from .store import LightningStoreClient

__all__ = ["ASGITransport", "LightningStoreClient", "Transport"]
