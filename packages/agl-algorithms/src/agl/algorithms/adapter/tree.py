"""``TraceTree``: the spans of one attempt as a tree, with the searches the triplet adapter needs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import Enum
from typing import Any, Protocol, cast

from agl.tracer import get_reward_value
from agl.types import Span
from agl.types.extras import requires_extra
from agl.types.semconv import AGL_OPERATION, AGL_REWARD, AGL_VIRTUAL, LightningSpanAttributes

__all__ = ["RewardMatchPolicy", "TraceTree"]

_OP_NAME = LightningSpanAttributes.OPERATION_NAME.value


class _Digraph(Protocol):
    """What :meth:`TraceTree.visualize` uses of ``graphviz.Digraph`` (graphviz ships no complete types)."""

    def node(self, name: str, label: str | None = None) -> None: ...

    def edge(self, tail_name: str, head_name: str) -> None: ...

    def render(self, filename: str, *, format: str, cleanup: bool) -> Any: ...


class RewardMatchPolicy(str, Enum):
    """How rewards find their LLM call."""

    FIRST_OCCURRENCE = "first_occurrence"
    """The latest LLM call that ended before the reward started and has no reward yet."""
    FIRST_SIBLING = "first_sibling"
    """The same, among the reward's earlier siblings only."""


def _time(value: float | None, default: float) -> float:
    return default if value is None else value


