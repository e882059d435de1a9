"""Property: in a generated multi-turn rollout, every reward lands on the LLM call it followed.

Traces are generated as a timeline: turn i is an LLM call, optionally followed (after a gap that may be
zero) by a reward. Sequence ids follow the timeline, as the store allocates them. The spans are then
handed to the adapters in a random order, hung under an agent span or left as roots.
"""

from __future__ import annotations

import json
from typing import Any

from agl.algorithms import LlmProxyTraceToTriplet, TracerTraceToTriplet
from agl.tracer import emit_reward
from agl.types import Span
from agl.types.semconv import AGL_LLM_CALL, LLMCallAttributes
from hypothesis import given, settings
from hypothesis import strategies as st

L = LLMCallAttributes

turn = st.tuples(
    st.floats(min_value=0.001, max_value=5.0),  # call duration
    st.floats(min_value=0.0, max_value=2.0),  # gap before the reward (may be 0)
    st.one_of(st.none(), st.floats(min_value=-1.0, max_value=1.0)),  # the reward, if any
    st.floats(min_value=0.001, max_value=2.0),  # gap before the next call
)


def build(
    turns: list[tuple[float, float, float | None, float]], *, under_agent: bool, proxy_names: bool
) -> list[Span]:
    spans: list[Span] = []
    t = 10.0
    seq = 0
    parent = "agent" if under_agent else None
    for i, (duration, reward_gap, reward, next_gap) in enumerate(turns):
        seq += 1
        attributes: dict[str, Any] = {
            "gen_ai.response.id": f"resp-{i}",
            L.PROMPT_TOKEN_IDS.value: [i, i],
            L.RESPONSE_TOKEN_IDS.value: [1000 + i],
            L.REQUEST_MESSAGES.value: json.dumps([{"role": "user", "content": f"turn {i}"}]),
        }
        spans.append(
            Span.from_attributes(
                attributes=attributes,
                rollout_id="ro",
                attempt_id="at",
                sequence_id=seq,
                name=AGL_LLM_CALL if proxy_names else "openai.chat.completion",
                span_id=f"call{i:04d}",
                parent_id=parent,
                start_time=t,
                end_time=t + duration,
            )
        )
        t += duration
        if reward is not None:
            t += reward_gap
            seq += 1
            core = emit_reward(reward, propagate=False)
            spans.append(
                Span.from_attributes(
                    attributes=dict(core.attributes),
                    rollout_id="ro",
                    attempt_id="at",
                    sequence_id=seq,
                    name=core.name,
                    span_id=f"rew{i:04d}",
                    parent_id=parent,
                    start_time=t,
                    end_time=t,
                )
            )
        t += next_gap
    if under_agent:
        spans.append(
            Span.from_attributes(
                attributes={"agent.name": "solver"},
                rollout_id="ro",
                attempt_id="at",
                sequence_id=seq + 1,
                name="agent.run",
                span_id="agent",
                start_time=9.0,
                end_time=t + 1,
            )
        )
    return spans


@settings(max_examples=150, deadline=None)
@given(
    turns=st.lists(turn, min_size=1, max_size=8),
    under_agent=st.booleans(),
    order=st.randoms(use_true_random=False),
)
def test_tracer_adapter_gives_each_reward_to_the_call_before_it(
    turns: list[tuple[float, float, float | None, float]], under_agent: bool, order: Any
) -> None:
    spans = build(turns, under_agent=under_agent, proxy_names=False)
    order.shuffle(spans)
    triplets = TracerTraceToTriplet().adapt(spans)
    assert [t.response["token_ids"] for t in triplets] == [[1000 + i] for i in range(len(turns))]
    assert [t.reward for t in triplets] == [r for _, _, r, _ in turns]
    assert [t.metadata["turn_index"] for t in triplets] == list(range(len(turns)))


@settings(max_examples=150, deadline=None)
@given(turns=st.lists(turn, min_size=1, max_size=8), order=st.randoms(use_true_random=False))
def test_proxy_adapter_gives_each_reward_to_the_call_before_it(
    turns: list[tuple[float, float, float | None, float]], order: Any
) -> None:
    spans = build(turns, under_agent=False, proxy_names=True)
    order.shuffle(spans)
    triplets = LlmProxyTraceToTriplet().adapt(spans)
    assert [t.prompt["token_ids"] for t in triplets] == [[i, i] for i in range(len(turns))]
    assert [t.reward for t in triplets] == [r for _, _, r, _ in turns]
