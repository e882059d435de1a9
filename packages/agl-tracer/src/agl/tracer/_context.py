"""Which tracer is active and which trace session a span belongs to, per thread and per coroutine.

Everything lives in ``contextvars``: runners running as threads or as coroutines of one process each see their
own active tracer and their own rollout/attempt attribution. Code that escapes its context (a raw
``threading.Thread`` started by an agent, ``loop.run_in_executor``) falls back to the only live session when
there is exactly one, which is what a single runner per process needs; with several live sessions the
fallback refuses to guess.
"""

from __future__ import annotations

import contextlib
import os
import threading
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._pipeline import TraceSession
    from .base import Tracer

__all__ = ["clear_active_tracer", "get_active_tracer", "set_active_tracer"]

_active_tracer: ContextVar[Tracer | None] = ContextVar("agl_active_tracer", default=None)
_current_session: ContextVar[TraceSession | None] = ContextVar("agl_trace_session", default=None)
_suppressed: ContextVar[bool] = ContextVar("agl_trace_suppressed", default=False)
_last_trace: ContextVar[tuple[Any, list[Any]] | None] = ContextVar("agl_last_trace", default=None)

_live_lock = threading.Lock()
_live_sessions: list[TraceSession] = []


def _forget_parent_sessions() -> None:
    # A forked child does not run its parent's trace contexts (and the lock may have been held at fork).
    global _live_lock
    _live_lock = threading.Lock()
    _live_sessions.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_sessions)


def get_active_tracer() -> Tracer | None:
    """The tracer active in this context (thread or task), or ``None``.

    Outside any context that set one (e.g. in a thread the agent started itself), the tracer of the only live
    trace session of the process is returned when there is exactly one; otherwise ``None``.
    """
    tracer = _active_tracer.get()
    if tracer is not None:
        return tracer
    with _live_lock:
        if len(_live_sessions) == 1:
            return _live_sessions[0].tracer
    return None


def set_active_tracer(tracer: Tracer) -> None:
    """Make ``tracer`` the active tracer of this context.

    Raises ``ValueError`` when another tracer is already active here (tracing contexts do not nest).
    Other threads and tasks are not affected.
    """
    current = _active_tracer.get()
    if current is not None and current is not tracer:
        raise ValueError(
            f"another tracer ({type(current).__name__}) is already active in this context; "
            "clear it with clear_active_tracer() first (tracing contexts do not nest)"
        )
    _active_tracer.set(tracer)


def clear_active_tracer() -> None:
    """No tracer is active in this context any more."""
    _active_tracer.set(None)


def current_session() -> TraceSession | None:
    return _current_session.get()


def session_for(tracer: Any) -> TraceSession | None:
    """The trace session that a span started now by ``tracer`` belongs to."""
    if _suppressed.get():
        return None
    session = _current_session.get()
    if session is not None:  # this context belongs to a trace context, of this tracer or another one
        return session if session.tracer is tracer else None
    with _live_lock:  # a context outside any trace context: only an unambiguous guess is made
        if len(_live_sessions) == 1 and _live_sessions[0].tracer is tracer:
            return _live_sessions[0]
    return None


def register_live(session: TraceSession) -> None:
    with _live_lock:
        _live_sessions.append(session)


def unregister_live(session: TraceSession) -> None:
    with _live_lock, contextlib.suppress(ValueError):
        _live_sessions.remove(session)


def live_session_count(tracer: Any = None) -> int:
    """Open trace contexts in the process (of ``tracer`` only, when given)."""
    with _live_lock:
        return sum(1 for s in _live_sessions if tracer is None or s.tracer is tracer)
