"""The HTTP side of :class:`~agl.store.LightningStoreClient`: sessions per event loop, retries, error mapping."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from agl.types.env import STORE_TOKEN
from pydantic import TypeAdapter

from ._http_models import API_PREFIX, IDEMPOTENCY_HEADER
from .errors import (
    StoreAuthenticationError,
    StoreClientError,
    StoreConflictError,
    StoreConnectionError,
    StoreInvalidRequestError,
    StoreNotFoundError,
    StoreServerError,
)

if TYPE_CHECKING:
    import aiohttp

__all__ = ["HttpTransport"]

logger = logging.getLogger("agl.store.client")

_ANY: TypeAdapter[Any] = TypeAdapter(Any)


_STATUS_ERRORS: dict[int, type[StoreClientError]] = {
    400: StoreInvalidRequestError,
    401: StoreAuthenticationError,
    403: StoreAuthenticationError,
    404: StoreNotFoundError,
    409: StoreConflictError,
    413: StoreInvalidRequestError,
    422: StoreInvalidRequestError,
}


class HttpTransport:
    """Configuration, one aiohttp session per event loop, and the retrying request loop of every call."""

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
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._api = self.address + API_PREFIX
        self._lock = threading.Lock()
        self._sessions: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], aiohttp.ClientSession]] = {}
        self._headers = {"Content-Type": "application/json"}
        if self.token:
            self._headers["Authorization"] = f"Bearer {self.token}"

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
        self._init_runtime()

    # -- sessions ------------------------------------------------------------------------------

    def _session(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        key = id(loop)
        with self._lock:
            entry = self._sessions.get(key)
            if entry is not None and entry[0]() is loop and not entry[1].closed:
                return entry[1]
            for other in [
                k for k, (ref, _) in self._sessions.items() if (lp := ref()) is None or lp.is_closed()
            ]:
                del self._sessions[other]
            session = aiohttp.ClientSession(
                # ssl=False for plain http:// skips loading the CA bundle (~0.25 s per session).
                connector=aiohttp.TCPConnector(
                    limit=256,
                    keepalive_timeout=25.0,
                    ssl=not self.address.startswith("http://"),
                ),
                headers=self._headers,
            )
            self._sessions[key] = (weakref.ref(loop), session)
            return session

    async def close(self) -> None:
        """Close the session of the calling event loop (each thread that used the client closes its own).

        The client stays usable: a later call opens a new session.
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
        if entry is not None and entry[0]() is current and not entry[1].closed:
            await entry[1].close()

    async def release_loop_resources(self) -> None:
        """Close the calling event loop's HTTP session (what :meth:`close` does for this client)."""
        await self.close()

    # -- the request loop ----------------------------------------------------------------------

    async def _healthy(self, session: aiohttp.ClientSession) -> bool:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.connection_timeout)
        for delay in (0.0, *self.health_retry_delays):
            if delay:
                await asyncio.sleep(delay)
            try:
                async with session.get(self._api + "/health", timeout=timeout) as response:
                    if response.status == 200:
                        return True
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                pass
        return False

    def _http_error(self, op: str, verb: str, path: str, status: int, data: bytes) -> StoreClientError:
        detail: str | None = None
        error_type: str | None = None
        try:
            body = json.loads(data)
            if isinstance(body, dict):
                detail = str(body.get("detail", "")) or None
                error_type = body.get("error_type")
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
        import aiohttp

        session = self._session()
        url = self._api + path
        data = _ANY.dump_json(body, serialize_as_any=True) if body is not None else None
        headers = {IDEMPOTENCY_HEADER: uuid.uuid4().hex} if verb == "POST" else None
        timeout = aiohttp.ClientTimeout(
            total=self.request_timeout + wait, sock_connect=self.connection_timeout
        )
        last: StoreClientError | None = None
        for attempt, delay in enumerate((0.0, *self.retry_delays)):
            if attempt:
                await asyncio.sleep(delay)
                if not await self._healthy(session):
                    continue
                logger.info("retrying %s (%s %s), try %d: %s", op, verb, path, attempt + 1, last)
            try:
                async with session.request(
                    verb, url, data=data, params=params, headers=headers, timeout=timeout
                ) as response:
                    payload = await response.read()
                    status = response.status
                    response_headers = response.headers
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                last = StoreConnectionError(
                    f"{op}: cannot reach the store at {self.address} ({reason})", method=op
                )
                continue
            if status < 400:
                return payload, response_headers
            last = self._http_error(op, verb, path, status, payload)
            if status < 500 and status != 408:
                raise last
        assert last is not None
        raise last

    async def _call(
        self,
        op: str,
        verb: Literal["GET", "POST"],
        path: str,
        adapter: TypeAdapter[Any],
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        wait: float = 0.0,
    ) -> Any:
        payload, _ = await self._request(op, verb, path, body, params=params, wait=wait)
        return adapter.validate_json(payload)
