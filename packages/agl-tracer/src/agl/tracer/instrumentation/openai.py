"""Spans for the agent's OpenAI chat-completion calls (``openai`` >= 1, sync and async, streaming or not).

Each call made while a tracer is active becomes one span ``openai.chat.completion`` of that tracer, with
GenAI attributes in the shape agl's adapters read:

- request: ``gen_ai.request.model``, ``.type`` (``chat``), ``.streaming`` and the other scalar parameters,
  ``gen_ai.prompt.<i>.role/content``
  (plus ``tool_calls``/``tool_call_id``), tools as ``gen_ai.request.functions.<i>.name/description/parameters``;
- response: ``gen_ai.response.id/model/finish_reasons``, ``gen_ai.completion.<i>.role/content/finish_reason``
  (plus ``tool_calls``), usage as ``gen_ai.usage.prompt_tokens/completion_tokens/total_tokens`` (and the
  newer ``input_tokens/output_tokens``);
- token ids when the backend returns them (vLLM-style ``prompt_token_ids`` on the response and
  ``token_ids`` on each choice): ``prompt_token_ids`` and ``response_token_ids`` (first choice), and
  ``logprobs.content`` (JSON) when logprobs were returned.

``openai`` is never imported by agl: :func:`instrument_openai` patches it now if it is already imported, or
right after the application imports it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from types import ModuleType
from typing import Any

from agl.types.narrow import as_int_list, as_list, as_mapping
from agl.types.semconv import LLMCall, LLMCallFormat, LLMChoice, LLMUsage

from ..base import OpenSpan, get_active_tracer

__all__ = ["instrument_openai", "is_openai_instrumented", "uninstrument_openai"]

logger = logging.getLogger(__name__)

SPAN_NAME = "openai.chat.completion"

_lock = threading.RLock()
_originals: dict[tuple[Any, str], Any] = {}
_wanted = False

_REQUEST_SCALARS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "stop",
    "stream",
    "logprobs",
    "top_logprobs",
    "user",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning_effort",
)


# -- public switch --------------------------------------------------------------------------------


def instrument_openai() -> None:
    """Record OpenAI chat-completion calls as spans of the active tracer. Idempotent.

    Patches ``openai`` at once when it is imported already, otherwise as soon as it gets imported. Calls made
    while no tracer is active pass straight through.
    """
    global _wanted
    with _lock:
        _wanted = True
        if "openai" in sys.modules:
            _patch()
            return
        if importlib.util.find_spec("openai") is None:
            logger.debug("openai is not installed: nothing to instrument")
            return
        if not any(isinstance(f, _OpenAIImportHook) for f in sys.meta_path):
            sys.meta_path.insert(0, _OpenAIImportHook())


def uninstrument_openai() -> None:
    """Undo :func:`instrument_openai`."""
    global _wanted
    with _lock:
        _wanted = False
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _OpenAIImportHook)]
        for (owner, attr), original in list(_originals.items()):
            setattr(owner, attr, original)
        _originals.clear()


def is_openai_instrumented() -> bool:
    """Whether OpenAI's chat completions are currently patched."""
    with _lock:
        return bool(_originals)


