"""Prometheus metrics of the store server: ``GET /metrics``.

Two kinds of figures:

* HTTP requests and their latency per route template and status, counted by an ASGI wrapper around
  the whole served stack (:class:`MetricsMiddleware`);
* the store's own state, read from the store when ``/metrics`` is scraped (:class:`StoreFigures`):
  rollouts by status, queue depth, attempts by status and retries, spans, resources, workers.

Multi-process: when ``PROMETHEUS_MULTIPROC_DIR`` is set (before ``prometheus_client`` is imported, as its
documentation requires), the HTTP counters are written to that directory by every process and ``/metrics``
answers with the sum over all of them (``prometheus_client.multiprocess``). The store figures are read
from the store itself, which every process shares, so they are exposed once, not summed.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agl.types import ATTEMPT_STATUSES, FINISHED_STATUSES, ROLLOUT_STATUSES
from agl.types.env import PROMETHEUS_MULTIPROC_DIR
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .._models import API_PREFIX
from ._middleware import ASGIApp, Message, Receive, Scope, Send, json_error

if TYPE_CHECKING:
    from agl.types import Rollout, RolloutStatus

    from ...base import LightningStore

__all__ = [
    "API_ROUTE_TEMPLATES",
    "LITERAL_SEGMENTS",
    "METRICS_PATH",
    "MULTIPROC_ENV",
    "HttpMetrics",
    "MetricsMiddleware",
    "StoreFigures",
    "exposition",
    "http_metrics",
    "multiprocess_enabled",
    "route_template",
]

METRICS_PATH = "/metrics"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_WORKER_STATUSES = ("idle", "busy", "unknown")
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def multiprocess_enabled() -> bool:
    """True when ``PROMETHEUS_MULTIPROC_DIR`` names the directory shared by the server's processes."""
    return bool(PROMETHEUS_MULTIPROC_DIR.get())


# -- route templates -----------------------------------------------------------------------------

_COLLECTIONS = {"rollouts", "attempts"}
_PATH_COLLECTIONS = {"resources", "workers"}  # their ids may contain slashes
LITERAL_SEGMENTS = frozenset(
    {"search", "latest", "batch", "next", "enqueue", "dequeue", "claim", "queues", "waits", "spans"}
)
"""Path segments that name a route, never an id."""

API_ROUTE_TEMPLATES = frozenset(
    API_PREFIX + path
    for path in (
        "/health",
        "/statistics",
        "/queues/rollouts/enqueue",
        "/queues/rollouts/dequeue",
        "/queues/rollouts/claim",
        "/waits/rollouts",
        "/rollouts",
        "/rollouts/search",
        "/rollouts/{id}",
        "/rollouts/{id}/attempts",
        "/rollouts/{id}/attempts/search",
        "/rollouts/{id}/attempts/latest",
        "/rollouts/{id}/attempts/{id}",
        "/rollouts/{id}/attempts/{id}/finish",
        "/resources",
        "/resources/search",
        "/resources/latest",
        "/resources/{id}",
        "/spans",
        "/spans/search",
        "/spans/batch",
        "/spans/in-order",
        "/spans/next",
        "/spans/next/batch",
        "/workers",
        "/workers/search",
        "/workers/{id}",
    )
)
"""The ``route`` label of every API route (a test checks that each route the app serves has one); any
other path under the API is ``other``, so that no request can add label values."""

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_template(path: str) -> str:
    """The route a request path belongs to, with ids replaced by ``{id}`` (bounded label values).

    ``/v1/agl/rollouts/ro-1/attempts/at-2`` → ``/v1/agl/rollouts/{id}/attempts/{id}``. Paths under the API
    that are none of its routes (:data:`API_ROUTE_TEMPLATES`), and paths outside it other than ``/metrics``,
    OTLP and the dashboard, are all ``other``: no request adds a label value.
    """
    if path.startswith(API_PREFIX + "/"):
        parts = path[len(API_PREFIX) + 1 :].split("/")
        out: list[str] = []
        i = 0
        while i < len(parts):
            part = parts[i]
            out.append(part)
            i += 1
            if i < len(parts) and part in _COLLECTIONS and parts[i] not in LITERAL_SEGMENTS:
                out.append("{id}")
                i += 1
            elif i < len(parts) and part in _PATH_COLLECTIONS and parts[i] not in LITERAL_SEGMENTS:
                out.append("{id}")
                break
        template = API_PREFIX + "/" + "/".join(out)
        return template if template in API_ROUTE_TEMPLATES else "other"
    if path in (METRICS_PATH, "/v1/traces", "/"):
        return path
    if path == "/dashboard" or path.startswith("/dashboard/"):
        return "/dashboard"
    return "other"


