"""TraceTree and TracerTraceToTriplet on hand-built traces."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agl.algorithms import TracerTraceToTriplet
from agl.algorithms.adapter import RewardMatchPolicy, TraceTree, extract_llm_call
from agl.tracer import emit_reward, make_link_attributes
from agl.types import Span
from agl.types.semconv import AGL_LLM_CALL, LLMCallAttributes

_seq = iter(range(1, 10**6))


def span(
    name: str,
    start: float,
    end: float,
    *,
    span_id: str,
    parent: str | None = None,
    attributes: dict[str, Any] | None = None,
    seq: int | None = None,
) -> Span:
    return Span.from_attributes(
        attributes=attributes or {},
        rollout_id="ro-1",
        attempt_id="at-1",
        sequence_id=seq if seq is not None else next(_seq),
        name=name,
        trace_id="t" * 32,
        span_id=span_id,
        parent_id=parent,
        start_time=start,
        end_time=end,
    )


def openai_call(
    span_id: str, start: float, end: float, *, parent: str | None, n: int, rid: str | None = None
) -> Span:
    return span(
        "openai.chat.completion",
        start,
        end,
        span_id=span_id,
        parent=parent,
        attributes={
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": f"question {n}",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": f"answer {n}",
            "gen_ai.request.model": "m",
            "gen_ai.response.id": rid or f"resp-{span_id}",
            "prompt_token_ids": [n, n + 1],
            "response_token_ids": [100 + n],
        },
    )


def reward_span(
    span_id: str, at: float, value: float, *, parent: str | None, extra: dict[str, Any] | None = None
) -> Span:
    core = emit_reward(value, attributes=extra, propagate=False)
    return span(core.name, at, at, span_id=span_id, parent=parent, attributes=dict(core.attributes))


def agent(span_id: str, name: str, start: float, end: float, parent: str | None = None) -> Span:
    return span("agent.run", start, end, span_id=span_id, parent=parent, attributes={"agent.name": name})


def test_tree_orders_children_and_finds_agent_names() -> None:
    spans = [
        agent("a1", "solver", 0, 10),
        openai_call("c1", 1, 2, parent="a1", n=1),
        openai_call("c2", 3, 4, parent="a1", n=2),
    ]
    tree = TraceTree.from_spans(spans)
    assert tree.names_tuple() == (
        "agent.run",
        [("openai.chat.completion", []), ("openai.chat.completion", [])],
    )
    assert tree.agent_name() == "solver"
    assert [n.id for n in tree.traverse()] == ["a1", "c1", "c2"]


def test_several_roots_get_a_virtual_root_and_missing_parents_a_virtual_node() -> None:
    spans = [openai_call("c1", 1, 2, parent=None, n=1), openai_call("c2", 3, 5, parent="lost", n=2)]
    tree = TraceTree.from_spans(spans)
    assert tree.id == "virtual-root" and tree.span.name == "virtual-root"
    virtual = tree.find_id("lost")
    assert virtual is not None and virtual.span.name == "agentlightning.virtual"
    assert (virtual.start_time, virtual.end_time) == (3, 5)
    with pytest.raises(ValueError):
        TraceTree.from_spans([])


def test_repair_moves_calls_under_the_agent_they_ran_in() -> None:
    spans = [
        span("session", 0, 20, span_id="root"),
        agent("a1", "solver", 1, 10, parent="root"),
        agent("a2", "critic", 11, 19, parent="root"),
        openai_call("c1", 2, 3, parent="root", n=1),
        openai_call("c2", 12, 13, parent="root", n=2),
    ]
    repaired = TracerTraceToTriplet(agent_match="solver").adapt(spans)
    assert [t.metadata["agent_name"] for t in repaired] == ["solver"]
    assert repaired[0].prompt["token_ids"] == [1, 2]
    assert TracerTraceToTriplet(agent_match="solver", repair_hierarchy=False).adapt(spans) == []


def test_triplets_carry_token_ids_content_and_metadata() -> None:
    spans = [agent("a1", "solver", 0, 10), openai_call("c1", 1, 2, parent="a1", n=7)]
    [triplet] = TracerTraceToTriplet().adapt(spans)
    assert triplet.prompt["token_ids"] == [7, 8]
    assert triplet.response["token_ids"] == [107]
    assert triplet.prompt["raw_content"] == [{"role": "user", "content": "question 7"}]
    assert triplet.response["raw_content"] == [{"role": "assistant", "content": "answer 7"}]
    assert triplet.metadata["response_id"] == "resp-c1"
    assert triplet.metadata["rollout_id"] == "ro-1" and triplet.metadata["turn_index"] == 0
    assert triplet.metadata["request"] == {"model": "m"}


def test_rewards_go_to_the_call_they_follow() -> None:
    spans = [
        agent("a1", "solver", 0, 20),
        openai_call("c1", 1, 2, parent="a1", n=1),
        reward_span("r1", 2.5, 0.3, parent="a1"),
        openai_call("c2", 3, 4, parent="a1", n=2),
        openai_call("c3", 5, 6, parent="a1", n=3),
        reward_span("r2", 7, 1.0, parent="a1"),
    ]
    triplets = TracerTraceToTriplet().adapt(spans)
    assert [t.reward for t in triplets] == [0.3, None, 1.0]
    assert TracerTraceToTriplet(final_reward=5.0).adapt(spans)[-1].reward == 5.0


def test_first_sibling_policy_only_looks_at_siblings() -> None:
    spans = [
        span("session", 0, 20, span_id="root"),
        agent("a1", "solver", 1, 5, parent="root"),
        openai_call("c1", 2, 3, parent="a1", n=1),
        reward_span("r1", 6, 1.0, parent="root"),
    ]
    assert [t.reward for t in TracerTraceToTriplet(reward_match="first_occurrence").adapt(spans)] == [1.0]
    assert [
        t.reward for t in TracerTraceToTriplet(reward_match=RewardMatchPolicy.FIRST_SIBLING).adapt(spans)
    ] == [None]


def test_llm_calls_inside_a_reward_are_not_training_data() -> None:
    judge = span(
        "agentlightning.operation",
        5,
        9,
        span_id="judge",
        parent="a1",
        attributes={"agentlightning.operation.name": "agentlightning.reward"},
    )
    spans = [
        agent("a1", "solver", 0, 20),
        openai_call("c1", 1, 2, parent="a1", n=1),
        judge,
        openai_call("c2", 6, 7, parent="judge", n=2),
    ]
    assert [t.prompt["token_ids"] for t in TracerTraceToTriplet().adapt(spans)] == [[1, 2]]
    both = TracerTraceToTriplet(exclude_llm_call_in_reward=False).adapt(spans)
    assert len(both) == 2


def test_duplicate_records_of_one_call_count_once_keeping_token_ids() -> None:
    without_ids = openai_call("c1", 1, 4, parent="a1", n=1, rid="same")
    del without_ids.attributes["prompt_token_ids"], without_ids.attributes["response_token_ids"]
    proxy_record = span(
        AGL_LLM_CALL,
        2,
        3,
        span_id="p1",
        parent=None,
        attributes={
            "gen_ai.response.id": "same",
            LLMCallAttributes.PROMPT_TOKEN_IDS.value: [5, 6],
            LLMCallAttributes.RESPONSE_TOKEN_IDS.value: [7],
            LLMCallAttributes.REQUEST_MESSAGES.value: json.dumps([{"role": "user", "content": "q"}]),
        },
    )
    spans = [agent("a1", "solver", 0, 10), without_ids, proxy_record]
    [triplet] = TracerTraceToTriplet().adapt(spans)
    assert triplet.prompt["token_ids"] == [5, 6] and triplet.response["token_ids"] == [7]


def test_skip_empty_token_spans() -> None:
    call = openai_call("c1", 1, 2, parent="a1", n=1)
    del call.attributes["response_token_ids"]
    spans = [agent("a1", "solver", 0, 10), call, openai_call("c2", 3, 4, parent="a1", n=2)]
    assert len(TracerTraceToTriplet().adapt(spans)) == 2
    assert len(TracerTraceToTriplet(skip_empty_token_spans=True).adapt(spans)) == 1


def test_a_linked_reward_goes_to_the_call_it_names() -> None:
    spans = [
        agent("a1", "solver", 0, 20),
        openai_call("c1", 1, 2, parent="a1", n=1),
        openai_call("c2", 3, 4, parent="a1", n=2),
        reward_span("r1", 5, 0.7, parent="a1", extra=make_link_attributes({"gen_ai.response.id": "resp-c1"})),
    ]
    assert [t.reward for t in TracerTraceToTriplet().adapt(spans)] == [0.7, None]


def test_image_urls_are_extracted_and_bad_payloads_tolerated() -> None:
    content = json.dumps(
        [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "http://img/1.png"}},
        ]
    )
    call = openai_call("c1", 1, 2, parent=None, n=1)
    call.attributes["gen_ai.prompt.0.content"] = content
    [triplet] = TracerTraceToTriplet().adapt([call])
    assert triplet.prompt["image_urls"] == ["http://img/1.png"]
    call.attributes["gen_ai.prompt.0.content"] = "[not json"
    [triplet] = TracerTraceToTriplet().adapt([call])
    assert triplet.prompt["image_urls"] == []


def test_reference_proxy_payloads_are_understood() -> None:
    call = extract_llm_call(
        {
            "llm.hosted_vllm.prompt_token_ids": "[1, 2, 3]",
            "llm.hosted_vllm.response_token_ids": "[[4, 5]]",
            "llm.hosted_vllm.id": "x",
        }
    )
    assert (call.prompt_token_ids, call.response_token_ids, call.response_id) == ([1, 2, 3], [4, 5], "x")
    call = extract_llm_call(
        {"llm.hosted_vllm.prompt_token_ids": "[1]", "llm.hosted_vllm.choices": "[{'token_ids': [9]}]"}
    )
    assert call.response_token_ids == [9]