class _OpenAIImportHook(importlib.abc.MetaPathFinder):
    """Patches ``openai`` right after the application imports it."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "openai":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            with _lock:
                if _wanted:
                    _patch()

        loader.exec_module = exec_module
        return spec


def _patch() -> None:
    if _originals:
        return
    try:
        from openai.resources.chat.completions import AsyncCompletions, Completions
    except Exception as exc:  # an openai too old or too new for us: never break the application
        logger.warning(
            "cannot instrument openai (%s: %s); its calls will not be traced", type(exc).__name__, exc
        )
        return
    for method in ("create", "parse"):  # parse: structured outputs, a ChatCompletion as well (opt-in)
        for owner, wrap in ((Completions, _wrap_sync), (AsyncCompletions, _wrap_async)):
            original = getattr(owner, method, None)
            if original is None:
                continue
            _originals[(owner, method)] = original
            setattr(owner, method, wrap(original, method))
    logger.debug("openai chat completions instrumented")


# -- wrappers -------------------------------------------------------------------------------------


def _start(resource: Any, kwargs: Mapping[str, Any], method: str) -> OpenSpan | None:
    tracer = get_active_tracer()
    if tracer is None:
        return None
    if method == "parse" and not getattr(tracer, "record_openai_parse", False):
        return None  # like the reference's AgentOps instrumentation, which records ``create`` only
    try:
        return tracer.start_span(SPAN_NAME, request_attributes(kwargs, _base_url(resource)))
    except Exception:
        logger.exception("could not start a span for an OpenAI call")
        return None


def _fail(span: OpenSpan, exc: BaseException) -> None:
    try:
        span.record_exception(exc)
        span.record_status("ERROR", f"{type(exc).__name__}: {exc}")
        span.end()
    except Exception:
        logger.exception("could not record an OpenAI error")


def _finish(span: OpenSpan, response: Any) -> None:
    try:
        span.record_attributes(response_attributes(response))
        span.record_status("OK")
        span.end()
    except Exception:
        logger.exception("could not record an OpenAI response")
        span.end()


@contextlib.contextmanager
def _failing(span: Any) -> Generator[None, None, None]:
    """Record an exception of the wrapped call on its span, then let it propagate."""
    try:
        yield
    except BaseException as exc:
        _fail(span, exc)
        raise


def _traced(span: Any, result: Any, streaming: bool, stream: Callable[[Any, Any], Any]) -> Any:
    """The call's result with its span ended, or a stream wrapped to end the span once consumed."""
    if streaming:
        return stream(result, span)
    _finish(span, result)
    return result


def _wrap_sync(original: Any, method: str) -> Any:
    @functools.wraps(original)
    def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        span = _start(self, kwargs, method)
        if span is None:
            return original(self, *args, **kwargs)
        with _failing(span):
            result = original(self, *args, **kwargs)
        return _traced(
            span, result, bool(kwargs.get("stream")) and hasattr(result, "__next__"), _TracedStream
        )

    return create


def _wrap_async(original: Any, method: str) -> Any:
    @functools.wraps(original)
    async def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        span = _start(self, kwargs, method)
        if span is None:
            return await original(self, *args, **kwargs)
        with _failing(span):
            result = await original(self, *args, **kwargs)
        streaming = bool(kwargs.get("stream")) and hasattr(result, "__anext__")
        return _traced(span, result, streaming, _TracedAsyncStream)

    return create