# -- HTTP request metrics ------------------------------------------------------------------------


@dataclass
class HttpMetrics:
    """Request counter and latency histogram, labelled by method, route template and status."""

    registry: CollectorRegistry | None
    requests: Counter
    latency: Histogram

    @classmethod
    def create(cls, namespace: str, registry: CollectorRegistry | None) -> HttpMetrics:
        requests = Counter(
            "http_requests",
            "HTTP requests answered, by method, route template and status code",
            ["method", "route", "status"],
            namespace=namespace,
            registry=registry,
        )
        latency = Histogram(
            "http_request_duration_seconds",
            "Time from a request's arrival to the end of its answer, by method and route template",
            ["method", "route"],
            namespace=namespace,
            registry=registry,
            buckets=_LATENCY_BUCKETS,
        )
        return cls(registry, requests, latency)

    def __post_init__(self) -> None:
        # Label lookups cost more than the increments: keep the children (label values are bounded).
        self._counters: dict[tuple[str, str, int], Any] = {}
        self._histograms: dict[tuple[str, str], Any] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        if method not in _METHODS:  # (uvicorn's h11 parser takes any token as a method)
            method = "other"
        key = (method, route, status)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.requests.labels(method, route, str(status))
        counter.inc()
        histogram = self._histograms.get(key[:2])
        if histogram is None:
            histogram = self._histograms[key[:2]] = self.latency.labels(method, route)
        histogram.observe(seconds)


_SHARED: dict[str, HttpMetrics] = {}


def http_metrics(namespace: str) -> HttpMetrics:
    """Fresh metrics in a private registry; in multi-process mode one set per process (they write files)."""
    if not multiprocess_enabled():
        return HttpMetrics.create(namespace, CollectorRegistry(auto_describe=True))
    if namespace not in _SHARED:
        _SHARED[namespace] = HttpMetrics.create(namespace, None)
    return _SHARED[namespace]


def exposition(http: HttpMetrics, extra: Iterable[Collector] = (), include_default: bool = False) -> bytes:
    """The text exposition of ``http`` (summed over processes in multi-process mode) and ``extra``.

    ``include_default`` adds ``prometheus_client``'s global registry (process figures, and the algorithm's
    :class:`agl.algorithms.metrics.AlgorithmMetrics` when it runs in this process); in multi-process mode
    everything written to the shared directory is included anyway.
    """
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess_enabled():
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        assert http.registry is not None
        registry.register(_Forward(http.registry))
        if include_default:
            from prometheus_client import REGISTRY

            registry.register(_Forward(REGISTRY))
    for collector in extra:
        registry.register(collector)
    return generate_latest(registry)


class _Forward(Collector):
    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()


# -- the store's figures -------------------------------------------------------------------------


@dataclass
class _Snapshot:
    rollouts: dict[str, int] = field(default_factory=dict[str, int])
    attempts: dict[str, int] = field(default_factory=dict[str, int])
    workers: dict[str, int] = field(default_factory=dict[str, int])
    totals: dict[str, int] = field(default_factory=dict[str, int])
    scrape_seconds: float = 0.0


