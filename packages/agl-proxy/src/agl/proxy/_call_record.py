"""What one proxied call records: the span's attributes, built from the request and the assembled response."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agl.types import (
    OtelResource,
    Span,
    SpanContext,
    TraceStatus,
    attempt_resource,
    new_span_id,
    new_trace_id,
)
from agl.types.semconv import AGL_LLM_CALL, LLMCall, LLMChoice, LLMUsage

from ._assemble import ResponseAssembler
from ._bound import DEFAULT_MAX_SPAN_BYTES, bounded_attributes

__all__ = ["CallRecord", "parse_traceparent"]

# Request fields kept out of the params JSON (they have attributes of their own).
_NOT_PARAMS = {"messages", "tools", "prompt", "model", "stream"}
_RESOURCE = OtelResource(attributes={"service.name": "agl.proxy"})


def parse_traceparent(value: str | None) -> tuple[str, str] | None:
    """``(trace_id, parent_span_id)`` from a W3C ``traceparent`` header, or ``None``."""
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    trace_id, span_id = parts[1].lower(), parts[2].lower()
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    try:
        int(trace_id, 16)
        int(span_id, 16)
    except ValueError:
        return None
    return trace_id, span_id


@dataclass
class CallRecord:
    """Everything known about one call; becomes one span when the call ends."""

    rollout_id: str
    attempt_id: str
    endpoint: str
    request: dict[str, Any]
    stream: bool
    start_time: float = field(default_factory=time.time)
    start_perf: float = field(default_factory=time.perf_counter)
    end_time: float | None = None
    first_chunk_ms: float | None = None
    route: str = "direct"
    provider: str | None = None
    deployment_model: str | None = None
    api_base: str | None = None
    http_status: int | None = None
    assembler: ResponseAssembler | None = None
    error_type: str | None = None
    error_message: str | None = None
    client_disconnected: bool = False
    traceparent: tuple[str, str] | None = None
    latency_ms: float | None = None

    def finish(self) -> None:
        """The call is over: its span can be built (the proxy then hands it to the recorder, once)."""
        self.end_time = time.time()
        self.latency_ms = (time.perf_counter() - self.start_perf) * 1000.0

    @property
    def finished(self) -> bool:
        return self.end_time is not None

    def to_span(self, sequence_id: int, max_span_bytes: int = DEFAULT_MAX_SPAN_BYTES) -> Span:
        """The span recorded for this call, its text bodies cut to fit in ``max_span_bytes`` (see ``_bound``)."""
        attrs = self.attributes(max_span_bytes)
        trace_id, parent_id = self.traceparent or (new_trace_id(), None)
        span_id = new_span_id()
        failed = self.error_type is not None or self.client_disconnected
        description = None
        if self.client_disconnected:
            description = "client disconnected before the response ended"
        elif failed:
            description = (
                f"{self.error_type}: {self.error_message}" if self.error_message else self.error_type
            )
        return Span(
            rollout_id=self.rollout_id,
            attempt_id=self.attempt_id,
            sequence_id=sequence_id,
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            name=AGL_LLM_CALL,
            status=TraceStatus(status_code="ERROR" if failed else "OK", description=description),
            attributes=attrs,
            start_time=self.start_time,
            end_time=self.end_time or time.time(),
            context=SpanContext(trace_id=trace_id, span_id=span_id),
            parent=SpanContext(trace_id=trace_id, span_id=parent_id, is_remote=True) if parent_id else None,
            resource=attempt_resource(_RESOURCE, self.rollout_id, self.attempt_id, sequence_id),
        )

    def attributes(self, max_span_bytes: int = DEFAULT_MAX_SPAN_BYTES) -> dict[str, Any]:
        """The span's attributes (the :data:`~agl.types.semconv.LLMCallFormat.PROXY` layout), bounded."""
        return bounded_attributes(self.to_llm_call(), max_span_bytes)

    def to_llm_call(self) -> LLMCall:
        """This call as the typed record the span stores."""
        request = self.request
        call = LLMCall(
            endpoint=self.endpoint,
            system=self.provider or None,
            model=request["model"] if isinstance(request.get("model"), str) else None,
            stream=self.stream,
            params={k: v for k, v in request.items() if k not in _NOT_PARAMS},
            messages=request.get("messages"),
            prompt=request.get("prompt"),
            tools=request["tools"] if request.get("tools") else None,
            api_base=self.api_base or None,
            route=self.route,
            deployment_model=self.deployment_model or None,
            http_status=self.http_status,
            latency_ms=round(self.latency_ms, 3) if self.latency_ms is not None else None,
            time_to_first_chunk_ms=round(self.first_chunk_ms, 3) if self.first_chunk_ms is not None else None,
            client_disconnected=self.client_disconnected,
            error_type=self.error_type or None,
            error_message=self.error_message[:4000] if self.error_message else None,
        )
        if self.assembler is not None:
            self._add_response(call, self.assembler)
        return call

    def _add_response(self, call: LLMCall, result: ResponseAssembler) -> None:
        call.response_id = result.id or None
        call.response_model = result.model or None
        call.system_fingerprint = result.system_fingerprint or None
        choices = result.ordered_choices()
        if not choices and result.prompt_token_ids is None:
            return
        call.prompt_token_ids = result.prompt_token_ids
        for c in choices:
            message = (
                c.message()
                if self.endpoint == "chat.completions"
                else {"role": "assistant", "content": "".join(c.text)}
            )
            call.choices.append(
                LLMChoice(
                    index=c.index,
                    message=message,
                    finish_reason=c.finish_reason,
                    token_ids=c.token_ids,
                    logprobs=c.logprobs,
                )
            )
        if choices:
            call.response_token_ids = choices[0].token_ids
        usage = result.usage
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            call.usage = LLMUsage(
                input_tokens=prompt if isinstance(prompt, int) else None,
                output_tokens=completion if isinstance(completion, int) else None,
            )
        else:
            call.usage = LLMUsage(
                input_tokens=len(result.prompt_token_ids) if result.prompt_token_ids is not None else None,
                output_tokens=(
                    sum(len(c.token_ids or []) for c in choices)
                    if choices and choices[0].token_ids is not None
                    else None
                ),
            )