class _ChunkAccumulator:
    """Rebuilds a chat completion from streamed chunks."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.model: str | None = None
        self.usage: Any = None
        self.prompt_token_ids: list[int] | None = None
        self.choices: dict[int, dict[str, Any]] = {}

    def add(self, chunk: Any) -> None:
        self.id = self.id or getattr(chunk, "id", None)
        self.model = self.model or getattr(chunk, "model", None)
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        prompt_ids = as_int_list(_extra(chunk, "prompt_token_ids"))
        if prompt_ids is not None:
            self.prompt_token_ids = prompt_ids
        for choice in getattr(chunk, "choices", None) or ():
            acc = self.choices.setdefault(
                getattr(choice, "index", 0) or 0,
                {"role": None, "content": "", "finish_reason": None, "tool_calls": {}, "token_ids": []},
            )
            delta = getattr(choice, "delta", None)
            if delta is not None:
                acc["role"] = getattr(delta, "role", None) or acc["role"]
                acc["content"] += getattr(delta, "content", None) or ""
                for call in getattr(delta, "tool_calls", None) or ():
                    slot = acc["tool_calls"].setdefault(
                        getattr(call, "index", 0) or 0, {"id": None, "name": "", "arguments": ""}
                    )
                    slot["id"] = getattr(call, "id", None) or slot["id"]
                    function = getattr(call, "function", None)
                    if function is not None:
                        slot["name"] += getattr(function, "name", None) or ""
                        slot["arguments"] += getattr(function, "arguments", None) or ""
            if getattr(choice, "finish_reason", None):
                acc["finish_reason"] = choice.finish_reason
            ids = as_int_list(_extra(choice, "token_ids"))
            if ids is not None:
                acc["token_ids"].extend(ids)

    def attributes(self) -> dict[str, Any]:
        return self.llm_call().response_attributes(LLMCallFormat.GEN_AI)

    def llm_call(self) -> LLMCall:
        """The response assembled so far."""
        call = LLMCall(response_id=self.id or None, response_model=self.model or None)
        for index in sorted(self.choices):
            acc = self.choices[index]
            tool_calls = [
                {
                    "id": c["id"] or None,
                    "type": "function",
                    "function": {"name": c["name"] or None, "arguments": c["arguments"] or None},
                }
                for _, c in sorted(acc["tool_calls"].items())
            ]
            message: dict[str, Any] = {"role": acc["role"] or "assistant", "content": acc["content"]}
            if tool_calls:
                message["tool_calls"] = tool_calls
            call.choices.append(
                LLMChoice(
                    index=index,
                    message=message,
                    finish_reason=acc["finish_reason"] or None,
                    token_ids=list(acc["token_ids"]) or None,
                )
            )
        call.prompt_token_ids = self.prompt_token_ids
        if call.choices:
            call.response_token_ids = call.choices[0].token_ids
        call.usage = _usage(self.usage)
        return call


class _StreamSpan:
    """What both stream wrappers share: the wrapped stream, its span, and how the span ends."""

    def __init__(self, inner: Any, span: OpenSpan) -> None:
        self._inner = inner
        self._span: OpenSpan | None = span
        self._acc = _ChunkAccumulator()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _done(self) -> None:
        span, self._span = self._span, None
        if span is not None:
            _finish_stream(span, self._acc)

    def _failed(self, exc: BaseException) -> None:
        span, self._span = self._span, None
        if span is not None:
            span.record_attributes(self._acc.attributes())
            _fail(span, exc)

    def _ended(self, exc: BaseException) -> None:
        """The wrapped stream raised ``exc``: its end (``StopIteration``, ``StopAsyncIteration``) or a failure."""
        if isinstance(exc, StopIteration | StopAsyncIteration):
            self._done()
        else:
            self._failed(exc)

    def __del__(self) -> None:
        if getattr(self, "_span", None) is not None:
            self._done()


class _TracedStream(_StreamSpan):
    """A sync OpenAI stream that ends its span when it is exhausted, closed or fails."""

    def __iter__(self) -> _TracedStream:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._inner)
        except BaseException as exc:
            self._ended(exc)
            raise
        self._acc.add(chunk)
        return chunk

    def __enter__(self) -> _TracedStream:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._done()


class _TracedAsyncStream(_StreamSpan):
    """An async OpenAI stream that ends its span when it is exhausted, closed or fails."""

    def __aiter__(self) -> _TracedAsyncStream:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self._inner.__anext__()
        except BaseException as exc:
            self._ended(exc)
            raise
        self._acc.add(chunk)
        return chunk

    async def __aenter__(self) -> _TracedAsyncStream:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def close(self) -> None:
        try:
            await self._inner.close()
        finally:
            self._done()


def _finish_stream(span: OpenSpan, acc: _ChunkAccumulator) -> None:
    try:
        span.record_attributes(acc.attributes())
        span.record_status("OK")
    except Exception:
        logger.exception("could not record a streamed OpenAI response")
    span.end()


# -- attribute extraction -------------------------------------------------------------------------


def _base_url(resource: Any) -> str | None:
    client = getattr(resource, "_client", None)
    url = getattr(client, "base_url", None)
    return str(url) if url is not None else None


def _as_dict(obj: Any) -> dict[str, Any]:
    mapping = as_mapping(obj)
    if mapping is not None:
        return dict(mapping)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            dumped = as_mapping(dump(exclude_none=True))
        except Exception:
            return {}
        return dict(dumped) if dumped is not None else {}
    return {}


def _plain_tool_calls(tool_calls: Sequence[Any]) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    for call in tool_calls:
        call_dict = _as_dict(call)
        function = _as_dict(call_dict.get("function") or {})
        calls.append({**call_dict, "function": function})
    return calls


def _plain_message(message: Any) -> dict[str, Any]:
    msg = _as_dict(message)
    if msg.get("tool_calls"):
        msg["tool_calls"] = _plain_tool_calls(msg["tool_calls"])
    return msg


def _plain_tool(tool: Any) -> dict[str, Any]:
    tool_dict = _as_dict(tool)
    return {**tool_dict, "function": _as_dict(tool_dict.get("function") or {})}


def request_call(kwargs: Mapping[str, Any], base_url: str | None = None) -> LLMCall:
    """The typed record of a ``chat.completions.create`` request (no response yet)."""
    params: dict[str, Any] = {}
    for key in _REQUEST_SCALARS:
        value = kwargs.get(key)
        if key == "stream":
            continue
        if isinstance(value, (str, bool, int, float)):
            params[key] = value
        elif (strings := as_list(value)) and all(isinstance(v, str) for v in strings):
            params[key] = strings
    extra_body = as_mapping(kwargs.get("extra_body"))
    if extra_body is not None:
        for key, value in extra_body.items():
            if isinstance(value, (str, bool, int, float)):
                params[str(key)] = value
    stream = kwargs.get("stream")
    model = kwargs.get("model")
    return LLMCall(
        system="openai",
        model=model if isinstance(model, str) else None,
        stream=stream if isinstance(stream, bool) else False,  # not given: not streamed
        params=params,
        messages=[_plain_message(m) for m in kwargs.get("messages") or ()] or None,
        tools=[_plain_tool(t) for t in kwargs.get("tools") or ()] or None,
        api_base=base_url or None,
    )


def request_attributes(kwargs: Mapping[str, Any], base_url: str | None = None) -> dict[str, Any]:
    """GenAI attributes of a ``chat.completions.create`` request."""
    return request_call(kwargs, base_url).request_attributes(LLMCallFormat.GEN_AI)


def _extra(obj: Any, name: str) -> Any:
    value = getattr(obj, name, None)
    if value is None:
        extra = as_mapping(getattr(obj, "model_extra", None))
        if extra is not None:
            value = extra.get(name)
    return value


def _usage(usage: Any) -> LLMUsage | None:
    if usage is None:
        return None
    prompt = getattr(usage, "prompt_tokens", None)
    completion = getattr(usage, "completion_tokens", None)
    total = getattr(usage, "total_tokens", None)
    return LLMUsage(
        input_tokens=prompt if isinstance(prompt, int) else None,
        output_tokens=completion if isinstance(completion, int) else None,
        total_tokens=total if isinstance(total, int) else None,
    )


def _choice_token_ids(choice: Any) -> list[int] | None:
    ids = as_int_list(_extra(choice, "token_ids"))
    if ids is not None:
        return ids
    provider = as_mapping(_extra(choice, "provider_specific_fields"))
    return as_int_list(provider.get("token_ids")) if provider is not None else None


def response_call(response: Any) -> LLMCall | None:
    """The typed record of a ``ChatCompletion``'s response part (``None`` for anything else)."""
    choices = getattr(response, "choices", None)
    if choices is None:
        return None
    call = LLMCall(
        response_id=str(response.id) if getattr(response, "id", None) else None,
        response_model=str(response.model) if getattr(response, "model", None) else None,
    )
    first_ids: list[int] | None = None
    for position, choice in enumerate(choices):
        message = getattr(choice, "message", None)
        plain: dict[str, Any] = {}
        if message is not None:
            plain["role"] = str(getattr(message, "role", None) or "assistant")
            content = getattr(message, "content", None)
            if content is not None:
                plain["content"] = content
            if getattr(message, "tool_calls", None):
                plain["tool_calls"] = _plain_tool_calls(message.tool_calls)
        finish = getattr(choice, "finish_reason", None)
        ids = _choice_token_ids(choice)
        if ids is not None and first_ids is None:
            first_ids = ids
        entry = LLMChoice(
            index=getattr(choice, "index", position),
            message=plain,
            finish_reason=str(finish) if finish else None,
            token_ids=ids,
        )
        if position == 0:
            logprobs = getattr(choice, "logprobs", None)
            content_logprobs = getattr(logprobs, "content", None) if logprobs is not None else None
            if content_logprobs:
                entry.logprobs_content = [_as_dict(lp) for lp in content_logprobs]
                entry.logprobs = [float(e["logprob"]) for e in entry.logprobs_content if "logprob" in e]
        call.choices.append(entry)
    prompt_ids = as_int_list(_extra(response, "prompt_token_ids"))
    if prompt_ids is not None:
        call.prompt_token_ids = prompt_ids
    if first_ids is None:  # older vLLM patches: response_token_ids as a list per choice
        legacy = as_list(_extra(response, "response_token_ids"))
        if legacy:
            first_ids = as_int_list(legacy[0])
    call.response_token_ids = first_ids
    call.usage = _usage(getattr(response, "usage", None))
    return call


def response_attributes(response: Any) -> dict[str, Any]:
    """GenAI attributes of a ``ChatCompletion`` (anything else, e.g. a raw response, gives ``{}``)."""
    call = response_call(response)
    return call.response_attributes(LLMCallFormat.GEN_AI) if call is not None else {}
