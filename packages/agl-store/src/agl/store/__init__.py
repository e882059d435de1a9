"""The LightningStore: rollouts, attempts, spans, resources and workers, in memory, in SQL or over HTTP."""

from typing import TYPE_CHECKING, Any

from ._open import is_store_url, open_store
from .base import LightningStore, LightningStoreCapabilities, LightningStoreStatistics
from .errors import (
    OTLPIngestError,
    StoreAuthenticationError,
    StoreClientError,
    StoreConflictError,
    StoreConnectionError,
    StoreInvalidRequestError,
    StoreNotFoundError,
    StoreServerError,
)
from .loop_bound import LoopBoundStore, as_thread_safe
from .memory import InMemoryLightningStore

if TYPE_CHECKING:
    from .client import LightningStoreClient
    from .server import LightningStoreServer
    from .sql import SqlLightningStore

# The HTTP server and client pull in FastAPI/uvicorn/aiohttp: imported on first use only.
_LAZY = {
    "LightningStoreServer": ".server",
    "LightningStoreClient": ".client",
    "SqlLightningStore": ".sql",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "InMemoryLightningStore",
    "LightningStore",
    "LightningStoreCapabilities",
    "LightningStoreClient",
    "LightningStoreServer",
    "LightningStoreStatistics",
    "LoopBoundStore",
    "OTLPIngestError",
    "SqlLightningStore",
    "StoreAuthenticationError",
    "StoreClientError",
    "StoreConflictError",
    "StoreConnectionError",
    "StoreInvalidRequestError",
    "StoreNotFoundError",
    "StoreServerError",
    "as_thread_safe",
    "is_store_url",
    "open_store",
]
