"""Spans of one attempt → RL triplets (prompt/response token ids, logprobs, reward, metadata)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agl.tracer import extract_links_from_attributes, get_reward_value
from agl.types import Span, Triplet
from agl.types.semconv import AGL_LLM_CALL

from ._llm_call import extract_llm_call, image_urls, response_id_of
from .base import TraceToTripletBase, as_spans
from .tree import RewardMatchPolicy, TraceTree

__all__ = [
    "DEFAULT_LLM_CALL_MATCH",
    "PROXY_CALL_NAMES",
    "LlmProxyTraceToTriplet",
    "TracerTraceToTriplet",
    "span_to_triplet",
]

DEFAULT_LLM_CALL_MATCH = r"openai\.chat\.completion|agentlightning\.llm_call"
PROXY_CALL_NAMES = (AGL_LLM_CALL, "raw_gen_ai_request", "litellm_request")
"""Names of the spans the LLM proxy records for a call (agl's, and the reference proxy's)."""


def span_to_triplet(span: Span, agent_name: str | None = None) -> Triplet:
    """One LLM-call span as a triplet (reward not set)."""
    call = extract_llm_call(span.attributes)
    prompt: dict[str, Any] = {
        "token_ids": call.prompt_token_ids,
        "raw_content": call.prompt_messages,
        "image_urls": image_urls(call.prompt_messages),
    }
    response: dict[str, Any] = {"token_ids": call.response_token_ids, "raw_content": call.completion}
    if call.logprobs is not None:
        response["logprobs"] = call.logprobs
    metadata: dict[str, Any] = {
        "rollout_id": span.rollout_id,
        "attempt_id": span.attempt_id,
        "sequence_id": span.sequence_id,
        "span_id": span.span_id,
        "response_id": call.response_id,
        "agent_name": agent_name,
        "request": call.request,
        "response": call.response,
    }
    if call.tools is not None:
        metadata["tools"] = call.tools
    return Triplet(prompt=prompt, response=response, reward=None, metadata=metadata)


def _linked_rewards(
    reward_spans: Sequence[Span], call_spans: Sequence[Span]
) -> tuple[dict[str, float], set[str]]:
    """Rewards that name their call with a link (``emit_reward(..., attributes=make_link_attributes(...))``)."""
    assigned: dict[str, float] = {}
    used: set[str] = set()
    for reward_span in reward_spans:
        links = extract_links_from_attributes(reward_span.attributes)
        if not links:
            continue
        value = get_reward_value(reward_span)
        if value is None:
            continue
        for call in call_spans:
            if call.span_id in assigned:
                continue
            if all(_link_matches(call, link.key_match, link.value_match) for link in links):
                assigned[call.span_id] = value
                used.add(reward_span.span_id)
                break
    return assigned, used


def _link_matches(span: Span, key: str, value: str) -> bool:
    if key == "span_id":
        return span.span_id == value
    if key == "trace_id":
        return span.trace_id == value
    return str(span.attributes.get(key)) == value


def _finish(triplets: list[Triplet], final_reward: float | None) -> list[Triplet]:
    for turn, triplet in enumerate(triplets):
        triplet.metadata["turn_index"] = turn
        triplet.metadata["num_turns"] = len(triplets)
    if final_reward is not None and triplets:
        triplets[-1].reward = final_reward
    return triplets


class TracerTraceToTriplet(TraceToTripletBase):
    """Triplets from a traced attempt: builds the trace tree, finds the LLM calls made under the agents
    that match ``agent_match`` and gives each reward to the call it follows.

    Understands spans of agl's OpenAI instrumentation (``openai.chat.completion``), of the agl LLM proxy
    (``agentlightning.llm_call``; with ``repair_hierarchy`` they are placed under the agent span whose time
    they fall in) and of other GenAI instrumentations, by ``llm_call_match``. When both the client's
    instrumentation and the proxy recorded a call, it counts once (same response id) and the record with
    token ids is kept. A reward that links to its call (by response id or span id) goes to that call.

    Args:
        repair_hierarchy: re-parent spans hung directly under the root by time containment.
        llm_call_match: regex on span names that marks LLM calls.
        agent_match: regex on agent names; ``None`` keeps calls of every agent.
        exclude_llm_call_in_reward: ignore LLM calls made inside a reward span (e.g. an LLM judge).
        reward_match: :class:`RewardMatchPolicy`.
        skip_empty_token_spans: drop calls without prompt or response token ids.
        final_reward: if given, the reward of the last triplet.
    """

    def __init__(
        self,
        repair_hierarchy: bool = True,
        llm_call_match: str = DEFAULT_LLM_CALL_MATCH,
        agent_match: str | None = None,
        exclude_llm_call_in_reward: bool = True,
        reward_match: RewardMatchPolicy | str = RewardMatchPolicy.FIRST_OCCURRENCE,
        skip_empty_token_spans: bool = False,
        final_reward: float | None = None,
        *,
        _skip_empty_token_spans: bool | None = None,
    ) -> None:
        self.repair_hierarchy = repair_hierarchy
        self.llm_call_match = llm_call_match
        self.agent_match = agent_match
        self.exclude_llm_call_in_reward = exclude_llm_call_in_reward
        self.reward_match = RewardMatchPolicy(reward_match)
        self.skip_empty_token_spans = (
            _skip_empty_token_spans if _skip_empty_token_spans is not None else skip_empty_token_spans
        )
        self.final_reward = final_reward

    def build_tree(self, spans: Sequence[Any]) -> TraceTree:
        tree = TraceTree.from_spans(as_spans(spans))
        if self.repair_hierarchy:
            tree.repair_hierarchy()
        return tree

    def adapt(self, source: Sequence[Any], /) -> list[Triplet]:
        if not source:
            return []
        tree = self.build_tree(source)
        return self.to_trajectory(tree)

    def span_to_triplet(self, span: Span, agent_name: str | None) -> Triplet:
        """Override point for richer triplets."""
        return span_to_triplet(span, agent_name)

    def to_trajectory(self, tree: TraceTree) -> list[Triplet]:
        calls = tree.find_llm_calls(
            llm_call_match=self.llm_call_match,
            agent_match=self.agent_match,
            within_matching_subtree="*" if self.agent_match is None else None,
            within_reward=False,
            within_llm_call=False,
            exclude_llm_call_in_reward=self.exclude_llm_call_in_reward,
            existing_response_ids=set(),
            dedup=True,
        )
        pairs = [
            (node, self.span_to_triplet(node.span, None if label == "*" else label)) for node, label in calls
        ]
        if self.skip_empty_token_spans:
            pairs = [(n, t) for n, t in pairs if t.prompt["token_ids"] and t.response["token_ids"]]
        nodes = [n for n, _ in pairs]
        reward_nodes = [n for n in tree.traverse() if n.reward() is not None]
        linked, used = _linked_rewards([n.span for n in reward_nodes], [n.span for n in nodes])
        positional = tree.match_rewards(self.reward_match, [n for n in nodes if n.id not in linked], used)
        for node, triplet in pairs:
            triplet.reward = linked.get(node.id, positional.get(node.id))
        return _finish([t for _, t in pairs], self.final_reward)

    def visualize(
        self, spans: Sequence[Any], filename: str = "trace_tree", interested_span_match: str | None = None
    ) -> TraceTree:
        tree = self.build_tree(spans)
        tree.visualize(filename, interested_span_match)
        return tree


class LlmProxyTraceToTriplet(TraceToTripletBase):
    """Triplets from the LLM proxy's call spans, ordered by sequence id only (clocks may differ).

    Each reward goes to the latest call before it (by sequence id) that has no reward yet; a reward that
    links to its call goes to that call. Calls without prompt or response token ids are skipped, as are
    failed ones (client disconnected, backend error) unless ``include_errors``; a repeated response id
    counts once.
    """

    def __init__(self, include_errors: bool = False, final_reward: float | None = None) -> None:
        self.include_errors = include_errors
        self.final_reward = final_reward

    def adapt(self, source: Sequence[Any], /) -> list[Triplet]:
        spans = sorted(as_spans(source), key=lambda s: (s.sequence_id, s.start_time or 0.0))
        calls: list[Span] = []
        seen: set[str] = set()
        rewards: list[Span] = []
        for span in spans:
            if span.name in PROXY_CALL_NAMES:
                if span.status.status_code == "ERROR" and not self.include_errors:
                    continue
                call = extract_llm_call(span.attributes)
                if not call.prompt_token_ids or not call.response_token_ids:
                    continue
                response_id = response_id_of(span.attributes)
                if response_id is not None:
                    if response_id in seen:
                        continue
                    seen.add(response_id)
                calls.append(span)
            elif get_reward_value(span) is not None:
                rewards.append(span)
        assigned, used = _linked_rewards(rewards, calls)
        for reward in rewards:
            if reward.span_id in used:
                continue
            value = get_reward_value(reward)
            for call in reversed(calls):
                if call.sequence_id < reward.sequence_id and call.span_id not in assigned:
                    assigned[call.span_id] = value  # pyright: ignore[reportArgumentType]
                    break
        triplets: list[Triplet] = []
        for call in calls:
            triplet = span_to_triplet(call)
            triplet.reward = assigned.get(call.span_id)
            triplets.append(triplet)
        return _finish(triplets, self.final_reward)
