"""``AppOptions``: how the store's HTTP app behaves (auth, CORS, limits), shared by the app and its routes."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._replay import ReplayCache

__all__ = ["AppOptions"]


@dataclass
class AppOptions:
    """Settings of the HTTP app that :class:`~agl.store.LightningStoreServer` serves."""

    token: str | None = None
    cors_allow_origins: Sequence[str] = ()
    max_body_bytes: int = 64 * 1024 * 1024
    max_wait_seconds: float = 30.0
    debug: bool = False
    shutdown: asyncio.Event | None = field(default=None, repr=False)
    """Set when the server stops: long polls end early with what they have."""
    metrics_public: bool = False
    """Serve ``/metrics`` without the bearer token."""
    replay_cache: ReplayCache | None = field(default=None, repr=False)
    """Where idempotent answers are kept for replays (default: a :class:`MemoryReplayCache` per app)."""
    host_names: frozenset[str] | None = None
    """The ``Host`` names answered besides IP addresses; ``None``: any (see :mod:`._hosts`)."""
