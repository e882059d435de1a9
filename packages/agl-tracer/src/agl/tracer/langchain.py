"""A LangChain callback handler that records chains and tools as spans of an :class:`~agl.tracer.OtelTracer`
(extra ``langchain``).

``OtelTracer.get_langchain_handler()`` returns one, as the reference's default tracer (AgentOps) does: pass it in
``config={"callbacks": [handler]}`` of ``invoke``/``ainvoke``. Each chain run (a LangGraph node, a runnable
sequence...) becomes a span ``chain.chain`` and each tool run a span ``tool.tool``, with the attribute names of
AgentOps' handler (``agentops.span.kind``, ``langchain.chain.type`` (the node's name), ``chain.inputs`` /
``chain.outputs`` (JSON text), ``langchain.tool.name`` / ``input`` / ``output``...), nested as the runs nest.
While a run is open its span is the current span of its thread, so the LLM calls it makes (recorded by agl's
OpenAI instrumentation, token ids included) are its children.

LLM runs get no span of their own: the OpenAI instrumentation records each call once, with what the model
received. Only this module imports ``langchain_core``; it is loaded on the first ``get_langchain_handler()``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode as OtelStatusCode

from .attributes import sanitize_attributes

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = ["LangChainSpanHandler"]

logger = logging.getLogger(__name__)


class _SpanSource(Protocol):
    """What the handler uses of its :class:`~agl.tracer.OtelTracer`: a protocol, so that this module does not
    import :mod:`agl.tracer.otel`, which imports it."""

    @property
    def otel_tracer(self) -> trace_api.Tracer: ...


def _json(value: Any) -> str:
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _name(serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any], default: str) -> str:
    """The run's name: LangChain's serialized name, else the name it passes along (LangGraph nodes)."""
    for value in ((serialized or {}).get("name"), kwargs.get("name")):
        if isinstance(value, str) and value:
            return value
    return default


class LangChainSpanHandler(BaseCallbackHandler):
    """Records LangChain chain and tool runs as spans of ``tracer`` (see the module's description).

    Spans of runs outside the tracer's trace contexts are not recorded, as with any span of the tracer.
    """

    def __init__(self, tracer: _SpanSource, tags: list[str] | None = None) -> None:
        super().__init__()
        self.tracer = tracer
        self.tags = list(tags or [])
        self._runs: dict[UUID, tuple[trace_api.Span, contextvars.Token[Context]]] = {}

    # -- span bookkeeping -------------------------------------------------------------------------

    def _start(self, kind: str, attributes: dict[str, Any], run_id: UUID, parent_run_id: UUID | None) -> None:
        try:
            parent = self._runs.get(parent_run_id) if parent_run_id is not None else None
            context = trace_api.set_span_in_context(parent[0]) if parent is not None else None
            attributes = {"agentops.span.kind": kind, "agentops.operation.name": kind, **attributes}
            if self.tags:
                attributes["langchain.tags"] = list(self.tags)
            span = self.tracer.otel_tracer.start_span(
                f"{kind}.{kind}", context=context, attributes=sanitize_attributes(attributes)
            )
            token = otel_context.attach(trace_api.set_span_in_context(span))
            self._runs[run_id] = (span, token)
        except Exception:  # tracing must never break the agent
            logger.exception("could not start a span for LangChain run %s", run_id)

    def _end(self, run_id: UUID, attributes: Mapping[str, Any], error: BaseException | None = None) -> None:
        entry = self._runs.pop(run_id, None)
        if entry is None:
            return
        span, token = entry
        _detach(token)
        try:
            span.set_attributes(sanitize_attributes(dict(attributes)))
            if error is not None:
                span.record_exception(error)
                span.set_status(Status(OtelStatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.end()
        except Exception:
            logger.exception("could not end the span of LangChain run %s", run_id)

    # -- chains -----------------------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        attributes = {
            "langchain.chain.type": _name(serialized, kwargs, "unknown_chain"),
            "langchain.chain.name": _json((serialized or {}).get("id", "unknown_chain")),
            "chain.inputs": _json(inputs),
        }
        self._start("chain", attributes, run_id, parent_run_id)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, {"chain.outputs": _json(outputs)})

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, {"langchain.chain.error": str(error)}, error)

    # -- tools ------------------------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        attributes = {
            "langchain.tool.name": _name(serialized, kwargs, "unknown_tool"),
            "langchain.tool.description": str((serialized or {}).get("description") or ""),
            "langchain.tool.input": input_str,
        }
        self._start("tool", attributes, run_id, parent_run_id)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, {"langchain.tool.output": output if isinstance(output, str) else _json(output)})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, {"langchain.tool.error": str(error)}, error)


def _detach(token: contextvars.Token[Context]) -> None:
    """Undo the ``attach`` of a run's start. A run may end in another context than it started in (LangChain
    hands callbacks to worker threads); that context never saw the attach, and there is nothing to undo
    (``otel_context.detach`` would log an error for it)."""
    with contextlib.suppress(ValueError):
        token.var.reset(token)
