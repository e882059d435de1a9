"""One small interface for an algorithm's own figures: Prometheus gauges, ``metrics.jsonl`` and experiment trackers.

An algorithm calls :meth:`AlgorithmMetrics.log` with a kind (``"train"``, ``"validation"``, ``"round"``...)
and a dict of figures. Every number becomes the gauge ``agl_algorithm_<name>{algorithm, kind}`` (the latest
value; a figure named like the counter, such as ``records``, becomes ``agl_algorithm_records_value``) and
the counter ``agl_algorithm_records_total{algorithm, kind}`` counts the calls (a mapping of numbers, such as a
histogram, gives one gauge per entry: ``staleness: {0: 12}`` → ``agl_algorithm_staleness_0``); with a
``jsonl_path`` each call also appends ``{"kind": kind, **figures}`` as one line.

Every call also goes to the :class:`~agl.algorithms.trackers.MetricsSink` s it was given: the experiment
trackers of :mod:`agl.algorithms.trackers` (TensorBoard, MLflow, W&B; the ``jsonl`` file is one of them).
:meth:`AlgorithmMetrics.for_run` builds them from names, as the apps' ``--logger jsonl,tensorboard,mlflow,wandb``
does. A tracker's step is the figures' ``step`` (or an APO ``round``), else the count of events of that kind.

The gauges live in ``prometheus_client``'s default registry, which the store server's ``/metrics`` includes
when it runs in the same process (the Trainer's managed store); :meth:`serve` starts a separate metrics
endpoint for an algorithm that runs elsewhere. With ``PROMETHEUS_MULTIPROC_DIR`` set the gauges are written
in multi-process mode (``mostrecent``).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from agl.types.env import PROMETHEUS_MULTIPROC_DIR
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from .trackers import MetricsSink, make_sink, parse_loggers
from .trackers.jsonl import JsonlSink

__all__ = ["AlgorithmMetrics"]

logger = logging.getLogger(__name__)

_NAME = re.compile(r"[^a-zA-Z0-9_]")
_RECORDS = "records"
# The names the records counter holds in a registry (prometheus_client adds the two suffixes).
_RESERVED = frozenset({_RECORDS, f"{_RECORDS}_total", f"{_RECORDS}_created"})


def _metric_name(key: str) -> str:
    """A valid metric name for the figure ``key``, never one of the records counter's names."""
    name = _NAME.sub("_", key).strip("_").lower() or "value"
    name = name if not name[0].isdigit() else "_" + name
    return f"{name}_value" if name in _RESERVED else name


def _step_of(figures: Mapping[str, Any]) -> int | None:
    """The event's own step: its ``step`` figure, else its ``round`` (APO), when a whole number."""
    for key in ("step", "round"):
        value = figures.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    return None


def _numbers(figures: Mapping[str, Any]) -> Iterator[tuple[str, float, str | None]]:
    """The figures that become gauges, as ``(name, value, mapping it came from)``: finite numbers, and those
    of a mapping one level down as ``<key>_<sub>`` (a histogram such as ``staleness: {0: 12, 1: 4}`` gives
    ``staleness_0`` and ``staleness_1``)."""
    for key, value in figures.items():
        if isinstance(value, Mapping):
            inner = cast("Mapping[Any, Any]", value)
            yield from ((f"{key}_{sub}", float(v), key) for sub, v in inner.items() if _is_number(v))
        elif _is_number(value):
            yield key, float(value), None


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


