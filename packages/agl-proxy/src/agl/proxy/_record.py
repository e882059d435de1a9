"""What one proxied call records: the span's attributes, built from the request and the assembled response."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from agl.types import OtelResource, Span, SpanContext, TraceStatus, new_span_id, new_trace_id
from agl.types.semconv import AGL_LLM_CALL, GenAIAttributes, LLMCallAttributes

from ._assemble import ResponseAssembler

__all__ = ["CallRecord", "parse_traceparent"]

_G = {m.name: m.value for m in GenAIAttributes}
_L = {m.name: m.value for m in LLMCallAttributes}

# Request fields mapped onto GenAI attributes; everything else goes to the params JSON.
_REQUEST_PARAM_ATTRS = {
    "temperature": _G["REQUEST_TEMPERATURE"],
    "top_p": _G["REQUEST_TOP_P"],
    "max_tokens": _G["REQUEST_MAX_TOKENS"],
    "max_completion_tokens": _G["REQUEST_MAX_TOKENS"],
    "seed": _G["REQUEST_SEED"],
    "frequency_penalty": _G["REQUEST_FREQUENCY_PENALTY"],
    "presence_penalty": _G["REQUEST_PRESENCE_PENALTY"],
    "n": _G["REQUEST_CHOICE_COUNT"],
}
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
    committed: bool = False
    """Handed to the recorder (the span is written, or being written)."""

    def finish(self) -> None:
        self.end_time = time.time()
        self.latency_ms = (time.perf_counter() - self.start_perf) * 1000.0

    def to_span(self, sequence_id: int) -> Span:
        """The span recorded for this call."""
        attrs = self.attributes()
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
            resource=_RESOURCE,
        )

    def attributes(self) -> dict[str, Any]:
        request = self.request
        attrs: dict[str, Any] = {
            _G["OPERATION_NAME"]: "chat" if self.endpoint == "chat.completions" else "text_completion",
            _L["ENDPOINT"]: self.endpoint,
            _L["STREAM"]: self.stream,
            _L["ROUTE"]: self.route,
        }
        if self.provider:
            attrs[_G["SYSTEM"]] = self.provider
        if isinstance(request.get("model"), str):
            attrs[_G["REQUEST_MODEL"]] = request["model"]
        for key, name in _REQUEST_PARAM_ATTRS.items():
            value = request.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                attrs[name] = value
        stop = request.get("stop")
        if isinstance(stop, str):
            attrs[_G["REQUEST_STOP_SEQUENCES"]] = [stop]
        elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
            attrs[_G["REQUEST_STOP_SEQUENCES"]] = stop
        if "messages" in request:
            attrs[_L["REQUEST_MESSAGES"]] = _dumps(request["messages"])
        if "prompt" in request:
            attrs[_L["REQUEST_PROMPT"]] = _dumps(request["prompt"])
        if request.get("tools"):
            attrs[_L["REQUEST_TOOLS"]] = _dumps(request["tools"])
        params = {k: v for k, v in request.items() if k not in _NOT_PARAMS}
        if params:
            attrs[_L["REQUEST_PARAMS"]] = _dumps(params)
        if self.deployment_model:
            attrs[_L["DEPLOYMENT_MODEL"]] = self.deployment_model
        if self.api_base:
            attrs[_L["DEPLOYMENT_API_BASE"]] = self.api_base
        if self.http_status is not None:
            attrs[_L["HTTP_STATUS"]] = self.http_status
        if self.latency_ms is not None:
            attrs[_L["LATENCY_MS"]] = round(self.latency_ms, 3)
        if self.first_chunk_ms is not None:
            attrs[_L["TIME_TO_FIRST_CHUNK_MS"]] = round(self.first_chunk_ms, 3)
        if self.client_disconnected:
            attrs[_L["CLIENT_DISCONNECTED"]] = True
        if self.error_type:
            attrs[_G["ERROR_TYPE"]] = self.error_type
        if self.error_message:
            attrs[_L["ERROR_MESSAGE"]] = self.error_message[:4000]
        if self.assembler is not None:
            self._response_attributes(attrs, self.assembler)
        return attrs

    def _response_attributes(self, attrs: dict[str, Any], result: ResponseAssembler) -> None:
        if result.id:
            attrs[_G["RESPONSE_ID"]] = result.id
        if result.model:
            attrs[_G["RESPONSE_MODEL"]] = result.model
        choices = result.ordered_choices()
        if not choices and result.prompt_token_ids is None:
            return
        if result.prompt_token_ids is not None:
            attrs[_L["PROMPT_TOKEN_IDS"]] = result.prompt_token_ids
        finish = [c.finish_reason for c in choices if c.finish_reason]
        if finish:
            attrs[_G["RESPONSE_FINISH_REASONS"]] = finish
        if choices:
            first = choices[0]
            if first.token_ids is not None:
                attrs[_L["RESPONSE_TOKEN_IDS"]] = first.token_ids
            if first.logprobs is not None:
                attrs[_L["RESPONSE_LOGPROBS"]] = first.logprobs
            if self.endpoint == "chat.completions":
                attrs[_L["RESPONSE_MESSAGES"]] = _dumps([c.message() for c in choices])
            else:
                attrs[_L["RESPONSE_MESSAGES"]] = _dumps(
                    [{"role": "assistant", "content": "".join(c.text)} for c in choices]
                )
            if len(choices) > 1:
                attrs[_L["RESPONSE_CHOICES"]] = _dumps(
                    [
                        {
                            "index": c.index,
                            "finish_reason": c.finish_reason,
                            "token_ids": c.token_ids,
                            "logprobs": c.logprobs,
                        }
                        for c in choices
                    ]
                )
        usage = result.usage
        if isinstance(usage, dict):
            if isinstance(usage.get("prompt_tokens"), int):
                attrs[_G["USAGE_INPUT_TOKENS"]] = usage["prompt_tokens"]
            if isinstance(usage.get("completion_tokens"), int):
                attrs[_G["USAGE_OUTPUT_TOKENS"]] = usage["completion_tokens"]
        else:
            if result.prompt_token_ids is not None:
                attrs[_G["USAGE_INPUT_TOKENS"]] = len(result.prompt_token_ids)
            if choices and choices[0].token_ids is not None:
                attrs[_G["USAGE_OUTPUT_TOKENS"]] = sum(len(c.token_ids or []) for c in choices)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
