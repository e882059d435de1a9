"""``LLMProxy``: the OpenAI-compatible endpoint agents call, recording every call into the store."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from agl.store.serving import (
    ConnectionLimits,
    ServerThread,
    bind_listener,
    local_host_names,
    quiet_server,
    server_protocol_class,
)
from agl.types import LLM, ProxyLLM
from agl.types.env import PROXY_TOKEN

from ._app import ProxyApp, ProxySettings
from ._bound import DEFAULT_MAX_SPAN_BYTES, SPAN_HEADROOM
from ._reference import (
    apply_litellm_settings,
    reference_launch,
    reference_options,
    reference_positional,
)
from ._router import ModelRouter, close_litellm_loop_resources, import_litellm, validate_model_list
from ._span_recorder import SpanRecorder

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["LLMProxy"]

logger = logging.getLogger(__name__)


class LLMProxy:
    """An OpenAI-compatible HTTP endpoint in front of LiteLLM's ``Router`` that records every call.

    Agents call ``http://host:port/rollout/{rollout_id}/attempt/{attempt_id}/v1/chat/completions``
    (what :meth:`as_resource` and ``ProxyLLM.get_base_url`` give them); each call becomes one span
    named ``agentlightning.llm_call`` in the store, attributed to that attempt, written before the end of
    the answer reaches the agent (so a finished attempt never lacks its last call). Plain ``/v1/...`` calls (or calls without the
    ``x-rollout-id``/``x-attempt-id`` headers) are proxied but not recorded: a span needs an attempt.

    Backends come from ``model_list`` in LiteLLM's format; entries sharing a ``model_name`` are
    load-balanced by the Router. OpenAI-compatible backends (``hosted_vllm/``, ``openai/``... with
    an ``api_base``) are forwarded to directly, byte for byte, after the Router picked the
    deployment; others go through ``Router.acompletion``.

    Args:
        model_list: LiteLLM model entries ``{"model_name": ..., "litellm_params": {"model": ..., "api_base": ...}}``.
        store: where spans go. A store that is not thread-safe is called on the loop that ran :meth:`start`.
        host: interface to bind (``None``: ``127.0.0.1``; the reference bound every interface).
        port: port to bind; ``None`` picks a free one at start.
        return_token_ids: ask backends for prompt and completion token ids (vLLM's ``return_token_ids``;
            ``None``: yes, unless ``callbacks`` leaves out ``"return_token_ids"``).
        request_logprobs: also ask for per-token logprobs when the client did not (``None``: no, unless
            ``callbacks`` names ``"logprobs"``).
        direct_forwarding: forward OpenAI-compatible backends directly (``False``: everything through LiteLLM).
            ``None``: directly, unless an option that acts inside LiteLLM is given (``num_retries`` above 0,
            ``litellm_config``'s settings, callback classes); ``True`` with one of those warns that it only
            reaches the backends LiteLLM serves.
        auth_token: bearer token required on every route but ``/health`` (default ``AGL_PROXY_TOKEN``).
        metrics_public: serve Prometheus metrics at ``/metrics`` without the token (default: the token is
            needed there too).
        router_kwargs: extra arguments for ``litellm.Router`` (routing strategy, retries...).
        launch_mode: ``"thread"`` serves on a private event loop in a daemon thread (the default: the proxy
            keeps answering while the caller's loop is busy); ``"asyncio"`` serves on the caller's loop. The
            reference's ``"mp"`` means ``"thread"`` here (with a warning).
        connection_limits: how long a client may leave a connection idle (default 60 s) or a request's head
            or body half-sent before the proxy closes it (:class:`agl.store.ConnectionLimits`).
        max_span_bytes: the largest span to record, as JSON: the store server's request cap (its
            ``max_body_bytes``; default ``agl.store.http.server.DEFAULT_MAX_BODY_BYTES``, 64 MiB). A larger call
            is recorded with its longest message texts cut, each ending in ``…[truncated N bytes]`` (token ids,
            logprobs and usage are kept whole). Pass the store server's value when it was started with another.

    The reference's (agentlightning 0.3) arguments are accepted too:

    - ``num_retries``: retries of a failed backend call, by LiteLLM's ``Router`` (calls then go through LiteLLM).
    - ``litellm_config``: LiteLLM proxy configuration; its ``litellm_settings`` are set on the ``litellm`` module
      when the proxy starts, its ``router_settings`` are ``router_kwargs`` defaults, its ``model_list`` is the
      model list (other sections are ignored, with a warning).
    - ``callbacks``: the aliases ``"return_token_ids"`` and ``"logprobs"`` switch ``return_token_ids`` and
      ``request_logprobs`` (a list without ``"return_token_ids"`` asks for no token ids, as in the reference);
      ``"opentelemetry"`` is what the proxy always does (every call becomes a span); LiteLLM ``CustomLogger``
      classes (instantiated) or objects are added to ``litellm.callbacks`` while the proxy runs.
    - ``middlewares``: ASGI middleware classes (a starlette ``BaseHTTPMiddleware``...) wrapped around the
      proxy's app, the last one outermost; the aliases ``"rollout_attempt"`` and ``"stream_conversion"`` are
      what the proxy always does, ``"message_inspection"`` is not offered (a warning).
    - ``num_workers``, ``launcher_args``: no meaning here (one server in this process); a warning says so
      (``launcher_args``' host, port and launch mode are used).
    - ``LLMProxy(port, model_list, store, host)``: the reference's positional order, recognised by a port (or
      ``None``) before a model list, with a ``DeprecationWarning``.

    A call whose span the store still does not take (it refuses it, say for an unknown rollout, or keeps failing
    through the retries) is answered with an error instead of the backend's answer: 422 (store refused) or 503
    (store failed) with type ``span_not_recorded``; a stream ends with that error event instead of ``[DONE]``.
    An agent never gets an answer that looks recorded but is not.
    """

    def __init__(
        self,
        model_list: Sequence[dict[str, Any]] | None = None,
        store: LightningStore | None = None,
        host: str | None = None,
        port: int | None = None,
        *,
        return_token_ids: bool | None = None,
        request_logprobs: bool | None = None,
        direct_forwarding: bool | None = None,
        auth_token: str | None = None,
        max_request_bytes: int = 32 * 1024 * 1024,
        request_timeout_s: float = 600.0,
        router_kwargs: dict[str, Any] | None = None,
        launch_mode: Literal["thread", "asyncio", "mp"] = "thread",
        metrics_public: bool = False,
        connection_limits: ConnectionLimits | None = None,
        max_span_bytes: int = DEFAULT_MAX_SPAN_BYTES,
        num_retries: int | None = None,
        litellm_config: Mapping[str, Any] | None = None,
        callbacks: Sequence[Any] | None = None,
        middlewares: Sequence[Any] | None = None,
        num_workers: int | None = None,
        launcher_args: Any = None,
    ) -> None:
        model_list, store, host, port = reference_positional(model_list, store, host, port)
        mode, host, port = reference_launch(launch_mode, num_workers, launcher_args, host, port)
        reference = reference_options(
            litellm_config=litellm_config,
            num_retries=num_retries,
            callbacks=callbacks,
            middlewares=middlewares,
        )
        if model_list is None:
            model_list = reference.model_list
        if model_list is not None:
            validate_model_list(model_list)
        if mode not in ("thread", "asyncio"):
            raise ValueError(
                f"launch_mode must be 'thread' or 'asyncio' (or the reference's 'mp'), got {mode!r}"
            )
        if direct_forwarding and reference.through_litellm:
            warnings.warn(
                "LLMProxy(direct_forwarding=True) with num_retries, litellm_config settings or callback classes: "
                "those act only on the backends LiteLLM serves, not on the ones forwarded to directly",
                UserWarning,
                stacklevel=2,
            )
        host = host if host is not None else "127.0.0.1"
        self.litellm_settings = reference.litellm_settings
        self.callbacks = reference.callbacks
        self.middlewares = reference.middlewares
        if max_span_bytes < 4 * SPAN_HEADROOM:
            raise ValueError(f"max_span_bytes must be at least {4 * SPAN_HEADROOM}, got {max_span_bytes}")
        self.max_span_bytes = max_span_bytes
        self.model_list: list[dict[str, Any]] = [dict(e) for e in model_list or []]
        self.store = store
        self.host = host
        self.port = port
        self.launch_mode: Literal["thread", "asyncio"] = "asyncio" if mode == "asyncio" else "thread"
        self.router_kwargs = {**reference.router_kwargs, **(router_kwargs or {})}
        self.settings = ProxySettings(
            return_token_ids=_first(return_token_ids, reference.return_token_ids, True),
            request_logprobs=_first(request_logprobs, reference.request_logprobs, False),
            direct_forwarding=_first(direct_forwarding, not reference.through_litellm),
            auth_token=PROXY_TOKEN.get(auth_token),
            host_names=local_host_names(host, PROXY_TOKEN.get(auth_token)),
            max_request_bytes=max_request_bytes,
            request_timeout_s=request_timeout_s,
        )
        self._server: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._serve_task: asyncio.Task[None] | None = None
        self._app: ProxyApp | None = None
        self._recorder: SpanRecorder | None = None
        self._bound_port: int | None = None
        self.metrics_public = metrics_public
        if connection_limits is not None and not isinstance(connection_limits, ConnectionLimits):  # pyright: ignore[reportUnnecessaryIsInstance]  # public API: checks untyped callers
            raise TypeError("connection_limits must be an agl.store.ConnectionLimits")
        # Agents reuse connections between turns: a short idle limit races their pools.
        self.connection_limits = connection_limits or ConnectionLimits(idle_seconds=60.0)
        self._llm_metrics: Any = None

    # -- configuration --------------------------------------------------------------------------

    def get_store(self) -> LightningStore | None:
        return self.store

    def set_store(self, store: LightningStore) -> None:
        """Use ``store`` from the next (re)start on."""
        self.store = store

    def update_model_list(self, model_list: Sequence[dict[str, Any]]) -> None:
        """Replace the backends; takes effect at the next :meth:`start` or :meth:`restart`."""
        validate_model_list(model_list)
        self.model_list = [dict(e) for e in model_list]

    def is_running(self) -> bool:
        return self._server is not None

    @property
    def endpoint(self) -> str:
        """Root URL of the running proxy (``http://host:port``)."""
        if self._bound_port is None:
            raise RuntimeError("the LLM proxy is not running: call `await proxy.start()` first")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self._bound_port}"

    @property
    def stats(self) -> dict[str, int]:
        """Counters: spans written and dropped, unattributed calls, streams in flight."""
        recorder, app = self._recorder, self._app
        return {
            "spans_written": recorder.spans_written if recorder else 0,
            "spans_dropped": recorder.spans_dropped if recorder else 0,
            "unattributed_calls": app.unattributed_calls if app else 0,
            "active_streams": app.active_streams if app else 0,
        }

    def as_resource(
        self,
        rollout_id: str | None = None,
        attempt_id: str | None = None,
        model: str | None = None,
        sampling_parameters: dict[str, Any] | None = None,
    ) -> LLM:
        """The proxy as a resource: ``ProxyLLM`` without ids, an ``LLM`` routed to one attempt with both."""
        if model is None:
            names = sorted({str(e["model_name"]) for e in self.model_list})
            if len(names) != 1:
                raise ValueError(
                    "cannot choose a model for the resource: "
                    + (
                        "the model list is empty"
                        if not names
                        else f"several models ({', '.join(names)}); pass model="
                    )
                )
            model = names[0]
        if (rollout_id is None) != (attempt_id is None):
            raise ValueError("as_resource needs both rollout_id and attempt_id, or neither")
        base = f"{self.endpoint}/v1"
        params = dict(sampling_parameters or {})
        token = self.settings.auth_token
        proxy_llm = ProxyLLM(endpoint=base, model=model, sampling_parameters=params, api_key=token)
        if rollout_id is None or attempt_id is None:
            return proxy_llm
        return LLM(
            endpoint=proxy_llm.get_base_url(rollout_id, attempt_id),
            model=model,
            sampling_parameters=params,
            api_key=token,
        )

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Build the Router and serve until :meth:`stop`. Needs a store and a non-empty model list."""
        if self.is_running():
            logger.warning("LLMProxy.start(): already running at %s", self.endpoint)
            return
        if self.store is None:
            raise RuntimeError("LLMProxy needs a store before start(): LLMProxy(store=...) or set_store()")
        if not self.model_list:
            raise RuntimeError("LLMProxy needs a non-empty model_list before start()")
        # Importing LiteLLM (when the model list needs it) takes seconds: not on the caller's loop.
        router = await asyncio.to_thread(
            ModelRouter,
            self.model_list,
            self.router_kwargs,
            direct_forwarding=self.settings.direct_forwarding,
        )
        if self.litellm_settings or self.callbacks:
            await asyncio.to_thread(self._install_litellm_options)
        try:
            sock = bind_listener(self.host, self.port, what="LLMProxy", backlog=4096, nodelay=True)
        except OSError as exc:
            raise RuntimeError(str(exc)) from exc
        self._bound_port = int(sock.getsockname()[1])
        home_loop = asyncio.get_running_loop()
        if self.launch_mode == "asyncio":
            await self._start_in_loop(router, sock, home_loop)
        else:
            await self._start_in_thread(router, sock, home_loop)
        logger.info("LLM proxy serving %s at %s", ", ".join(router.model_names), self.endpoint)

    def _install_litellm_options(self) -> None:
        """The reference's ``litellm_config`` settings and callbacks, on the ``litellm`` module (process-wide)."""
        litellm = import_litellm()
        apply_litellm_settings(litellm, self.litellm_settings)
        registered: list[Any] = litellm.callbacks
        registered.extend(c for c in self.callbacks if not any(c is r for r in registered))

    def _remove_litellm_callbacks(self) -> None:
        litellm: Any = sys.modules.get("litellm")
        registered: Any = getattr(litellm, "callbacks", None)
        if isinstance(registered, list):
            kept = [r for r in cast("list[Any]", registered) if not any(r is c for c in self.callbacks)]
            registered[:] = kept

    def _make_server(self, router: ModelRouter, home_loop: asyncio.AbstractEventLoop) -> Any:
        import uvicorn

        assert self.store is not None
        from agl.store import as_thread_safe

        from ._metrics import LLMCallMetrics, MeteredRecorder, wrap_app

        self._recorder = SpanRecorder(
            as_thread_safe(self.store, home_loop), max_span_bytes=self.max_span_bytes
        )
        self._llm_metrics = self._llm_metrics or LLMCallMetrics()
        recorder: Any = MeteredRecorder(self._recorder, self._llm_metrics)
        self._app = ProxyApp(router, recorder, self.settings)
        token, public = self.settings.auth_token, self.metrics_public
        app: Any = wrap_app(self._app, token=token, public=public, llm=self._llm_metrics)
        for middleware in self.middlewares:  # the reference's middlewares: the last one outermost
            app = middleware(app)
        config = uvicorn.Config(
            app,
            http=server_protocol_class("httptools", coalesce=False, limits=self.connection_limits),
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=5,
            timeout_keep_alive=max(1, round(self.connection_limits.idle_seconds)),
            limit_concurrency=None,
            backlog=4096,
        )
        return quiet_server(config)

    async def _make_server_on_loop(self, router: ModelRouter, home_loop: asyncio.AbstractEventLoop) -> Any:
        return self._make_server(router, home_loop)  # on the serving loop: recorder futures bind to it

    async def _serve(self, server: Any, sock: socket.socket) -> None:
        assert self._app is not None and self._recorder is not None
        await self._app.startup()
        try:
            await server.serve(sockets=[sock])
        finally:
            await self._recorder.flush()
            await self._app.shutdown()
            await close_litellm_loop_resources()  # before this loop closes (thread mode) or the caller's does
            store = self.store
            if self.launch_mode == "thread" and store is not None and self._recorder.store is store:
                # A thread-safe store (an HTTP client) opened connections on this private loop, which closes next.
                await store.release_loop_resources()

    async def _start_in_loop(self, router: ModelRouter, sock: socket.socket, home_loop: Any) -> None:
        server = self._make_server(router, home_loop)
        task = asyncio.ensure_future(self._serve(server, sock))
        await _wait_started(server, task)
        self._server, self._serve_task, self._loop = server, task, home_loop

    async def _start_in_thread(self, router: ModelRouter, sock: socket.socket, home_loop: Any) -> None:
        made: list[Any] = []

        async def serve() -> None:
            server = await self._make_server_on_loop(router, home_loop)
            made.append(server)
            await self._serve(server, sock)

        background = ServerThread(serve, name=f"agl-llm-proxy-{self._bound_port}")
        try:
            await asyncio.to_thread(
                background.start, lambda: bool(made) and made[0].started, timeout=30, what="the LLM proxy"
            )
        except TimeoutError:
            raise RuntimeError("the LLM proxy did not start within 30 s") from None
        self._server, self._loop, self._thread = made[0], background.loop, background.thread
        self._serve_task = None

    async def flush(self) -> None:
        """Wait until every recorded call has been written to the store."""
        if self._recorder is None or self._loop is None:
            return
        if self._loop is asyncio.get_running_loop():
            await self._recorder.flush()
        else:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._recorder.flush(), self._loop))

    async def stop(self) -> None:
        """Stop serving; spans still queued are written first."""
        if not self.is_running():
            logger.warning("LLMProxy.stop(): not running")
            return
        server, thread, task = self._server, self._thread, self._serve_task
        server.should_exit = True
        if thread is not None:
            await asyncio.to_thread(thread.join, 30)
            if thread.is_alive():
                logger.error("the LLM proxy thread did not stop within 30 s")
        elif task is not None:
            await task
        self._server = self._thread = self._serve_task = self._loop = None
        self._bound_port = None
        if self.callbacks:
            self._remove_litellm_callbacks()

    async def restart(self) -> None:
        """Stop (if running) and start again, picking up a new model list or store."""
        keep_port = self.port
        if self.is_running():
            if keep_port is None:
                self.port = self._bound_port
            await self.stop()
        try:
            await self.start()
        finally:
            self.port = keep_port


async def _wait_started(server: Any, task: asyncio.Task[None]) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the LLM proxy stopped while starting")
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError("the LLM proxy did not start within 30 s")
        await asyncio.sleep(0.005)


def _first(*values: bool | None) -> bool:
    """The first of ``values`` that is not ``None`` (the last is never ``None``)."""
    return next(v for v in values if v is not None)
