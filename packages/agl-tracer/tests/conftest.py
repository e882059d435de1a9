from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from agl.store import LightningStore
from agl.tracer import OtelTracer, Tracer


@pytest.fixture
def start_worker() -> Iterator[Callable[[LightningStore | None, Tracer | None], Tracer]]:
    """``start_worker(store)``: an ``OtelTracer`` initialised as worker 0 writing to ``store``;
    ``start_worker(store, tracer)``: ``tracer`` initialised so. Each is torn down (worker 0) when the test ends."""
    started: list[Tracer] = []

    def start(store: LightningStore | None, tracer: Tracer | None = None) -> Tracer:
        tracer = OtelTracer() if tracer is None else tracer
        tracer.init_worker(0, store)
        started.append(tracer)
        return tracer

    yield start
    for tracer in reversed(started):
        tracer.teardown_worker(0)
