"""One LLM call, two recordings: the proxy's span and the traced OpenAI client's span read back the same.

A real run: the agent's ``openai`` client (instrumented by the runner's tracer) calls the LLM proxy, which
calls the stand-in model; both spans of each call go through the store and
:meth:`agl.types.semconv.LLMCall.from_attributes`.
"""

from __future__ import annotations

from typing import Any

import pytest
from agl.testing.e2e.proxy_harness import run_agent
from agl.types.semconv import AGL_LLM_CALL, LLMCall, LLMCallFormat

from tests.test_frameworks_openai import async_agent, sync_agent

TRACED = "openai.chat.completion"


def _message(message: dict[str, Any]) -> dict[str, Any]:
    # A message without text has content None (proxy, plain client) or "" (a streamed client answer).
    return {k: v for k, v in message.items() if v not in (None, "")}


def comparable(call: LLMCall, *, streamed: bool) -> dict[str, Any]:
    """The fields both recordings of a call carry.

    Of a stream the client sees neither logprobs nor usage (the proxy asks its backend for usage itself).
    """
    return {
        "model": call.model,
        "messages": [_message(m) for m in call.messages or []],
        "tools": call.tools,
        "response": (call.response_id, call.response_model, call.finish_reasons),
        "choices": [
            (c.index, _message(c.message), c.finish_reason, c.token_ids, None if streamed else c.logprobs)
            for c in call.choices
        ],
        "token_ids": (call.prompt_token_ids, call.response_token_ids),
        "usage": None if streamed or not call.usage else (call.usage.input_tokens, call.usage.output_tokens),
    }


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("agent", [sync_agent, async_agent], ids=["sync", "async"])
def test_proxy_and_traced_client_spans_of_one_call_read_back_the_same(agent: Any, stream: bool) -> None:
    run = run_agent(agent, [{"a": 2, "b": 3, "stream": stream}])
    [result] = run.results
    by_layout: dict[str, dict[str, LLMCall]] = {AGL_LLM_CALL: {}, TRACED: {}}
    for span in result.spans:
        if span.name in by_layout:
            call = LLMCall.from_attributes(span.attributes, strict=True)
            assert call.response_id, span.attributes
            by_layout[span.name][call.response_id] = call
    proxy, traced = by_layout[AGL_LLM_CALL], by_layout[TRACED]
    assert len(proxy) == 2 and proxy.keys() == traced.keys()
    for response_id in proxy:
        assert LLMCall.detect_format(proxy[response_id].to_attributes()) is LLMCallFormat.PROXY
        assert proxy[response_id].response_token_ids, "the stand-in returns token ids"
        assert comparable(proxy[response_id], streamed=stream) == comparable(
            traced[response_id], streamed=stream
        )


@pytest.mark.timeout(180)
def test_trace_to_messages_gives_one_conversation_per_call_when_both_layers_record_it() -> None:
    from agl.algorithms import TraceToMessages

    run = run_agent(sync_agent, [{"a": 2, "b": 3, "stream": False}])
    [result] = run.results
    names = [span.name for span in result.spans]
    assert names.count(AGL_LLM_CALL) == 2 and names.count(TRACED) == 2  # two calls, each recorded twice
    conversations = TraceToMessages().adapt(result.spans)
    assert len(conversations) == 2
    assert all(c["messages"][-1]["role"] == "assistant" for c in conversations)
    assert len(conversations[1]["messages"]) > len(
        conversations[0]["messages"]
    )  # the second call's longer prompt
