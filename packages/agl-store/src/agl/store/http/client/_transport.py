"""The HTTP side of :class:`~agl.store.LightningStoreClient`: connections per event loop, retries, error mapping."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, cast
from urllib.parse import urlencode

from agl.types.env import STORE_TOKEN
from pydantic import TypeAdapter

from ...errors import (
    StoreAuthenticationError,
    StoreClientError,
    StoreConflictError,
    StoreConnectionError,
    StoreFullClientError,
    StoreInvalidRequestError,
    StoreNotFoundError,
    StoreServerError,
)
from .._models import API_PREFIX, IDEMPOTENCY_HEADER
from ._conn import ConnectionPool, Transport

__all__ = ["HttpTransport"]

logger = logging.getLogger("agl.store.client")

_ANY: TypeAdapter[Any] = TypeAdapter(Any)
T = TypeVar("T")


_STATUS_ERRORS: dict[int, type[StoreClientError]] = {
    400: StoreInvalidRequestError,
    401: StoreAuthenticationError,
    403: StoreAuthenticationError,
    404: StoreNotFoundError,
    409: StoreConflictError,
    413: StoreInvalidRequestError,
    422: StoreInvalidRequestError,
    507: StoreFullClientError,
}
_FINAL = frozenset(_STATUS_ERRORS)
"""Statuses answered at once: a retry cannot change them (every other 5xx, and 408, is retried)."""


class HttpTransport:
    """Configuration, one connection pool per event loop, and the retrying request loop of every call."""

    def __init__(
        self,
        address: str,
        token: str | None = None,
        *,
        retry_delays: Sequence[float] = (1.0, 2.0, 5.0),
        health_retry_delays: Sequence[float] = (0.1, 0.2, 0.5),
        request_timeout: float = 30.0,
        connection_timeout: float = 5.0,
        long_poll_seconds: float = 25.0,
        transport: Transport | None = None,
    ) -> None:
        if not address.startswith(("http://", "https://")):
            raise ValueError(f"store address must start with http:// or https://, got {address!r}")
        self.address = address.rstrip("/")
        self.token = STORE_TOKEN.get(token)
        self.retry_delays = tuple(retry_delays)
        self.health_retry_delays = tuple(health_retry_delays)
        self.request_timeout = request_timeout
        self.connection_timeout = connection_timeout
        self.long_poll_seconds = long_poll_seconds
        self.transport = transport
        """Where requests go instead of this process's connections to ``address`` (not pickled)."""
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._api = self.address + API_PREFIX
        self._lock = threading.Lock()
        self._sessions: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], ConnectionPool]] = {}
        self._headers = {"Content-Type": "application/json"}
        if self.token:
            self._headers["Authorization"] = f"Bearer {self.token}"
        self._get_headers = {k: v for k, v in self._headers.items() if k != "Content-Type"}

    def __repr__(self) -> str:
        return f"LightningStoreClient({self.address!r})"

    # -- pickling: only the configuration travels ----------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "token": self.token,
            "retry_delays": self.retry_delays,
            "health_retry_delays": self.health_retry_delays,
            "request_timeout": self.request_timeout,
            "connection_timeout": self.connection_timeout,
            "long_poll_seconds": self.long_poll_seconds,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)
        self.transport = None
        self._init_runtime()

    # -- connections ---------------------------------------------------------------------------

    def _session(self) -> Transport:
        """The calling event loop's connection pool (made on first use), or the given transport."""
        if self.transport is not None:
            return self.transport
        loop = asyncio.get_running_loop()
        key = id(loop)
        entry = self._sessions.get(key)
        if entry is not None and entry[0]() is loop and not entry[1].closed:
            return entry[1]
        with self._lock:
            for other in [
                k for k, (ref, _) in self._sessions.items() if (lp := ref()) is None or lp.is_closed()
            ]:
                del self._sessions[other]
            pool = ConnectionPool(self.address, connection_timeout=self.connection_timeout)
            self._sessions[key] = (weakref.ref(loop), pool)
            return pool

    async def close(self) -> None:
        """Close the connections of the calling event loop (each thread that used the client closes its own).

        The client stays usable: a later call opens new connections.
        """
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            return
        with self._lock:
            entry = self._sessions.pop(id(current), None)
            for other in [
                k for k, (ref, _) in self._sessions.items() if (lp := ref()) is None or lp.is_closed()
            ]:
                del self._sessions[other]
        if entry is not None and entry[0]() is current:
            entry[1].close()

    async def release_loop_resources(self) -> None:
        """Close the calling event loop's connections (what :meth:`close` does for this client)."""
        await self.close()

    # -- the request loop ----------------------------------------------------------------------

    async def _healthy(self, session: Transport) -> bool:
        for delay in (0.0, *self.health_retry_delays):
            if delay:
                await asyncio.sleep(delay)
            try:
                response = await session.request(
                    "GET", API_PREFIX + "/health", None, self._get_headers, self.connection_timeout
                )
                if response.status == 200:
                    return True
            except (asyncio.TimeoutError, OSError):
                pass
        return False

    def _http_error(self, op: str, verb: str, path: str, status: int, data: bytes) -> StoreClientError:
        detail: str | None = None
        error_type: str | None = None
        try:
            body = json.loads(data)
            if isinstance(body, dict):
                fields = cast("dict[str, Any]", body)
                detail = str(fields.get("detail", "")) or None
                error_type = fields.get("error_type")
        except ValueError:
            pass
        if detail is None:
            detail = data[:500].decode("utf-8", "replace") or "(empty answer)"
        cls = _STATUS_ERRORS.get(
            status, StoreServerError if status >= 500 or status == 408 else StoreClientError
        )
        return cls(
            f"{op}: {detail} (HTTP {status} from {verb} {path})",
            method=op,
            status=status,
            server_message=detail,
            error_type=error_type,
        )

    async def _request(
        self,
        op: str,
        verb: Literal["GET", "POST"],
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        wait: float = 0.0,
    ) -> tuple[bytes, Mapping[str, str]]:
        """Send one call (with retries); returns the body and headers of the successful answer."""
        session = self._session()
        target = API_PREFIX + path
        if params:
            target += "?" + urlencode(params, doseq=True)
        data = _ANY.dump_json(body, serialize_as_any=True) if body is not None else None
        if verb == "POST":
            headers = {**self._headers, IDEMPOTENCY_HEADER: os.urandom(16).hex()}
        else:
            headers = self._headers if data is not None else self._get_headers
        timeout = self.request_timeout + wait
        last: StoreClientError | None = None
        for attempt, delay in enumerate((0.0, *self.retry_delays)):
            if attempt:
                await asyncio.sleep(delay)
                session = self._session()  # closed meanwhile (close() from another task): a fresh one
                if not await self._healthy(session):
                    continue
                logger.info("retrying %s (%s %s), try %d: %s", op, verb, path, attempt + 1, last)
            try:
                response = await session.request(verb, target, data, headers, timeout)
            except (asyncio.TimeoutError, OSError) as exc:
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                last = StoreConnectionError(
                    f"{op}: cannot reach the store at {self.address} ({reason})", method=op
                )
                continue
            status = response.status
            if status < 400:
                return response.body, response.headers
            last = self._http_error(op, verb, path, status, response.body)
            if status in _FINAL or (status < 500 and status != 408):
                raise last
        assert last is not None
        raise last

    async def _call(
        self,
        op: str,
        verb: Literal["GET", "POST"],
        path: str,
        adapter: TypeAdapter[T],
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        wait: float = 0.0,
    ) -> T:
        payload, _ = await self._request(op, verb, path, body, params=params, wait=wait)
        return adapter.validate_json(payload)
