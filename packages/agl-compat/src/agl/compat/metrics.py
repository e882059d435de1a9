"""The reference's ``utils.metrics`` backends: register counters and histograms, then update them from async code.

- :class:`PrometheusMetricsBackend` feeds ``prometheus_client`` (its default registry unless one is given: the
  one the agl store server's ``/metrics`` and ``prometheus_client.start_http_server`` expose);
- :class:`ConsoleMetricsBackend` keeps a sliding window of events and logs rates and percentiles
  (P50/P95/P99) to the ``agl.compat.metrics`` logger at most every ``log_interval_seconds``;
- :class:`MultiMetricsBackend` forwards to several.

Every metric is registered first (``ValueError`` when a name is registered again with another type or labels,
or updated unregistered or with other label names).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

__all__ = ["ConsoleMetricsBackend", "MetricsBackend", "MultiMetricsBackend", "PrometheusMetricsBackend"]

logger = logging.getLogger(__name__)

LabelKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _Definition:
    kind: Literal["counter", "histogram"]
    name: str
    label_names: tuple[str, ...]
    buckets: tuple[float, ...] | None = None
    group_level: int | None = None


class MetricsBackend:
    """The interface: ``register_counter`` / ``register_histogram``, then ``await inc_counter`` /
    ``await observe_histogram``. Subclasses implement :meth:`_record` (and may extend :meth:`_registered`)."""

    def __init__(self) -> None:
        self._definitions: dict[str, _Definition] = {}
        self._registration = threading.Lock()

    def has_prometheus(self) -> bool:
        """Whether updates reach Prometheus."""
        return False

    def register_counter(
        self, name: str, label_names: Sequence[str] | None = None, group_level: int | None = None
    ) -> None:
        """Register the counter ``name`` with ``label_names`` (their order is the console's grouping order)."""
        self._register(_Definition("counter", name, tuple(label_names or ()), None, group_level))

    def register_histogram(
        self,
        name: str,
        label_names: Sequence[str] | None = None,
        buckets: Sequence[float] | None = None,
        group_level: int | None = None,
    ) -> None:
        """Register the histogram ``name`` (``buckets``: upper bounds; ``None``: the backend's default)."""
        definition = _Definition(
            "histogram", name, tuple(label_names or ()), tuple(buckets) if buckets else None, group_level
        )
        self._register(definition)

    async def inc_counter(
        self, name: str, amount: float = 1.0, labels: Mapping[str, str] | None = None
    ) -> None:
        """Add ``amount`` to the counter ``name`` at ``labels``."""
        if amount < 0:
            raise ValueError(f"counter {name!r} cannot decrease (amount {amount})")
        self._record(self._checked(name, "counter", labels), float(amount), _label_key(labels))

    async def observe_histogram(
        self, name: str, value: float, labels: Mapping[str, str] | None = None
    ) -> None:
        """Record ``value`` in the histogram ``name`` at ``labels``."""
        self._record(self._checked(name, "histogram", labels), float(value), _label_key(labels))

    def _register(self, definition: _Definition) -> None:
        with self._registration:
            existing = self._definitions.get(definition.name)
            if existing is not None:
                if (existing.kind, existing.label_names) != (definition.kind, definition.label_names):
                    raise ValueError(
                        f"metric {definition.name!r} is already registered as a {existing.kind} with labels "
                        f"{list(existing.label_names)}"
                    )
                return
            self._registered(definition)
            self._definitions[definition.name] = definition

    def _registered(self, definition: _Definition) -> None:
        """A new metric (called once per name, under the registration lock; if it raises, the name stays free)."""

    def _record(self, definition: _Definition, value: float, labels: LabelKey) -> None:
        raise NotImplementedError

    def _checked(self, name: str, kind: str, labels: Mapping[str, str] | None) -> _Definition:
        definition = self._definitions.get(name)
        if definition is None or definition.kind != kind:
            raise ValueError(f"{kind} {name!r} is not registered")
        given = set(labels or {})
        if given != set(definition.label_names):
            raise ValueError(f"{name!r} takes labels {list(definition.label_names)}, got {sorted(given)}")
        return definition


def _label_key(labels: Mapping[str, str] | None) -> LabelKey:
    return tuple((k, str(v)) for k, v in (labels or {}).items())


@dataclass
class _Series:
    events: deque[tuple[float, float]] = field(default_factory=lambda: deque[tuple[float, float]]())
    total: float = 0.0


class ConsoleMetricsBackend(MetricsBackend):
    """Logs every metric's rate (per second) and, for histograms, P50/P95/P99 over a sliding window.

    Args:
        window_seconds: The window (``None``: every event kept).
        log_interval_seconds: At most one burst of log lines per interval, triggered by the next update.
        group_level: Keep the first ``group_level`` labels (in registration order) when logging and merge
            the series that then look alike; ``None`` or < 1: the metric's own ``group_level``, else one line
            per metric.
    """

    def __init__(
        self,
        window_seconds: float | None = 60.0,
        log_interval_seconds: float = 10.0,
        group_level: int | None = None,
    ) -> None:
        super().__init__()
        self.window_seconds = window_seconds
        self.log_interval_seconds = log_interval_seconds
        self.group_level = group_level
        self._series: dict[tuple[str, LabelKey], _Series] = {}
        self._lock = threading.Lock()
        self._last_log: float | None = None

    def _record(self, definition: _Definition, value: float, labels: LabelKey) -> None:
        now = time.time()
        ordered = tuple(sorted(labels, key=lambda kv: definition.label_names.index(kv[0])))
        with self._lock:
            series = self._series.setdefault((definition.name, ordered), _Series())
            series.events.append((now, value))
            series.total += value
            self._trim(series, now)
            due = self._last_log is None or now - self._last_log >= self.log_interval_seconds
            if due:
                self._last_log = now
        if due:
            for line in self.summary(now):
                logger.info(line)

    def _trim(self, series: _Series, now: float) -> None:
        if self.window_seconds is None:
            return
        while series.events and series.events[0][0] < now - self.window_seconds:
            series.events.popleft()

    def _group(self, definition: _Definition, labels: LabelKey) -> LabelKey:
        level = (
            self.group_level
            if self.group_level is not None and self.group_level >= 1
            else definition.group_level
        )
        return labels[:level] if level is not None and level >= 1 else ()

    def summary(self, now: float | None = None) -> list[str]:
        """One line per metric and label group: what the next log burst prints."""
        now = time.time() if now is None else now
        groups: dict[tuple[str, LabelKey], list[tuple[float, float]]] = {}
        with self._lock:
            for (name, labels), series in self._series.items():
                self._trim(series, now)
                key = (name, self._group(self._definitions[name], labels))
                groups.setdefault(key, []).extend(series.events)
        return [self._line(name, labels, events, now) for (name, labels), events in sorted(groups.items())]

    def _line(self, name: str, labels: LabelKey, events: list[tuple[float, float]], now: float) -> str:
        label_text = "{" + ",".join(f"{k}={v}" for k, v in labels) + "}" if labels else ""
        span = self.window_seconds or (now - min((t for t, _ in events), default=now)) or 1.0
        if self._definitions[name].kind == "counter":
            return f"{name}{label_text} rate={sum(v for _, v in events) / span:.2f}/s"
        values = sorted(v for _, v in events)
        parts = [f"rate={len(values) / span:.2f}/s"]
        parts += [f"p{p}={_percentile(values, p / 100):.4g}" for p in (50, 95, 99)] if values else []
        return f"{name}{label_text} " + " ".join(parts)


def _percentile(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks of sorted ``values``."""
    position = (len(values) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return values[low] + (values[high] - values[low]) * (position - low)


_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


class PrometheusMetricsBackend(MetricsBackend):
    """Forwards every update to a ``prometheus_client`` counter or histogram in ``registry`` (default: the global
    one). Names are made valid Prometheus names (other characters become ``_``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__()
        self.registry = registry if registry is not None else REGISTRY
        self._metrics: dict[str, Any] = {}

    def has_prometheus(self) -> bool:
        """Always true."""
        return True

    def _registered(self, definition: _Definition) -> None:
        name = _INVALID.sub("_", definition.name)
        name = "_" + name if name[:1].isdigit() else name
        doc = f"{definition.name} ({definition.kind})"
        if definition.kind == "counter":
            metric: Any = Counter(name, doc, definition.label_names, registry=self.registry)
        elif definition.buckets is not None:
            metric = Histogram(
                name, doc, definition.label_names, registry=self.registry, buckets=definition.buckets
            )
        else:
            metric = Histogram(name, doc, definition.label_names, registry=self.registry)
        self._metrics[definition.name] = metric

    def _record(self, definition: _Definition, value: float, labels: LabelKey) -> None:
        metric = self._metrics[definition.name]
        target = metric.labels(**dict(labels)) if definition.label_names else metric
        if definition.kind == "counter":
            target.inc(value)
        else:
            target.observe(value)


class MultiMetricsBackend(MetricsBackend):
    """Forwards registrations and updates to each of ``backends`` (at least one)."""

    def __init__(self, backends: Sequence[MetricsBackend]) -> None:
        super().__init__()
        if not backends:
            raise ValueError("MultiMetricsBackend needs at least one backend")
        self.backends = list(backends)

    def has_prometheus(self) -> bool:
        """Whether one of the backends reaches Prometheus."""
        return any(b.has_prometheus() for b in self.backends)

    def _registered(self, definition: _Definition) -> None:
        """Register the new metric in every backend, through their public methods (a backend of the reference's
        interface may override them)."""
        for backend in self.backends:
            if definition.kind == "counter":
                backend.register_counter(definition.name, definition.label_names, definition.group_level)
            else:
                backend.register_histogram(
                    definition.name, definition.label_names, definition.buckets, definition.group_level
                )

    async def inc_counter(
        self, name: str, amount: float = 1.0, labels: Mapping[str, str] | None = None
    ) -> None:
        """Add ``amount`` in every backend."""
        for backend in self.backends:
            await backend.inc_counter(name, amount, labels)

    async def observe_histogram(
        self, name: str, value: float, labels: Mapping[str, str] | None = None
    ) -> None:
        """Record ``value`` in every backend."""
        for backend in self.backends:
            await backend.observe_histogram(name, value, labels)
