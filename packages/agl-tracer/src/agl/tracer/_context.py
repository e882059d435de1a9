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
from collections.abc import Generator
from contextvars import ContextVar, Token
from typing import Any

__all__ = [
    "activate",
    "active_tracer",
    "current_session",
    "current_tracer",
    "deactivate",
    "enter_session",
    "exit_session",
    "is_suppressed",
    "last_trace",
    "live_session_count",
    "session_for",
    "set_last_trace",
    "set_suppressed",
    "suppress_tracing",
]

# Tracers and trace sessions are typed ``Any`` here so that this module needs neither ``base`` nor
# ``_pipeline`` (both import it); :mod:`.base` wraps the public functions with their types. Only the
# functions of this module touch these variables.
_active_tracer: ContextVar[Any] = ContextVar("agl_active_tracer", default=None)
_current_session: ContextVar[Any] = ContextVar("agl_trace_session", default=None)
_suppressed: ContextVar[bool] = ContextVar("agl_trace_suppressed", default=False)
_last_trace: ContextVar[tuple[Any, list[Any]] | None] = ContextVar("agl_last_trace", default=None)

_live_lock = threading.Lock()
_live_sessions: list[Any] = []


def _forget_parent_sessions() -> None:
    # A forked child does not run its parent's trace contexts (and the lock may have been held at fork).
    global _live_lock
    _live_lock = threading.Lock()
    _live_sessions.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_sessions)


def active_tracer() -> Any:
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


def current_tracer() -> Any:
    """The tracer this context set (no fallback to the process's only live session), or ``None``."""
    return _active_tracer.get()


def activate(tracer: Any) -> None:
    """Make ``tracer`` the active tracer of this context; ``ValueError`` if another one already is."""
    current = _active_tracer.get()
    if current is not None and current is not tracer:
        raise ValueError(
            f"another tracer ({type(current).__name__}) is already active in this context; "
            "clear it with clear_active_tracer() first (tracing contexts do not nest)"
        )
    _active_tracer.set(tracer)


def deactivate() -> None:
    """No tracer is active in this context any more."""
    _active_tracer.set(None)


def current_session() -> Any:
    """The trace session open in this context, or ``None``."""
    return _current_session.get()


def enter_session(tracer: Any, session: Any) -> tuple[Token[Any], Token[Any]]:
    """Open ``session`` of ``tracer`` in this context (and count it live); give the tokens to :func:`exit_session`."""
    tokens = (_active_tracer.set(tracer), _current_session.set(session))
    register_live(session)
    return tokens


def exit_session(session: Any, tracer_token: Token[Any], session_token: Token[Any]) -> None:
    """Undo :func:`enter_session`, also when called from another context (then the variables are cleared)."""
    unregister_live(session)
    for var, token in ((_current_session, session_token), (_active_tracer, tracer_token)):
        try:
            var.reset(token)
        except ValueError:  # exited in another context (e.g. a generator finalised elsewhere)
            var.set(None)


def set_last_trace(tracer: Any, spans: list[Any]) -> None:
    """Remember ``spans`` as the last finished trace of ``tracer`` in this context."""
    _last_trace.set((tracer, spans))


def last_trace(tracer: Any) -> list[Any] | None:
    """The spans of ``tracer``'s last finished trace in this context, or ``None``."""
    last = _last_trace.get()
    return list(last[1]) if last is not None and last[0] is tracer else None


def is_suppressed() -> bool:
    """Whether spans started in this context are kept out of every trace session."""
    return _suppressed.get()


def set_suppressed(value: bool = True) -> None:
    """Keep spans started from now on in this context (and tasks it starts) out of every trace session."""
    _suppressed.set(value)


@contextlib.contextmanager
def suppress_tracing() -> Generator[None, None, None]:
    """Within the block, spans started in this context go to no trace session."""
    token = _suppressed.set(True)
    try:
        yield
    finally:
        _suppressed.reset(token)


def session_for(tracer: Any) -> Any:
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


def register_live(session: Any) -> None:
    with _live_lock:
        _live_sessions.append(session)


def unregister_live(session: Any) -> None:
    with _live_lock, contextlib.suppress(ValueError):
        _live_sessions.remove(session)


def live_session_count(tracer: Any = None) -> int:
    """Open trace contexts in the process (of ``tracer`` only, when given)."""
    with _live_lock:
        return sum(1 for s in _live_sessions if tracer is None or s.tracer is tracer)
