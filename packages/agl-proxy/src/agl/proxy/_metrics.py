"""Prometheus metrics of the LLM proxy: ``GET /metrics``.

HTTP requests and latency per route and status (the store's :class:`~agl.store.metrics.MetricsMiddleware`
with the proxy's route templates), and per model: LLM calls by outcome, tokens in and out, call latency.
The LLM figures are taken from each recorded call (every call attributed to a rollout attempt), when the
proxy hands it to its span recorder. Multi-process mode as in :mod:`agl.store.metrics`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from agl.store.metrics import METRICS_PATH, MetricsMiddleware, multiprocess_enabled
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ._call_record import CallRecord
    from ._span_recorder import SpanRecorder

__all__ = ["LLMCallMetrics", "MeteredRecorder", "proxy_route", "wrap_app"]

logger = logging.getLogger(__name__)

_NS = "agl_proxy"
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_ROUTES = (
    "/v1/chat/completions",
    "/chat/completions",
    "/v1/completions",
    "/completions",
    "/v1/models",
    "/models",
)


def proxy_route(path: str) -> str:
    """``/rollout/{id}/attempt/{id}/v1/chat/completions`` → ``/rollout/{id}/attempt/{id}/v1/chat/completions``
    with the ids replaced; unknown paths are ``other`` (label values stay bounded)."""
    prefix = ""
    if path.startswith("/rollout/"):
        parts = path.split("/", 5)
        prefix = "/rollout/{id}/attempt/{id}"
        path = "/" + (parts[5] if len(parts) > 5 else "")
    if path in _ROUTES or path in ("/health", "/v1/health", METRICS_PATH):
        return prefix + path
    return "other"


class LLMCallMetrics(Collector):
    """Calls, tokens and latency per model (the model name the client asked for)."""

    def __init__(self) -> None:
        self.registry = None if multiprocess_enabled() else CollectorRegistry(auto_describe=True)
        self.calls = _shared(
            Counter,
            "llm_calls",
            "LLM calls recorded, by model and outcome",
            ["model", "outcome"],
            self.registry,
        )
        self.tokens = _shared(
            Counter,
            "llm_tokens",
            "Tokens of recorded LLM calls, by model and direction",
            ["model", "direction"],
            self.registry,
        )
        self.latency = _shared(
            Histogram,
            "llm_call_duration_seconds",
            "Latency of recorded LLM calls (to the end of the answer), by model",
            ["model"],
            self.registry,
            buckets=_LATENCY_BUCKETS,
        )
        # Labelled children, looked up once per label set (``labels()`` costs more than the update itself).
        self._children: dict[tuple[str, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric._name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe(self, call: CallRecord) -> None:
        model = call.request.get("model")
        model = model if isinstance(model, str) else "unknown"
        failed = call.error_type is not None or call.client_disconnected
        outcome = "disconnected" if call.client_disconnected else "error" if failed else "ok"
        self._child(self.calls, model, outcome).inc()
        usage = _usage(call)
        if usage[0]:
            self._child(self.tokens, model, "input").inc(usage[0])
        if usage[1]:
            self._child(self.tokens, model, "output").inc(usage[1])
        if call.latency_ms is not None:
            self._child(self.latency, model).observe(call.latency_ms / 1000.0)

    def collect(self) -> Any:
        return self.registry.collect() if self.registry is not None else iter(())


_SHARED: dict[str, Any] = {}


def _shared(cls: Any, name: str, doc: str, labels: list[str], registry: Any, **kw: Any) -> Any:
    if registry is not None:
        return cls(name, doc, labels, namespace=_NS, registry=registry, **kw)
    if name not in _SHARED:  # multi-process: one set per process, written to the shared directory
        _SHARED[name] = cls(name, doc, labels, namespace=_NS, registry=None, **kw)
    return _SHARED[name]


def _usage(call: CallRecord) -> tuple[int, int]:
    result = call.assembler
    if result is None:
        return 0, 0
    usage = result.usage
    if isinstance(usage, dict):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        return (prompt if isinstance(prompt, int) else 0, completion if isinstance(completion, int) else 0)
    prompt = len(result.prompt_token_ids) if result.prompt_token_ids is not None else 0
    completion = sum(len(c.token_ids or []) for c in result.ordered_choices())
    return prompt, completion


class MeteredRecorder:
    """The proxy's span recorder, counting each call it is given before passing it on."""

    def __init__(self, recorder: SpanRecorder, metrics: LLMCallMetrics) -> None:
        self._recorder = recorder
        self._metrics = metrics

    def _observe(self, call: CallRecord) -> None:
        try:
            self._metrics.observe(call)
        except Exception:  # a metric must never cost a span
            logger.exception("could not count an LLM call in the proxy's metrics")

    async def write(self, call: CallRecord) -> BaseException | None:
        """Count ``call``, then :meth:`SpanRecorder.write` it."""
        self._observe(call)
        return await self._recorder.write(call)

    def submit(self, call: CallRecord) -> None:
        self._observe(call)
        self._recorder.submit(call)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._recorder, name)


def wrap_app(app: Any, *, token: str | None, public: bool, llm: LLMCallMetrics) -> MetricsMiddleware:
    """The ASGI app to serve: ``app`` with request counting and ``GET /metrics``."""
    middleware = MetricsMiddleware(app, namespace=_NS, token=token, public=public, template=proxy_route)
    middleware.extra_collectors.append(llm)
    return middleware
