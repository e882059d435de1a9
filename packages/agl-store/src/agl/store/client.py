"""``LightningStoreClient``: a :class:`~agl.store.LightningStore` that talks HTTP to a ``LightningStoreServer``.

This is the public import path; the code lives in :mod:`agl.store.http.client`.
"""

from .http.client.store import LightningStoreClient

__all__ = ["LightningStoreClient"]
