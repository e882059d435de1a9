"""LlmProxyTraceToTriplet on hand-built spans and on spans recorded by a real proxy."""

from __future__ import annotations

import json
from typing import Any, cast

import openai
from agl.algorithms import LlmProxyTraceToTriplet, TracerTraceToTriplet
from agl.proxy import LLMProxy
from agl.store import InMemoryLightningStore
from agl.testing.openai_standin import (
    StandinBackend,
    chat_prompt_text,
    serve_standin,
    token_ids,
    token_logprob,
)
from agl.tracer import emit_reward
from agl.types import Span, StatusCode
from agl.types.semconv import AGL_LLM_CALL, LLMCallAttributes
from openai.types.chat import ChatCompletionMessageParam

L = LLMCallAttributes


def call(seq: int, *, rid: str | None = None, ids: bool = True, status: StatusCode = "OK") -> Span:
    attributes: dict[str, Any] = {"gen_ai.response.id": rid or f"r{seq}"}
    if ids:
        attributes[L.PROMPT_TOKEN_IDS.value] = [seq]
        attributes[L.RESPONSE_TOKEN_IDS.value] = [seq * 10]
    span = Span.from_attributes(
        attributes=attributes, rollout_id="ro", attempt_id="at", sequence_id=seq, name=AGL_LLM_CALL
    )
    span.status.status_code = status
    return span


def reward(seq: int, value: float) -> Span:
    core = emit_reward(value, propagate=False)
    return Span.from_attributes(
        attributes=dict(core.attributes), rollout_id="ro", attempt_id="at", sequence_id=seq, name=core.name
    )


def test_rewards_go_to_the_latest_earlier_call() -> None:
    triplets = LlmProxyTraceToTriplet().adapt([reward(7, 1.0), call(5), call(1), reward(3, 0.5), call(2)])
    assert [(t.prompt["token_ids"], t.reward) for t in triplets] == [([1], None), ([2], 0.5), ([5], 1.0)]
    assert [t.metadata["sequence_id"] for t in triplets] == [1, 2, 5]


def test_several_rewards_fill_successive_calls_and_early_rewards_are_dropped() -> None:
    triplets = LlmProxyTraceToTriplet().adapt(
        [reward(1, 9.0), call(2), call(3), reward(4, 0.1), reward(5, 0.2)]
    )
    assert [t.reward for t in triplets] == [0.2, 0.1]


def test_calls_without_token_ids_duplicates_and_failures_are_skipped() -> None:
    spans = [call(1), call(2, rid="r1"), call(3, ids=False), call(4, status="ERROR"), call(5)]
    assert [t.metadata["sequence_id"] for t in LlmProxyTraceToTriplet().adapt(spans)] == [1, 5]
    with_errors = LlmProxyTraceToTriplet(include_errors=True).adapt(spans)
    assert [t.metadata["sequence_id"] for t in with_errors] == [1, 4, 5]
    assert [t.reward for t in LlmProxyTraceToTriplet().adapt([call(1)])] == [None]


async def test_spans_recorded_by_the_proxy_become_triplets() -> None:
    store = InMemoryLightningStore()
    with serve_standin(StandinBackend()) as server:
        proxy = LLMProxy(
            [{"model_name": "m", "litellm_params": {"model": "hosted_vllm/x", "api_base": server.base_url}}],
            store=store,
            request_logprobs=True,
        )
        await proxy.start()
        rollout = await store.start_rollout(input=None)
        rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
        client = openai.AsyncOpenAI(base_url=proxy.as_resource(rid, aid).endpoint, api_key="x")
        try:
            history: list[ChatCompletionMessageParam] = []
            for turn in range(3):
                history.append({"role": "user", "content": f"step {turn}"})
                stream = turn == 1
                if stream:
                    chunks = await client.chat.completions.create(model="m", messages=history, stream=True)
                    answer = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
                else:
                    resp = await client.chat.completions.create(model="m", messages=history)
                    answer = resp.choices[0].message.content or ""
                history.append({"role": "assistant", "content": answer})
                await proxy.flush()
                if turn == 0:  # a reward in the middle of the rollout, as the tracer would store it
                    core = emit_reward(0.25, propagate=False)
                    seq = await store.get_next_span_sequence_id(rid, aid)
                    await store.add_span(
                        Span.from_core_fields(core, rollout_id=rid, attempt_id=aid, sequence_id=seq)
                    )
            core = emit_reward(1.0, propagate=False)
            seq = await store.get_next_span_sequence_id(rid, aid)
            await store.add_span(Span.from_core_fields(core, rollout_id=rid, attempt_id=aid, sequence_id=seq))
        finally:
            await client.close()
            await proxy.stop()
    spans = (await store.query_spans(rid, aid)).items
    triplets = LlmProxyTraceToTriplet().adapt(spans)
    assert [t.reward for t in triplets] == [0.25, None, 1.0]
    for turn, triplet in enumerate(triplets):
        prompt_messages = history[: 2 * turn + 1]
        assert triplet.prompt["token_ids"] == token_ids(
            chat_prompt_text(cast("list[dict[str, Any]]", prompt_messages))
        )
        assert triplet.response["token_ids"] == token_ids(f"echo: step {turn}")
        assert triplet.response["logprobs"] == [token_logprob(i) for i in range(len(f"echo: step {turn}"))]
        assert triplet.prompt["raw_content"] == prompt_messages
        assert triplet.metadata["rollout_id"] == rid and triplet.metadata["turn_index"] == turn
    # The tree-based adapter reads the same proxy spans.
    tree_triplets = TracerTraceToTriplet().adapt(spans)
    assert [t.response["token_ids"] for t in tree_triplets] == [t.response["token_ids"] for t in triplets]
    assert [t.reward for t in tree_triplets] == [0.25, None, 1.0]
    assert json.loads(spans[0].attributes[L.REQUEST_MESSAGES.value]) == history[:1]
    await store.close()