class _AttemptTally:
    """Attempts by status, kept up to date by reading only what changed since the last scrape.

    A finished rollout's attempts cannot change: they are counted once, when the rollout is first seen
    finished. Each scrape reads the rollouts created since the last one (creation order only grows), every
    unfinished rollout (the work in flight) and the ones that were unfinished last time and are not now. A
    rollout dropped from the store (the in-memory store's cap) shifts the creation order: detected by the
    last rollout seen not being where it was, the tally then starts over.
    """

    def __init__(self) -> None:
        self.finished: dict[str, int] = {}
        self._counted: set[str] = set()
        self._active: set[str] = set()
        self._seen = 0
        self._last: str | None = None

    async def read(self, store: LightningStore) -> dict[str, int]:
        """Attempts by status now (every attempt of every rollout in the store)."""
        if self._seen and not await self._still_in_place(store):
            self.__init__()
        unfinished = self._active | await self._read_new(store)
        in_flight = await self._read_unfinished(store)
        await self._read_left(store, sorted(unfinished - self._active))
        counts = dict(self.finished)
        _add(counts, in_flight)
        return counts

    async def _read_new(self, store: LightningStore) -> set[str]:
        """Count the rollouts created since the last scrape that are finished; the ids of the others."""
        unfinished: set[str] = set()
        while True:
            page = await store.query_rollouts(limit=_PAGE, offset=self._seen)
            for rollout in page:
                if rollout.status in FINISHED_STATUSES:
                    await self._count_finished(store, rollout)
                else:
                    unfinished.add(rollout.rollout_id)
            self._seen += len(page)
            if page.items:
                self._last = page.items[-1].rollout_id
            if len(page) < _PAGE:
                return unfinished

    async def _read_unfinished(self, store: LightningStore) -> dict[str, int]:
        """The attempts of the work in flight (remembered for the next scrape)."""
        counts: dict[str, int] = {}
        self._active = set()
        offset = 0
        while True:
            page = await store.query_rollouts(status_in=_UNFINISHED, limit=_PAGE, offset=offset)
            for rollout in page:
                self._active.add(rollout.rollout_id)
                _add(counts, await _attempts_of(store, rollout))
            offset += len(page)
            if len(page) < _PAGE:
                return counts

    async def _read_left(self, store: LightningStore, left: list[str]) -> None:
        """Count the rollouts that were unfinished and are not now (finished, or gone from the store)."""
        for start in range(0, len(left), _PAGE):
            for rollout in await store.query_rollouts(rollout_id_in=left[start : start + _PAGE]):
                if rollout.status in FINISHED_STATUSES:
                    await self._count_finished(store, rollout)
                else:  # unfinished again (requeued) since the read above: the next scrape counts it
                    self._active.add(rollout.rollout_id)

    async def _still_in_place(self, store: LightningStore) -> bool:
        page = await store.query_rollouts(limit=1, offset=self._seen - 1)
        return bool(page.items) and page.items[0].rollout_id == self._last

    async def _count_finished(self, store: LightningStore, rollout: Rollout) -> None:
        if rollout.rollout_id not in self._counted:
            self._counted.add(rollout.rollout_id)
            _add(self.finished, await _attempts_of(store, rollout))


_PAGE = 1000
_UNFINISHED: list[RolloutStatus] = [s for s in ROLLOUT_STATUSES if s not in FINISHED_STATUSES]


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    for status, n in counts.items():
        into[status] = into.get(status, 0) + n


async def _attempts_of(store: LightningStore, rollout: Rollout) -> dict[str, int]:
    """The rollout's attempts by status: its latest attempt alone when it is the first."""
    attempt = getattr(rollout, "attempt", None)
    if attempt is None:
        return {}
    if attempt.sequence_id <= 1:
        return {attempt.status: 1}
    counts: dict[str, int] = {}
    for a in await store.query_attempts(rollout.rollout_id):
        counts[a.status] = counts.get(a.status, 0) + 1
    return counts


