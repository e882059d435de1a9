"""The write log of a request answered under an idempotency key: each of its writes keeps its result with
the key, in the write's own transaction (issue 27, defect 3).

A write and the recording of its answer for replays (:mod:`._replay`) are two transactions, so a server
killed between them would have applied the write and recorded nothing, and the client's retry (same key)
would apply it again: an enqueue twice, a dequeue claiming a second rollout while the first stays
``preparing`` for ever. Hence, while a request with a :class:`~agl.store.http.server._replay.WriteLog`
runs (:data:`~agl.store.http.server._replay.current_writes`), each write of a store operation (given the
store's ``Ctx``: not the watchdog's, nor the replay cache's own) records its result in the key's row of
``agl_replays`` in its own transaction (:class:`LoggedWrite`): both commit, or neither. The claim of a retry
whose answer was lost finds those results and hands them to the retry, whose same writes return them,
in order, without writing again: the enqueue is applied once, the dequeue answers the same claim.

A write whose result is ``None`` or empty (an empty dequeue, the idle mark, a batch of spans all stored
before) logs nothing: it claimed nothing a retry must see, and runs again. A result is kept as JSON by
the write's return annotation; the spans of ``add_spans_in_order`` and ``finish_attempt``, which are the
request's own numbered, as an index and a sequence id each (the retry's body has them).
"""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Callable
from typing import Any, cast

import pydantic_core
import sqlalchemy as sa
from agl.types import Span
from pydantic import TypeAdapter

from ..http.server._replay import WriteLog, current_writes
from ._codec import json_loads
from ._steps import Ctx, execute, prepared, upsert
from .schema import replays as T

__all__ = ["ROW", "Entries", "LoggedWrite", "log_entries", "logged", "replaying"]

logger = logging.getLogger("agl.store.sql")


ROW = ("state", "run_id", "claimed", "status", "headers", "body", "request_hash", "writes")
"""The columns of a key's row that a claim reads and an upsert sets."""

Entries = list[tuple[str, Any]]
"""A write log's entries: ``(write, result as JSON text)``."""


class _Codec:
    """A write's result as JSON text and back (by its return annotation); ``args`` are the write's."""

    def __init__(self, result_type: Any) -> None:
        self._adapter: TypeAdapter[Any] = TypeAdapter(result_type)

    def dump(self, result: Any, args: tuple[Any, ...]) -> str:
        return self._adapter.dump_json(result).decode()

    def load(self, text: str, args: tuple[Any, ...]) -> Any:
        return self._adapter.validate_json(text)


class _SpansCodec(_Codec):
    """A result ``(spans, rest)`` whose spans are the write's own (its ``list[Span]`` argument) with their
    sequence ids (``add_spans_in_order``, ``finish_attempt``): kept as ``[index, sequence id]`` pairs, not
    as the spans again (the retry has them: its body is the first try's)."""

    def __init__(self, result_type: Any, rest_type: Any) -> None:
        super().__init__(result_type)
        self._rest: TypeAdapter[Any] = TypeAdapter(rest_type)

    def dump(self, result: Any, args: tuple[Any, ...]) -> str:
        spans, rest = result
        refs = _span_refs(spans, _spans_argument(args))
        if refs is None:  # (not the write's own spans: kept whole)
            return super().dump(result, args)
        return pydantic_core.to_json(
            {"spans": refs, "rest": self._rest.dump_python(rest, mode="json")}
        ).decode()

    def load(self, text: str, args: tuple[Any, ...]) -> Any:
        found = json_loads(text)
        if isinstance(found, list):
            return super().load(text, args)
        given = _spans_argument(args)
        refs: list[tuple[int, int]] = found["spans"]
        spans = [given[index].with_sequence_id(seq) for index, seq in refs]
        return spans, self._rest.validate_python(found["rest"])


def _span_refs(spans: list[Span], given: list[Span]) -> list[tuple[int, int]] | None:
    """``[index in given, sequence id]`` of each of ``spans``, found in ``given`` in order (``None``: one
    is not there)."""
    refs: list[tuple[int, int]] = []
    index = 0
    for span in spans:
        identity = (span.rollout_id, span.attempt_id, span.span_id)
        while (
            index < len(given)
            and (given[index].rollout_id, given[index].attempt_id, given[index].span_id) != identity
        ):
            index += 1
        if index == len(given):
            return None
        refs.append((index, span.sequence_id))
        index += 1
    return refs


def _spans_argument(args: tuple[Any, ...]) -> list[Span]:
    for arg in args:
        if isinstance(arg, list) and arg and isinstance(arg[0], Span):
            return cast("list[Span]", arg)
    return []


_CODECS: dict[Callable[..., Any], _Codec | None] = {}


