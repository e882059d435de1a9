"""The LightningStore: rollouts, attempts, spans, resources and workers, in memory, in SQL or over HTTP."""

from typing import TYPE_CHECKING

from agl.types.lazy import lazy_exports

from . import errors
from ._open import DEFAULT_MEMORY_MAX_BYTES, is_store_url, open_store
from .annotate import annotate_rollout
from .base import FinishedAttempt, LightningStore, LightningStoreCapabilities, LightningStoreStatistics
from .errors import *  # noqa: F403  (every error users catch, listed once in errors.__all__)
from .group_writer import GroupWriter
from .loop_bound import LoopBoundStore, as_thread_safe
from .memory import InMemoryLightningStore

if TYPE_CHECKING:
    from .client import LightningStoreClient
    from .server import LightningStoreServer
    from .serving import ConnectionLimits
    from .sql import SqlLightningStore

# The HTTP server and client pull in FastAPI/uvicorn/aiohttp: imported on first use only.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "LightningStoreServer": ".server",
        "LightningStoreClient": ".client",
        "SqlLightningStore": ".sql",
        "ConnectionLimits": ".serving",
    },
    globals(),
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MEMORY_MAX_BYTES",
    "ConnectionLimits",
    "FinishedAttempt",
    "GroupWriter",
    "InMemoryLightningStore",
    "LightningStore",
    "LightningStoreCapabilities",
    "LightningStoreClient",
    "LightningStoreServer",
    "LightningStoreStatistics",
    "LoopBoundStore",
    "SqlLightningStore",
    "annotate_rollout",
    "as_thread_safe",
    "is_store_url",
    "open_store",
]
__all__ += errors.__all__
