"""Run an agent for real: Trainer + runner threads + LLM proxy + the OpenAI stand-in, then adapt its spans.

Used by the framework tests (``tests/test_frameworks_*.py``): each framework's agent talks to the proxy's
routed endpoint exactly as it would talk to OpenAI, and the test checks the triplets that come out.

The stand-in plays a calculator model: offered tools and asked ``add A and B``, it calls ``add(a=A, b=B)``;
given the tool's result it answers ``The sum is <result>``; otherwise it echoes.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

from agl.algorithms import LlmProxyTraceToTriplet, TracerTraceToTriplet
from agl.algorithms.decorator import algo
from agl.proxy import LLMProxy
from agl.runner import LitAgent, Trainer
from agl.store import InMemoryLightningStore
from agl.testing.openai_standin import (
    Reply,
    StandinBackend,
    ToolCall,
    content_text,
    json_list,
    json_object,
    serve_standin,
)
from agl.types import Rollout, Span, Triplet
from agl.types.semconv import AGL_LLM_CALL

__all__ = ["AgentRun", "RolloutResult", "calculator_script", "run_agent"]

ADD_TOOL_NAME = "add"
_ASK = re.compile(r"add (-?\d+) and (-?\d+)")


def calculator_script(request: dict[str, Any]) -> Reply | str | None:
    """The stand-in's behaviour for the framework tests."""
    messages = [json_object(m) for m in json_list(request.get("messages"))]
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return f"The sum is {content_text(last.get('content')).strip()}"
    asked = None
    for message in messages:
        if message.get("role") == "user":
            asked = _ASK.search(content_text(message.get("content"))) or asked
    names = [json_object(json_object(t).get("function")).get("name") for t in json_list(request.get("tools"))]
    if asked and ADD_TOOL_NAME in names:
        return Reply(
            tool_calls=[ToolCall(ADD_TOOL_NAME, {"a": int(asked.group(1)), "b": int(asked.group(2))})]
        )
    return None


@dataclass
class RolloutResult:
    rollout: Rollout
    spans: list[Span]
    proxy_triplets: list[Triplet]
    tree_triplets: list[Triplet]

    @property
    def llm_spans(self) -> list[Span]:
        return [s for s in self.spans if s.name == AGL_LLM_CALL]


@dataclass
class AgentRun:
    backend: StandinBackend
    results: list[RolloutResult] = field(default_factory=list[RolloutResult])


def run_agent(agent: LitAgent[Any], tasks: list[Any], *, timeout: float = 90.0) -> AgentRun:
    """Run ``agent`` on ``tasks`` with a Trainer (one runner thread) behind a real proxy and stand-in."""
    backend = StandinBackend(script=calculator_script, chunk_size=3)
    run = AgentRun(backend=backend)
    with serve_standin(backend) as server:
        store = InMemoryLightningStore()
        proxy = LLMProxy(
            [
                {
                    "model_name": "calc-model",
                    "litellm_params": {
                        "model": "hosted_vllm/calc-model",
                        "api_base": server.base_url,
                    },  # answers as calc-model
                }
            ],
            store=store,
            request_logprobs=True,
        )

        @algo
        async def drive(store: InMemoryLightningStore, llm_proxy: LLMProxy, train_dataset: list[Any]) -> None:
            await llm_proxy.start()
            try:
                await store.add_resources({"main_llm": llm_proxy.as_resource()})
                queued = [await store.enqueue_rollout(input=task) for task in train_dataset]
                ids = [r.rollout_id for r in queued]
                deadline = asyncio.get_running_loop().time() + timeout
                finished: list[Rollout] = []
                while len(finished) < len(ids) and asyncio.get_running_loop().time() < deadline:
                    finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=1.0)
                await llm_proxy.flush()
                for rollout_id in ids:
                    rollout = await store.get_rollout_by_id(rollout_id)
                    assert rollout is not None
                    spans = list((await store.query_spans(rollout_id, "latest")).items)
                    run.results.append(
                        RolloutResult(
                            rollout=rollout,
                            spans=spans,
                            proxy_triplets=LlmProxyTraceToTriplet().adapt(spans),
                            tree_triplets=TracerTraceToTriplet().adapt(spans),
                        )
                    )
            finally:
                await llm_proxy.stop()

        trainer = Trainer(
            algorithm=drive, n_runners=1, strategy="shm", store=store, llm_proxy=proxy, progress=False
        )
        trainer.fit(agent, tasks)
    return run


def tool_result_message(arguments: str) -> str:
    """What the test tools return for ``add``'s JSON arguments."""
    args = json.loads(arguments)
    return str(int(args["a"]) + int(args["b"]))
