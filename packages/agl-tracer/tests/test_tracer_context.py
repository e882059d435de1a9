"""``agl.tracer._context``: the only owner of the tracer's context variables, through its functions."""

from __future__ import annotations

import asyncio

import pytest
from agl.testing.tracer import names, new_attempt, new_store, spans_of, worker_tracer
from agl.tracer import (
    OtelTracer,
    _context,
    clear_active_tracer,
    emit_message,
    get_active_tracer,
    set_active_tracer,
)


async def test_spans_started_inside_suppress_tracing_reach_no_session() -> None:
    store = new_store()
    tracer = worker_tracer(store)
    rid, aid = await new_attempt(store)
    async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
        emit_message("kept")
        with _context.suppress_tracing():
            assert _context.is_suppressed()
            emit_message("dropped")
        assert not _context.is_suppressed()
        emit_message("kept too")
    assert [s.attributes.get("agentlightning.message.body") for s in await spans_of(store, rid, aid)] == [
        "kept",
        "kept too",
    ]
    assert names(tracer.get_last_trace()) == ["agentlightning.message"] * 2
    tracer.teardown_worker(0)


async def test_set_suppressed_holds_for_the_task_only() -> None:
    async def suppressed_task() -> bool:
        _context.set_suppressed(True)
        return _context.is_suppressed()

    assert await asyncio.create_task(suppressed_task()) is True
    assert not _context.is_suppressed()  # the task's context was a copy


def test_enter_and_exit_session_set_and_restore_this_context() -> None:
    tracer = OtelTracer()

    class Session:
        def __init__(self) -> None:
            self.tracer = tracer

    session = Session()
    before = _context.live_session_count()
    tokens = _context.enter_session(tracer, session)
    assert _context.current_session() is session and _context.current_tracer() is tracer
    assert _context.session_for(tracer) is session and _context.live_session_count(tracer) == 1
    _context.set_suppressed(True)
    assert _context.session_for(tracer) is None
    _context.set_suppressed(False)
    _context.exit_session(session, *tokens)
    assert _context.current_session() is None and _context.current_tracer() is None
    assert _context.live_session_count() == before


def test_the_public_active_tracer_functions() -> None:
    tracer, other = OtelTracer(), OtelTracer()
    set_active_tracer(tracer)
    try:
        assert get_active_tracer() is tracer
        with pytest.raises(ValueError, match="already active"):
            set_active_tracer(other)
    finally:
        clear_active_tracer()
    assert get_active_tracer() is None