class TraceTree:
    """A node: one span and its children (in the order the spans came, i.e. sequence order)."""

    def __init__(self, id: str, span: Span, children: list[TraceTree] | None = None) -> None:
        self.id = id
        self.span = span
        self.children: list[TraceTree] = children or []

    @property
    def start_time(self) -> float:
        return _time(self.span.start_time, 0.0)

    @property
    def end_time(self) -> float:
        return _time(self.span.end_time, self.start_time)

    def add_child(self, child: TraceTree) -> None:
        self.children.append(child)

    def traverse(self) -> list[TraceTree]:
        """Every node, pre-order."""
        out: list[TraceTree] = []
        stack: list[TraceTree] = [self]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(node.children))
        return out

    def find_id(self, span_id: str) -> TraceTree | None:
        return next((n for n in self.traverse() if n.id == span_id), None)

    def names_tuple(self) -> tuple[str, list[Any]]:
        """``(name, [children's names_tuple...])``: a compact shape for tests."""
        return (self.span.name, [c.names_tuple() for c in self.children])

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.span.name,
            "start_time": self.span.start_time,
            "end_time": self.span.end_time,
            "children": [c.to_json() for c in self.children],
        }

    def visualize(self, filename: str, interested_span_match: str | None = None) -> None:
        """Render the tree with graphviz to ``filename``.png (needs the ``graphviz`` package)."""
        with requires_extra("agl-algorithms", "TraceTree.visualize"):
            import graphviz  # pyright: ignore[reportMissingTypeStubs]
        keep: set[str] | None = None
        if interested_span_match is not None:
            pattern = re.compile(interested_span_match)
            keep = set()

            def mark(node: TraceTree, ancestors: list[str]) -> None:
                if pattern.search(node.span.name):
                    keep.update([*ancestors, node.id])
                for child in node.children:
                    mark(child, [*ancestors, node.id])

            mark(self, [])
        dot = cast("_Digraph", graphviz.Digraph(comment="trace tree"))
        for node in self.traverse():
            if keep is None or node.id in keep:
                dot.node(node.id, f"{node.span.name}\n{node.id}")
                for child in node.children:
                    if keep is None or child.id in keep:
                        dot.edge(node.id, child.id)
        dot.render(filename, format="png", cleanup=True)

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_spans(cls, spans: Sequence[Span]) -> TraceTree:
        """Build the tree. Missing parents become virtual nodes; several roots get a virtual root.

        Children are ordered by start time, then sequence id.
        """
        if not spans:
            raise ValueError("cannot build a trace tree from no spans")
        nodes: dict[str, TraceTree] = {}
        for span in spans:
            if span.span_id not in nodes:
                nodes[span.span_id] = cls(span.span_id, span)
        orphans: dict[str, list[TraceTree]] = {}
        roots: list[TraceTree] = []
        for node in nodes.values():
            parent_id = node.span.parent_id
            if parent_id is None:
                roots.append(node)
            elif parent_id in nodes and parent_id != node.id:
                nodes[parent_id].add_child(node)
            else:
                orphans.setdefault(parent_id, []).append(node)
        for parent_id, children in orphans.items():
            children.sort(key=_order_key)
            first = children[0].span
            virtual = cls(
                parent_id,
                Span.from_attributes(
                    attributes={},
                    rollout_id=first.rollout_id,
                    attempt_id=first.attempt_id,
                    sequence_id=first.sequence_id,
                    trace_id=first.trace_id,
                    span_id=parent_id,
                    name=AGL_VIRTUAL,
                    start_time=min(c.start_time for c in children),
                    end_time=max(c.end_time for c in children),
                ),
                children,
            )
            roots.append(virtual)
        if not roots:
            raise ValueError("the spans form a cycle: no root span")
        for node in nodes.values():  # children in time order, whatever order the spans came in
            node.children.sort(key=_order_key)
        if len(roots) == 1:
            return roots[0]
        roots.sort(key=lambda n: n.start_time)
        first = roots[0].span
        root_span = Span.from_attributes(
            attributes={},
            rollout_id=first.rollout_id,
            attempt_id=first.attempt_id,
            sequence_id=first.sequence_id,
            trace_id=first.trace_id,
            span_id="virtual-root",
            name="virtual-root",
            start_time=roots[0].start_time,
            end_time=max(r.end_time for r in roots),
        )
        return cls("virtual-root", root_span, roots)

    def repair_hierarchy(self) -> None:
        """Move spans that instrumentation layers hung directly under the root beneath the tightest
        other span whose time interval contains theirs."""
        if len(self.children) == 1:
            self.children[0].repair_hierarchy()
            return
        for child in list(self.children):
            if len(self.children) <= 1:
                break
            best: TraceTree | None = None
            best_slack = float("inf")
            for candidate in self.traverse():
                if candidate is self or candidate is child or _is_within(candidate, child):
                    continue
                if candidate.start_time <= child.start_time and child.end_time <= candidate.end_time:
                    slack = (child.start_time - candidate.start_time) + (candidate.end_time - child.end_time)
                    if 0 < slack < best_slack:
                        best, best_slack = candidate, slack
            if best is not None:
                self.children.remove(child)
                best.add_child(child)
                best.children.sort(key=lambda n: n.start_time)

    # -- queries --------------------------------------------------------------------------------

    def agent_name(self) -> str | None:
        """The agent this span stands for, if it marks one (OpenAI Agents SDK, AgentOps, AutoGen, LangGraph...)."""
        a = self.span.attributes
        if isinstance(a.get("agent.name"), str):
            return a["agent.name"]
        if a.get("agentops.span.kind") == "agent" and isinstance(a.get("operation.name"), str):
            return a["operation.name"]
        if isinstance(a.get("recipient_agent_type"), str):
            return a["recipient_agent_type"]
        if isinstance(a.get("langchain.chain.type"), str):
            return a["langchain.chain.type"]
        if isinstance(a.get("executor.id"), str):
            return a["executor.id"]
        if a.get("type") == "agent" and isinstance(a.get("agentlightning.operation.input.name"), str):
            return a["agentlightning.operation.input.name"]
        if self.span.name.startswith("langchain.Chain.") and isinstance(a.get("lc_name"), str):
            return a["lc_name"]
        return None

    def reward(self) -> float | None:
        """The reward this span carries, if any."""
        value = get_reward_value(self.span)
        if value is not None:
            return value
        a = self.span.attributes
        if self.span.name == AGL_OPERATION and a.get(_OP_NAME) == AGL_REWARD:
            output = a.get("agentlightning.operation.output")
            if isinstance(output, (int, float)) and not isinstance(output, bool):
                return float(output)
        return None

    def is_reward_span(self) -> bool:
        a = self.span.attributes
        return self.reward() is not None or (
            self.span.name == AGL_OPERATION and a.get(_OP_NAME) == AGL_REWARD
        )

    def find_llm_calls(
        self,
        *,
        llm_call_match: str,
        agent_match: str | None,
        within_matching_subtree: str | None,
        within_reward: bool,
        within_llm_call: bool,
        exclude_llm_call_in_reward: bool,
        existing_response_ids: set[str],
        dedup: bool,
    ) -> list[tuple[TraceTree, str]]:
        """LLM calls under matching agents, in pre-order, with the agent label they were found under."""
        from ._llm_call import response_id_of

        out: list[tuple[TraceTree, str]] = []
        positions: dict[str, int] = {}
        pattern = re.compile(llm_call_match)
        agent_pattern = re.compile(agent_match) if agent_match is not None else None
        # The last element is the index in ``out`` of the LLM call the node is nested in (-1: none).
        stack: list[tuple[TraceTree, str | None, bool, int]] = [
            (self, within_matching_subtree, within_reward, -2 if within_llm_call else -1)
        ]
        while stack:
            node, label, in_reward, enclosing = stack.pop()
            child_enclosing = enclosing
            if (
                label is not None
                and not (exclude_llm_call_in_reward and in_reward)
                and pattern.search(node.span.name)
            ):
                response_id = response_id_of(node.span.attributes)
                if dedup and enclosing != -1:
                    # The same call seen by another layer (client instrumentation around the proxy's record):
                    # one call, and the record with token ids wins.
                    if enclosing >= 0 and _has_token_ids(node) and not _has_token_ids(out[enclosing][0]):
                        out[enclosing] = (node, out[enclosing][1])
                    if response_id is not None:
                        existing_response_ids.add(response_id)
                        if enclosing >= 0:
                            positions[response_id] = enclosing
                elif dedup and response_id is not None and response_id in existing_response_ids:
                    # The same call recorded twice elsewhere in the tree: keep the first place, but the
                    # record that has token ids.
                    index = positions.get(response_id)
                    if index is not None and _has_token_ids(node) and not _has_token_ids(out[index][0]):
                        out[index] = (node, out[index][1])
                else:
                    if response_id is not None:
                        existing_response_ids.add(response_id)
                        positions[response_id] = len(out)
                    child_enclosing = len(out)
                    out.append((node, label))
            agent = node.agent_name()
            child_label = label
            if agent is not None:
                child_label = agent if agent_pattern is None or agent_pattern.search(agent) else None
            child_in_reward = in_reward or node.is_reward_span()
            for child in reversed(node.children):
                stack.append((child, child_label, child_in_reward, child_enclosing))
        return out

    def match_rewards(
        self,
        policy: RewardMatchPolicy | str,
        llm_calls: Sequence[TraceTree],
        skip_reward_ids: set[str] | None = None,
    ) -> dict[str, float]:
        """``{llm_call_span_id: reward}``: each reward goes to the latest call that ended by the time the
        reward started and has none yet."""
        policy = RewardMatchPolicy(policy)
        call_ids = {n.id for n in llm_calls}
        assigned: dict[str, float] = {}
        if policy is RewardMatchPolicy.FIRST_OCCURRENCE:
            _assign(sorted(self.traverse(), key=_order_key), call_ids, assigned, skip_reward_ids or set())
        else:
            for node in self.traverse():
                _assign(sorted(node.children, key=_order_key), call_ids, assigned, skip_reward_ids or set())
        return assigned


def _order_key(node: TraceTree) -> tuple[float, int]:
    # Rewards sort after calls that end at the same instant; start time first.
    return (node.start_time, node.span.sequence_id)


def _assign(
    nodes: Sequence[TraceTree], call_ids: set[str], assigned: dict[str, float], skip: set[str]
) -> None:
    seen: list[TraceTree] = []
    for node in nodes:
        if node.id in call_ids:
            seen.append(node)
            continue
        if node.id in skip:
            continue
        value = node.reward()
        if value is None:
            continue
        for call in reversed(seen):
            if call.end_time <= node.start_time and call.id not in assigned:
                assigned[call.id] = value
                break


def _has_token_ids(node: TraceTree) -> bool:
    from ._llm_call import extract_llm_call

    call = extract_llm_call(node.span.attributes)
    return bool(call.prompt_token_ids and call.response_token_ids)


def _is_within(candidate: TraceTree, child: TraceTree) -> bool:
    """Whether ``candidate`` lies inside ``child``'s subtree (moving there would make a cycle)."""
    return any(n is candidate for n in child.traverse())
