"""The LightningStore: rollouts, attempts, spans, resources and workers, in memory, in SQL or over HTTP."""

from .base import LightningStore, LightningStoreCapabilities, LightningStoreStatistics

__version__ = "0.1.0"

__all__ = ["LightningStore", "LightningStoreCapabilities", "LightningStoreStatistics"]