class StoreFigures(Collector):
    """Counts read from the store at scrape time (figures up to ``min_interval`` seconds old are reused).

    A scrape costs a few store calls, not a read of every rollout: rollouts by status are counted by the
    store (``query_rollouts(status_in=..., limit=0)``: its ``total``), attempts by status are tallied
    incrementally (:class:`_AttemptTally`: only new, unfinished and newly finished rollouts are read).
    """

    def __init__(
        self, store: LightningStore, namespace: str = "agl_store", min_interval: float = 0.0
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.min_interval = min_interval
        self._snapshot = _Snapshot()
        self._taken = float("-inf")
        self._lock = asyncio.Lock()
        self._tally = _AttemptTally()

    async def refresh(self) -> None:
        """Read the store, unless a read that began after this call (or ``min_interval`` before it) is done.

        Concurrent scrapes share one read; a scrape never sees figures older than its own arrival.
        """
        arrived = time.monotonic()
        async with self._lock:
            if self._taken >= arrived - self.min_interval:
                return
            began = time.monotonic()
            snap = await self._read()
            snap.scrape_seconds = time.monotonic() - began
            self._snapshot, self._taken = snap, began

    async def _read(self) -> _Snapshot:
        store = self.store
        snap = _Snapshot()
        stats: dict[str, Any] = dict(await store.statistics())
        snap.rollouts = {
            s: (await store.query_rollouts(status_in=[s], limit=0)).total for s in ROLLOUT_STATUSES
        }
        snap.attempts = dict.fromkeys(ATTEMPT_STATUSES, 0)
        snap.attempts.update(await self._tally.read(store))
        workers = await store.query_workers()
        snap.workers = dict.fromkeys(_WORKER_STATUSES, 0)
        for worker in workers:
            snap.workers[worker.status] = snap.workers.get(worker.status, 0) + 1
        snap.totals = {
            key: int(stats.get(key, 0) or 0)
            for key in ("total_rollouts", "total_attempts", "total_spans", "total_resources", "total_workers")
        }
        # Every rollout but the never-dequeued ones has had a first attempt; the rest are retries.
        started = snap.totals["total_rollouts"] - snap.rollouts.get("queuing", 0)
        snap.totals["retried"] = max(0, snap.totals["total_attempts"] - started)
        return snap

    def collect(self) -> Iterable[Metric]:
        ns, snap = self.namespace, self._snapshot
        rollouts = GaugeMetricFamily(f"{ns}_rollouts", "Rollouts in the store by status", labels=["status"])
        for status, n in sorted(snap.rollouts.items()):
            rollouts.add_metric([status], n)
        yield rollouts
        yield GaugeMetricFamily(
            f"{ns}_queue_depth",
            "Rollouts waiting to be dequeued (queuing or requeuing)",
            value=snap.rollouts.get("queuing", 0) + snap.rollouts.get("requeuing", 0),
        )
        attempts = GaugeMetricFamily(f"{ns}_attempts", "Attempts in the store by status", labels=["status"])
        for status, n in sorted(snap.attempts.items()):
            attempts.add_metric([status], n)
        yield attempts
        workers = GaugeMetricFamily(
            f"{ns}_workers", "Workers known to the store by status", labels=["status"]
        )
        for status, n in sorted(snap.workers.items()):
            workers.add_metric([status], n)
        yield workers
        totals = snap.totals
        for name, key, doc in (
            ("rollouts_created", "total_rollouts", "Rollouts ever created in the store"),
            ("attempts_started", "total_attempts", "Attempts ever started"),
            ("attempts_retried", "retried", "Attempts after a rollout's first (retries)"),
            ("spans_ingested", "total_spans", "Spans stored"),
        ):
            yield CounterMetricFamily(f"{ns}_{name}", doc, value=totals.get(key, 0))
        yield CounterMetricFamily(
            f"{ns}_attempts_timed_out",
            "Attempts that ended in timeout",
            value=snap.attempts.get("timeout", 0),
        )
        yield CounterMetricFamily(
            f"{ns}_attempts_unresponsive",
            "Attempts marked unresponsive (and not recovered)",
            value=snap.attempts.get("unresponsive", 0),
        )
        yield GaugeMetricFamily(
            f"{ns}_resources_versions",
            "Resources versions in the store",
            value=totals.get("total_resources", 0),
        )
        yield GaugeMetricFamily(
            f"{ns}_metrics_read_seconds",
            "Time the last read of the store's figures took",
            value=snap.scrape_seconds,
        )


# -- the ASGI wrapper ------------------------------------------------------------------------------


class MetricsMiddleware:
    """Counts every request by route template and status, and answers ``GET /metrics``.

    ``/metrics`` needs ``Authorization: Bearer <token>`` when ``token`` is set, unless ``public``.
    ``figures`` (read at scrape time) and ``extra_collectors`` are appended to the HTTP metrics;
    ``include_default`` adds ``prometheus_client``'s global registry. ``http``: the counters to feed
    (shared with a layer that counts requests it answers before ASGI); fresh ones by default.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        namespace: str,
        http: HttpMetrics | None = None,
        token: str | None = None,
        public: bool = False,
        figures: StoreFigures | None = None,
        template: Any = route_template,
        include_default: bool = False,
    ) -> None:
        self.app = app
        self.extra_collectors: list[Collector] = []
        self.include_default = include_default
        self.http = http or http_metrics(namespace)
        self.figures = figures
        self._expected = f"Bearer {token}".encode() if token and not public else None
        self._template = template

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def tracking_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            if scope["path"] == METRICS_PATH and scope["method"] in ("GET", "HEAD"):
                await self._serve_metrics(scope, tracking_send)
            else:
                await self.app(scope, receive, tracking_send)
        finally:
            self.http.observe(
                scope["method"], self._template(scope["path"]), status, time.perf_counter() - started
            )

    async def _serve_metrics(self, scope: Scope, send: Send) -> None:
        if self._expected is not None:
            given = b""
            for key, value in scope["headers"]:
                if key == b"authorization":
                    given = value
            if not hmac.compare_digest(given, self._expected):
                reason = "missing Authorization header" if not given else "wrong bearer token"
                start, body = json_error(
                    401,
                    f"{reason}: /metrics needs 'Authorization: Bearer <token>' (or start the server with "
                    "--metrics-public)",
                    "AuthenticationError",
                    extra_headers=[(b"www-authenticate", b"Bearer")],
                )
                await send(start)
                await send(body)
                return
        extra: list[Collector] = list(self.extra_collectors)
        if self.figures is not None:
            await self.figures.refresh()
            extra.append(self.figures)
        body = exposition(self.http, extra, include_default=self.include_default)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", CONTENT_TYPE_LATEST.encode()),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body if scope["method"] == "GET" else b""})