class AlgorithmMetrics:
    """Reports an algorithm's figures to Prometheus, a JSON-lines file and experiment trackers.

    Args:
        algorithm: The ``algorithm`` label (``"local_grpo"``, ``"apo"``...).
        jsonl_path: Append one JSON line per :meth:`log` call here (the file is created; ``None``: no file).
        registry: Where the gauges go (default: ``prometheus_client``'s global registry).
        namespace: Prefix of every metric name.
        sinks: More receivers of every call (see :mod:`agl.algorithms.trackers`); :meth:`close` closes them.

    Thread-safe. Gauges are shared by every ``AlgorithmMetrics`` on the same registry.
    """

    # Per registry (weakly: a registry's id is reused once it is collected, and its metrics must not be).
    _shared: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, Any]] = weakref.WeakKeyDictionary()
    _shared_lock = threading.Lock()

    def __init__(
        self,
        algorithm: str,
        jsonl_path: str | Path | None = None,
        *,
        registry: CollectorRegistry | None = None,
        namespace: str = "agl_algorithm",
        sinks: Iterable[MetricsSink] = (),
    ) -> None:
        self.algorithm = algorithm
        self.registry = registry if registry is not None else REGISTRY
        self.namespace = namespace
        self.jsonl_path = Path(jsonl_path) if jsonl_path is not None else None
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._entries: dict[tuple[str, str], set[str]] = {}  # (kind, mapping figure) -> its gauges' keys
        self.sinks: list[MetricsSink] = [JsonlSink(self.jsonl_path)] if self.jsonl_path is not None else []
        """Where every :meth:`log` call goes besides the gauges (emptied by :meth:`close`)."""
        self.sinks.extend(sinks)
        self._records = self._metric(
            Counter,
            _RECORDS,
            "Figures reported by the algorithm (one per log call), by kind",
        )

    def _metric(self, cls: Any, name: str, doc: str) -> Any:
        key = f"{self.namespace}_{name}"
        with self._shared_lock:
            shared = self._shared.setdefault(self.registry, {})
            metric = shared.get(key)
            if metric is None:
                extra: dict[str, Any] = {"multiprocess_mode": "mostrecent"} if cls is Gauge else {}
                metric = cls(
                    name,
                    doc,
                    ["algorithm", "kind"],
                    namespace=self.namespace,
                    registry=self.registry,
                    **extra,
                )
                shared[key] = metric
            return metric

    @classmethod
    def for_run(
        cls,
        algorithm: str,
        run_dir: str | Path,
        loggers: str | Iterable[str] = "jsonl",
        *,
        run_name: str | None = None,
        config: Mapping[str, Any] | None = None,
        registry: CollectorRegistry | None = None,
    ) -> AlgorithmMetrics:
        """The metrics of a run writing to ``run_dir`` through the trackers named in ``loggers``.

        Args:
            algorithm: The ``algorithm`` label.
            run_dir: The run's output directory: ``metrics.jsonl``, ``tensorboard/``, ``mlruns/``, ``wandb/``.
            loggers: ``"jsonl,tensorboard,mlflow,wandb"``, any combination (or a sequence of names).
            run_name: The MLflow / W&B run name (default: ``run_dir``'s name).
            config: The run's settings (MLflow parameters, W&B config).
            registry: As in the constructor.

        Raises:
            TrackerUnavailable: A chosen tracker's library is missing (the message names the extra).
        """
        names = parse_loggers(loggers)
        sinks: list[MetricsSink] = []
        try:
            for name in names:
                if name != "jsonl":  # the constructor's own file (``jsonl_path``)
                    sinks.append(
                        make_sink(name, run_dir, algorithm=algorithm, run_name=run_name, config=config)
                    )
        except BaseException:
            for sink in sinks:
                sink.close()
            raise
        jsonl_path = Path(run_dir) / "metrics.jsonl" if "jsonl" in names else None
        return cls(algorithm, jsonl_path, registry=registry, sinks=sinks)

    def log(self, kind: str, figures: Mapping[str, Any], *, step: int | None = None) -> None:
        """Record ``figures`` of one event (a training step, a validation, an APO round...).

        ``step`` is the trackers' x axis (default: the figures' ``step`` or ``round``, else the number of
        ``kind`` events so far). A tracker that fails is logged and skipped; the others still get the event.
        """
        with self._lock:
            count = self._counts[kind] = self._counts.get(kind, 0) + 1
            if step is None:
                found = _step_of(figures)
                step = found if found is not None else count
            for sink in self.sinks:
                try:
                    sink.log(kind, step, figures)
                except Exception:
                    logger.warning("%s could not record a %r event", type(sink).__name__, kind, exc_info=True)
        self._records.labels(self.algorithm, kind).inc()
        entries: dict[str, set[str]] = {}
        for key, value, parent in _numbers(figures):
            self._gauge(key, kind).set(value)
            if parent is not None:
                entries.setdefault(parent, set()).add(key)
        with self._lock:  # a histogram's entries absent this time are 0 now, not their last value
            for parent, keys in entries.items():
                gone = self._entries.get((kind, parent), set()) - keys
                self._entries[(kind, parent)] = keys
                for key in gone:
                    self._gauge(key, kind).set(0.0)

    def _gauge(self, key: str, kind: str) -> Any:
        gauge = self._metric(Gauge, _metric_name(key), f"Latest {key!r} reported by the algorithm")
        return gauge.labels(self.algorithm, kind)

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve this registry at ``http://addr:port/metrics`` (for an algorithm outside the store's process)."""
        from prometheus_client import start_http_server

        if PROMETHEUS_MULTIPROC_DIR.get():
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            start_http_server(port, addr=addr, registry=registry)
        else:
            start_http_server(port, addr=addr, registry=self.registry)

    def close(self) -> None:
        """Close the JSON-lines file and the trackers (the gauges stay); later calls reach only the gauges."""
        with self._lock:
            sinks, self.sinks = self.sinks, []
            for sink in sinks:
                try:
                    sink.close()
                except Exception:
                    logger.warning("%s did not close cleanly", type(sink).__name__, exc_info=True)
