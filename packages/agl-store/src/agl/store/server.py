"""``LightningStoreServer``: serve any :class:`~agl.store.LightningStore` over HTTP.

This is the public import path; the code lives in :mod:`agl.store.http.server`.
"""

from .http.server.store import DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT, TOKEN_ENV, LightningStoreServer

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_PORT", "TOKEN_ENV", "LightningStoreServer"]