def _codec(fn: Callable[..., Any]) -> _Codec | None:
    """How ``fn``'s result is logged (``None``: it cannot be, and a retry applies the write again)."""
    try:
        return _CODECS[fn]
    except KeyError:
        pass
    codec: _Codec | None
    try:
        result_type = typing.get_type_hints(fn)["return"]
        parts = typing.get_args(result_type)
        renumbered = typing.get_origin(result_type) is tuple and len(parts) == 2 and parts[0] == list[Span]
        codec = _SpansCodec(result_type, parts[1]) if renumbered else _Codec(result_type)
    except Exception:
        logger.warning("replays: the result of %r cannot be logged", fn, exc_info=True)
        codec = None
    _CODECS[fn] = codec
    return codec


def _worth_logging(result: Any) -> bool:
    """Whether a retry must see ``result``: ``None`` or empty, the write claimed nothing."""
    return result is not None and not (isinstance(result, list) and not result)


def _log_text(entries: Entries) -> str:
    return "[" + ",".join(f"[{json.dumps(name)},{text}]" for name, text in entries) + "]"


def log_entries(text: str | None) -> Entries:
    """The entries of a log kept as ``text`` (the ``writes`` column)."""
    if not text:
        return []
    return [(name, pydantic_core.to_json(value).decode()) for name, value in json_loads(text)]


def _record_log(conn: sa.Connection, ctx: Ctx, log: WriteLog, entries: Entries) -> None:
    """Keep ``entries`` as the log of ``log``'s key (in the caller's transaction): the key's row, made if
    missing (holds in memory), is the request's again (``running``, no answer)."""

    def build() -> Any:
        insert = upsert(ctx, T).values(
            key=sa.bindparam("b_key"),
            state="running",
            run_id=sa.bindparam("b_run_id"),
            claimed=sa.bindparam("b_claimed"),
            request_hash=sa.bindparam("b_hash"),
            writes=sa.bindparam("b_writes"),
        )
        new = insert.excluded
        return insert.on_conflict_do_update(index_elements=[T.c.key], set_={c: new[c] for c in ROW})

    params = {"b_key": log.key, "b_run_id": log.run_id, "b_claimed": log.claimed, "b_hash": log.fingerprint}
    execute(conn, prepared(("replay_log", ctx.dialect), build), {**params, "b_writes": _log_text(entries)})


def _write_name(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def replaying(write_of: Callable[..., Any]) -> bool:
    """Whether the request running now replays a result of ``write_of`` an earlier try logged: the store
    must then make that write even where a read says it would find nothing (the queue emptied by the
    first try's own dequeue)."""
    log = current_writes.get()
    return log is not None and log.pending(_write_name(write_of))


class LoggedWrite:
    """A store write run for a request answered under an idempotency key (see the module docstring).

    :meth:`replayed` is the result an earlier try of the request logged for this write, if any (then the
    write is not run again); else the write runs as ``self`` (the same arguments), logging its result in
    its transaction, and :meth:`committed` adds that result to the request's log once it committed.
    """

    __slots__ = ("_codec", "_fn", "_log", "_name", "_pending")

    def __init__(self, log: WriteLog, fn: Callable[..., Any], write_of: Callable[..., Any]) -> None:
        self._log = log
        self._fn = fn
        self._name = _write_name(write_of)
        self._codec = _codec(write_of)
        self._pending: tuple[str, str] | None = None

    def replayed(self, args: tuple[Any, ...]) -> tuple[bool, Any]:
        """``(True, result)`` logged by an earlier try for this write (made with ``args``), else
        ``(False, None)``."""
        if self._codec is None:
            return False, None
        found, text = self._log.take(self._name)
        return (True, self._codec.load(text, args)) if found else (False, None)

    def __call__(self, conn: sa.Connection, *args: Any) -> Any:
        self._pending = None  # (run again after a rollback: group commit, a retried serialization failure)
        result = self._fn(conn, *args)
        if self._codec is not None and _worth_logging(result):
            entry = (self._name, self._codec.dump(result, args))
            _record_log(conn, args[0], self._log, [*self._log.entries, entry])
            self._pending = entry
        return result

    def committed(self) -> None:
        if self._pending is not None:
            self._log.add(*self._pending)
            self._pending = None


def logged(fn: Callable[..., Any], args: tuple[Any, ...], write_of: Callable[..., Any]) -> LoggedWrite | None:
    """``fn`` (a write of ``write_of``, which it may wrap) as a :class:`LoggedWrite` when it is a store
    operation's (given the store's ``Ctx``) made while a request with a write log runs; else ``None``."""
    log = current_writes.get()
    if log is None or not args or not isinstance(args[0], Ctx):
        return None
    return LoggedWrite(log, fn, write_of)
