"""What a store server process needs to build its store and server: one server, or each of ``--workers``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...base import LightningStore
    from .store import LightningStoreServer

__all__ = ["ServerSettings"]


@dataclass
class ServerSettings:
    """The server's settings (picklable: sent to spawned worker processes)."""

    backend: str
    host: str = "127.0.0.1"
    port: int = 0
    token: str | None = None
    cors_allow_origins: list[str] = field(default_factory=list[str])
    max_body_bytes: int = 64 * 1024 * 1024
    debug: bool = False
    metrics_public: bool = False
    plain_http: bool = False
    watchdog_interval: float | None = None
    log_level: str = "INFO"
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Names this run of the server: idempotency keys held by requests of an earlier run are stale."""

    @property
    def auth(self) -> str:
        """How the server guards its routes, for its start-up line."""
        return "bearer token required" if self.token else "no token: anyone who can reach it can use it"

    def server(self, store: LightningStore) -> LightningStoreServer:
        """A server of ``store`` with these settings."""
        from .store import LightningStoreServer

        return LightningStoreServer(
            store,
            host=self.host,
            port=self.port,
            token=self.token,
            cors_allow_origins=self.cors_allow_origins,
            max_body_bytes=self.max_body_bytes,
            debug=self.debug,
            metrics_public=self.metrics_public,
            plain_http=self.plain_http,
        )
