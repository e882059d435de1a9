"""The proxy's ASGI app: OpenAI-compatible routes, attribution by URL prefix, forwarding and recording."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from agl.store.serving import host_allowed, misdirected_reason
from agl.types.narrow import as_dict

from ._assemble import ResponseAssembler, SSEParser
from ._call_record import CallRecord, parse_traceparent
from ._checks import check_litellm_kwargs, check_request
from ._router import DIRECT_PROVIDERS, Deployment, ModelRouter
from ._span_recorder import SpanRecorder
from ._upstream import ABORTED_RESENDS, post, was_aborted
from ._wire import mirror_token_ids, mirrored_body

__all__ = ["ProxyApp", "ProxySettings"]

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_ENDPOINTS = {
    "/v1/chat/completions": "chat.completions",
    "/chat/completions": "chat.completions",
    "/v1/completions": "completions",
    "/completions": "completions",
}
_JSON = [(b"content-type", b"application/json")]
_SSE = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


@dataclass
class ProxySettings:
    """Behaviour switches of the proxy app (see :class:`agl.proxy.LLMProxy`)."""

    return_token_ids: bool = True
    request_logprobs: bool = False
    direct_forwarding: bool = True
    auth_token: str | None = None
    host_names: frozenset[str] | None = None
    """The ``Host`` names answered besides IP addresses (``None``: any); see :func:`agl.store.serving.local_host_names`."""
    max_request_bytes: int = 32 * 1024 * 1024
    request_timeout_s: float = 600.0


@dataclass
class _Exchange:
    """One completion request on its way to a backend: the client's channel, where it goes, what it asks."""

    receive: Receive
    send: Send
    deployment: Deployment
    endpoint: str
    request: dict[str, Any]
    stream: bool
    call: CallRecord | None

    def parts(
        self,
    ) -> tuple[Receive, Send, Deployment, str, dict[str, Any], bool, CallRecord | None]:
        return self.receive, self.send, self.deployment, self.endpoint, self.request, self.stream, self.call


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


class _ClientGone(Exception):
    pass


