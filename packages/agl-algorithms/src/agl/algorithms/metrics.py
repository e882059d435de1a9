"""One small interface for an algorithm's own figures: Prometheus gauges and, optionally, ``metrics.jsonl``.

An algorithm calls :meth:`AlgorithmMetrics.log` with a kind (``"train"``, ``"validation"``, ``"round"``...)
and a dict of figures. Every number becomes the gauge ``agl_algorithm_<name>{algorithm, kind}`` (the latest
value; a figure named like the counter, such as ``records``, becomes ``agl_algorithm_records_value``) and
the counter ``agl_algorithm_records_total{algorithm, kind}`` counts the calls; with a
``jsonl_path`` each call also appends ``{"kind": kind, **figures}`` as one line.

The gauges live in ``prometheus_client``'s default registry, which the store server's ``/metrics`` includes
when it runs in the same process (the Trainer's managed store); :meth:`serve` starts a separate metrics
endpoint for an algorithm that runs elsewhere. With ``PROMETHEUS_MULTIPROC_DIR`` set the gauges are written
in multi-process mode (``mostrecent``).
"""

from __future__ import annotations

import json
import math
import re
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from agl.types.env import PROMETHEUS_MULTIPROC_DIR
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

__all__ = ["AlgorithmMetrics"]

_NAME = re.compile(r"[^a-zA-Z0-9_]")
_RECORDS = "records"
# The names the records counter holds in a registry (prometheus_client adds the two suffixes).
_RESERVED = frozenset({_RECORDS, f"{_RECORDS}_total", f"{_RECORDS}_created"})


def _metric_name(key: str) -> str:
    """A valid metric name for the figure ``key``, never one of the records counter's names."""
    name = _NAME.sub("_", key).strip("_").lower() or "value"
    name = name if not name[0].isdigit() else "_" + name
    return f"{name}_value" if name in _RESERVED else name


class AlgorithmMetrics:
    """Reports an algorithm's figures to Prometheus and, when ``jsonl_path`` is given, to a JSON-lines file.

    Args:
        algorithm: The ``algorithm`` label (``"local_grpo"``, ``"apo"``...).
        jsonl_path: Append one JSON line per :meth:`log` call here (the file is created; ``None``: no file).
        registry: Where the gauges go (default: ``prometheus_client``'s global registry).
        namespace: Prefix of every metric name.

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
    ) -> None:
        self.algorithm = algorithm
        self.registry = registry if registry is not None else REGISTRY
        self.namespace = namespace
        self.jsonl_path = Path(jsonl_path) if jsonl_path is not None else None
        self._file: IO[str] | None = None
        self._lock = threading.Lock()
        if self.jsonl_path is not None:
            self.jsonl_path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.jsonl_path.open("a", encoding="utf-8")
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

    def log(self, kind: str, figures: Mapping[str, Any]) -> None:
        """Record ``figures`` of one event (a training step, a validation, an APO round...)."""
        with self._lock:
            if self._file is not None:
                self._file.write(json.dumps({"kind": kind, **figures}, default=str) + "\n")
                self._file.flush()
        self._records.labels(self.algorithm, kind).inc()
        for key, value in figures.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            gauge = self._metric(Gauge, _metric_name(key), f"Latest {key!r} reported by the algorithm")
            gauge.labels(self.algorithm, kind).set(float(value))

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
        """Close the JSON-lines file (the gauges stay)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