class ProxyApp:
    """A plain ASGI app (no framework: the hot path is a handful of awaits)."""

    def __init__(self, router: ModelRouter, recorder: SpanRecorder, settings: ProxySettings) -> None:
        self.router = router
        self.recorder = recorder
        self.settings = settings
        self.session: Any = None  # aiohttp.ClientSession, made on the server's loop
        self.unattributed_calls = 0
        self.active_streams = 0

    async def startup(self) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=self.settings.request_timeout_s),
            skip_auto_headers=("User-Agent",),
        )

    async def shutdown(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None
            # The closed connections' transports finish closing on the next loop turns: let them run before
            # the loop closes, or they are closed by the loop's teardown with a ResourceWarning.
            for _ in range(3):
                await asyncio.sleep(0)

    # -- dispatch -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            await self._dispatch(scope, receive, send)
        except _HTTPError as exc:
            await _send_json(send, exc.status, {"error": {"message": exc.message, "type": exc.kind}})
        except _ClientGone:
            return

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        headers = dict(scope["headers"])
        rollout_id = attempt_id = None
        if path.startswith("/rollout/"):
            parts = path.split("/", 5)
            if len(parts) < 5 or parts[3] != "attempt" or not parts[2] or not parts[4]:
                raise _HTTPError(
                    404, "expected a path like /rollout/{rollout_id}/attempt/{attempt_id}/v1/..."
                )
            rollout_id, attempt_id = unquote(parts[2]), unquote(parts[4])
            path = "/" + (parts[5] if len(parts) > 5 else "")
        if path in ("/health", "/v1/health"):
            await _send_json(send, 200, {"status": "ok"})
            return
        self._check_auth(headers)
        if rollout_id is None and b"x-rollout-id" in headers and b"x-attempt-id" in headers:
            rollout_id = _header_text(headers, b"x-rollout-id") or None
            attempt_id = _header_text(headers, b"x-attempt-id") or None
        endpoint = _ENDPOINTS.get(path)
        if endpoint is not None:
            if method != "POST":
                raise _HTTPError(405, f"{path} accepts POST only")
            await self._completion(scope, receive, send, headers, endpoint, rollout_id, attempt_id)
            return
        if path in ("/v1/models", "/models") and method == "GET":
            data = [
                {"id": n, "object": "model", "created": 0, "owned_by": "agl"} for n in self.router.model_names
            ]
            await _send_json(send, 200, {"object": "list", "data": data})
            return
        raise _HTTPError(
            404,
            f"no route {method} {path}; the proxy serves POST /v1/chat/completions, POST /v1/completions, "
            "GET /v1/models and GET /health, optionally under /rollout/{rollout_id}/attempt/{attempt_id}",
            "not_found_error",
        )

    def _check_auth(self, headers: dict[bytes, bytes]) -> None:
        names = self.settings.host_names
        if names is not None and not host_allowed(headers.get(b"host"), names):
            raise _HTTPError(
                421, misdirected_reason(headers.get(b"host", b""), "proxy"), "misdirected_request"
            )
        token = self.settings.auth_token
        if token and not hmac.compare_digest(headers.get(b"authorization", b""), f"Bearer {token}".encode()):
            raise _HTTPError(
                401, "missing or wrong bearer token (Authorization: Bearer <token>)", "authentication_error"
            )

    # -- completions ----------------------------------------------------------------------------

    async def _completion(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
        endpoint: str,
        rollout_id: str | None,
        attempt_id: str | None,
    ) -> None:
        request = _parse_request(await self._read_body(receive, headers), endpoint)
        model: str = request["model"]
        try:
            deployment = await self.router.select(model, request)
        except LookupError as exc:
            raise _HTTPError(404, str(exc), "model_not_found") from None
        except Exception as exc:  # the router refused: no healthy deployment, cooling down...
            raise _HTTPError(
                503, f"no backend available for model {model!r}: {exc}", "service_unavailable"
            ) from None
        stream = bool(request.get("stream"))
        call: CallRecord | None = None
        if rollout_id and attempt_id:
            call = CallRecord(
                rollout_id=rollout_id,
                attempt_id=attempt_id,
                endpoint=endpoint,
                request=request,
                stream=stream,
                provider=deployment.provider,
                deployment_model=deployment.litellm_model,
                api_base=deployment.api_base,
                # An invalid traceparent (not ASCII, malformed) is ignored, as W3C trace context says.
                traceparent=parse_traceparent(headers.get(b"traceparent", b"").decode("latin-1") or None),
            )
        else:
            self.unattributed_calls += 1
        try:
            exchange = _Exchange(receive, send, deployment, endpoint, request, stream, call)
            if deployment.direct and self.settings.direct_forwarding:
                await self._forward_direct(exchange)
            else:
                await self._forward_litellm(exchange)
        except _HTTPError as exc:
            if call is not None:
                call.http_status, call.error_type, call.error_message = exc.status, exc.kind, exc.message
            raise
        except _ClientGone:
            if call is not None:
                call.client_disconnected = True
            raise
        except asyncio.CancelledError:
            if call is not None:
                call.client_disconnected, call.error_type = True, "cancelled"
            raise
        finally:
            if call is not None and not call.finished:  # failed or cut off: recorded, nobody waits for it
                call.finish()
                self.recorder.submit(call)

    async def _commit(self, call: CallRecord | None) -> _HTTPError | None:
        """Store the call's span; the proxy calls this before the client can see the end of the answer.

        Returns the error to answer with instead when the span could not be stored: a call that is not
        recorded must not look recorded (422 when the store refused it, 503 when it failed).
        """
        if call is None or call.finished:
            return None
        call.finish()
        error = await self.recorder.write(call)
        if error is None:
            return None
        if isinstance(error, ValueError):
            status, why = 422, f"the store refused it: {error}"
        else:
            status, why = 503, f"the store failed: {type(error).__name__}: {error}"
        return _HTTPError(
            status,
            f"the call's span was not recorded ({why}); the answer is withheld so that an unrecorded call "
            "never looks recorded",
            "span_not_recorded",
        )

    async def _commit_stream(self, call: CallRecord | None, send: Send) -> bool:
        """:meth:`_commit` for a stream: on failure, end the stream with an error event instead of ``[DONE]``
        (OpenAI clients raise it); returns whether the stream was ended."""
        problem = await self._commit(call)
        if problem is None:
            return False
        payload = {"error": {"message": problem.message, "type": problem.kind, "code": problem.status}}
        body = b"data: " + json.dumps(payload).encode() + b"\n\n"
        await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True

    async def _read_body(self, receive: Receive, headers: dict[bytes, bytes]) -> bytes:
        limit = self.settings.max_request_bytes
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _HTTPError(413, f"request body over {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone()
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                raise _HTTPError(413, f"request body over {limit} bytes")
            chunks.append(body)
            if not message.get("more_body"):
                return b"".join(chunks)

    def _upstream_request(
        self, deployment: Deployment, endpoint: str, request: dict[str, Any]
    ) -> dict[str, Any]:
        upstream = dict(request)
        upstream["model"] = deployment.backend_model
        for key, value in deployment.defaults.items():
            upstream.setdefault(key, value)
        for key, value in deployment.extra_body.items():
            upstream.setdefault(key, value)
        if self.settings.return_token_ids:
            upstream["return_token_ids"] = True
        if self.settings.request_logprobs:
            if endpoint == "chat.completions":
                upstream.setdefault("logprobs", True)
            elif upstream.get("logprobs") is None:
                upstream["logprobs"] = 1
        return upstream

    async def _forward_direct(self, exchange: _Exchange) -> None:
        import aiohttp

        receive, send, deployment, endpoint, request, stream, call = exchange.parts()
        url = (
            f"{deployment.api_base}/{'chat/completions' if endpoint == 'chat.completions' else 'completions'}"
        )
        out_headers = {"Content-Type": "application/json", **deployment.extra_headers}
        if deployment.api_key:
            out_headers["Authorization"] = f"Bearer {deployment.api_key}"
        if call is not None:
            call.route = "direct"
        upstream_body = _dumps(self._upstream_request(deployment, endpoint, request))

        async def send_upstream() -> aiohttp.ClientResponse:
            try:
                return await post(self.session, url, upstream_body, out_headers)
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                raise _HTTPError(
                    502, f"backend {deployment.api_base} failed: {exc!r}", "bad_gateway"
                ) from None

        response = await send_upstream()
        try:
            content_type = response.headers.get("Content-Type", "")
            if not stream or response.status >= 400 or "text/event-stream" not in content_type:
                data = await response.read()
                for _ in range(ABORTED_RESENDS):  # see was_aborted: the answer to record is the whole one
                    if response.status >= 400 or not was_aborted(data):
                        break
                    response.release()
                    response = await send_upstream()
                    data = await response.read()
                payload = None
                if call is not None:
                    call.http_status = response.status
                    payload = _record_whole(call, endpoint, data, response.status)
                    problem = await self._commit(call)
                    if problem is not None:
                        raise problem
                if response.status < 400:
                    data = mirrored_body(data, payload)
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status,
                        "headers": [
                            (b"content-type", (content_type or "application/json").encode()),
                            (b"content-length", str(len(data)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": data})
                return
            if call is not None:
                call.http_status = response.status

            async def chunks() -> AsyncIterator[bytes]:
                async for data in response.content.iter_any():
                    yield data

            if (
                self.settings.return_token_ids
            ):  # mirrored into each event: relayed re-serialised, not as bytes
                await self._stream(receive, send, endpoint, _mirrored_events(chunks()), call, raw=False)
            else:
                await self._stream(receive, send, endpoint, chunks(), call, raw=True)
        finally:
            response.release()

    async def _stream(
        self, receive: Receive, send: Send, endpoint: str, chunks: Any, call: CallRecord | None, *, raw: bool
    ) -> None:
        """Relay ``chunks`` to the client as they come while watching for the client going away."""
        parser = SSEParser()
        assembler = ResponseAssembler(endpoint)
        if call is not None:
            call.assembler = assembler
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})

        async def pump() -> None:
            first = True
            async for item in chunks:
                data, payloads = _framed(item, parser, raw=raw)
                if first and call is not None:
                    call.first_chunk_ms = (time.perf_counter() - call.start_perf) * 1000.0
                    first = False
                for payload in payloads:
                    assembler.add_chunk(payload)
                # The client stops reading at [DONE]: the span must be stored before it.
                if parser.done and await self._commit_stream(call, send):
                    return
                await send({"type": "http.response.body", "body": data, "more_body": True})
            if await self._commit_stream(call, send):
                return
            if not raw:
                await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        self.active_streams += 1
        pump_task = asyncio.ensure_future(pump())
        watch_task = asyncio.ensure_future(_wait_disconnect(receive))
        try:
            done, _ = await asyncio.wait({pump_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
            if pump_task not in done:
                raise _ClientGone()
            error = pump_task.exception()
            if error is not None:
                if call is not None:
                    call.error_type, call.error_message = type(error).__name__, str(error)
                logger.warning("stream from the backend broke off: %r", error)
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.active_streams -= 1
            for task in (pump_task, watch_task):
                if not task.done():
                    task.cancel()
            await asyncio.gather(pump_task, watch_task, return_exceptions=True)
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    async def _forward_litellm(self, exchange: _Exchange) -> None:
        receive, send, deployment, endpoint, request, stream, call = exchange.parts()
        if call is not None:
            call.route = "litellm"
        kwargs = dict(request)
        problem = check_litellm_kwargs(kwargs)
        if problem is not None:
            raise _HTTPError(400, problem)
        if self.settings.return_token_ids and deployment.provider in DIRECT_PROVIDERS:
            kwargs["extra_body"] = {**(kwargs.get("extra_body") or {}), "return_token_ids": True}
        if self.settings.request_logprobs and endpoint == "chat.completions":
            kwargs.setdefault("logprobs", True)
        router = self.router.router
        try:
            if endpoint == "chat.completions":
                result: Any = await router.acompletion(**kwargs)
            else:
                result = await router.atext_completion(**kwargs)
        except Exception as exc:
            status = _gateway_status(exc)
            kind = "bad_gateway" if status == 502 else "upstream_error"
            raise _HTTPError(status, f"{type(exc).__name__}: {exc}", kind) from None
        if call is not None:
            call.http_status = 200
        if not stream:
            payload = result.model_dump()
            mirror_token_ids(payload)
            data = json.dumps(payload, default=str).encode()
            if call is not None:
                assembler = ResponseAssembler(endpoint)
                assembler.add_response(payload)
                call.assembler = assembler
                problem = await self._commit(call)
                if problem is not None:
                    raise problem
            await _send_raw(send, 200, data)
            return

        async def chunks() -> Any:
            async for chunk in result:
                payload = chunk.model_dump(exclude_none=True)
                mirror_token_ids(payload)
                yield payload

        await self._stream(receive, send, endpoint, chunks(), call, raw=False)


async def _mirrored_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of a raw SSE stream, each with its token ids in both places (:mod:`._wire`)."""
    parser = SSEParser()
    async for data in chunks:
        for payload in parser.feed(data):
            mirror_token_ids(payload)
            yield payload


def _framed(item: Any, parser: SSEParser, *, raw: bool) -> tuple[bytes, list[Any]]:
    """A streamed item as the bytes to relay and the payloads it carries (raw SSE bytes, or one chunk)."""
    if raw:
        return item, parser.feed(item)
    return b"data: " + json.dumps(item).encode() + b"\n\n", [item]


def _parse_request(body: bytes, endpoint: str) -> dict[str, Any]:
    try:
        request = json.loads(body)
    except ValueError as exc:
        raise _HTTPError(400, f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise _HTTPError(400, "request body is nested too deeply to be a completion request") from None
    request = as_dict(request)
    if request is None:
        raise _HTTPError(400, "request body must be a JSON object")
    # Every client mistake is answered here, before the Router: a failure there would count against
    # the (healthy) backend and could put it in cooldown for every other client.
    problem = check_request(request, endpoint)
    if problem is not None:
        raise _HTTPError(400, problem)
    return request


def _dumps(payload: Any) -> bytes:
    try:
        return json.dumps(payload).encode()
    except (RecursionError, ValueError) as exc:  # cannot happen for what json.loads accepted, but bounded
        raise _HTTPError(400, f"request cannot be forwarded as JSON: {type(exc).__name__}") from None


def _header_text(headers: dict[bytes, bytes], name: bytes) -> str:
    try:
        return headers[name].decode()
    except UnicodeDecodeError:
        raise _HTTPError(400, f"the {name.decode()} header must be UTF-8 text") from None


def _gateway_status(exc: Exception) -> int:
    """The proxy's status for a failed LiteLLM call: the backend's client errors (4xx) and 503 are passed on;
    a backend that could not be reached, timed out (504) or failed is a bad gateway (502), never a 500."""
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        return 502
    if status == 408 or "Timeout" in type(exc).__name__:
        return 504
    if 400 <= status < 500 or status == 503:
        return status
    return 502


def _record_whole(call: CallRecord, endpoint: str, data: bytes, status: int) -> dict[str, Any] | None:
    """Record a whole answer on ``call``; the JSON object it parsed (``None``: an error or not an object)."""
    if status >= 400:
        call.error_type = f"http_{status}"
        call.error_message = data[:4000].decode(errors="replace")
        return None
    try:
        payload = json.loads(data)
    except ValueError:
        call.error_type, call.error_message = "invalid_response", "backend answered with non-JSON"
        return None
    assembler = ResponseAssembler(endpoint)
    response = as_dict(payload)
    if response is not None:
        assembler.add_response(response)
    call.assembler = assembler
    return response


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _send_raw(send: Send, status: int, data: bytes) -> None:
    headers = [*_JSON, (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _send_json(send: Send, status: int, payload: Any) -> None:
    await _send_raw(send, status, json.dumps(payload).encode())
