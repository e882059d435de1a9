"""A reason for every rollout that trains nothing (issue 31, item 4): each reason caused by a real agent run
(runner, tracer, LLM proxy, stand-in model), recognised from the attempt's spans, with its fix in the message."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from agl.algorithms import Algorithm
from agl.algorithms.adapter import (
    NO_TRAINING_DATA,
    LlmProxyTraceToTriplet,
    NoDataReason,
    NoDataTally,
    diagnose,
    mark_no_data,
)
from agl.proxy import LLMProxy
from agl.runner import LitAgentRunner, Trainer, rollout
from agl.store import InMemoryLightningStore
from agl.testing.openai_standin import Reply, StandinBackend, serve_standin
from agl.tracer import OtelTracer, emit_reward
from agl.types import LLM, Span

MODEL = "m"


async def _ask(llm: LLM, text: str = "hi") -> None:
    import openai

    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="x") as client:
        await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": text}])


@rollout
async def answers_and_rewards(task: Any, llm: LLM) -> None:
    await _ask(llm)
    emit_reward(1.0)


@rollout
async def answers_without_reward(task: Any, llm: LLM) -> None:
    await _ask(llm)


@rollout
async def fails(task: Any, llm: LLM) -> None:
    raise RuntimeError("the agent breaks")


@rollout
async def never_asks(task: Any, llm: LLM) -> None:
    emit_reward(1.0)


@asynccontextmanager
async def _backend(**options: Any) -> AsyncIterator[tuple[str, InMemoryLightningStore, LLMProxy]]:
    backend = StandinBackend(**options)
    with serve_standin(backend) as server:
        store = InMemoryLightningStore()
        route = {
            "model_name": MODEL,
            "litellm_params": {"model": f"hosted_vllm/{MODEL}", "api_base": server.base_url},
        }
        proxy = LLMProxy([route], store=store)
        await proxy.start()
        try:
            yield server.base_url, store, proxy
        finally:
            await proxy.stop()


async def _spans_of_one_rollout(
    agent: Any, *, direct: bool = False, **backend: Any
) -> tuple[str, list[Span]]:
    """Run ``agent`` once; its status and spans. ``direct``: its ``llm`` is the model itself, not the proxy."""
    async with _backend(**backend) as (base_url, store, proxy):
        llm = LLM(endpoint=base_url, model=MODEL) if direct else proxy.as_resource(model=MODEL)
        runner = LitAgentRunner[Any](OtelTracer(), heartbeat_interval=0)
        with runner.run_context(agent=agent, store=store), contextlib.suppress(RuntimeError):
            await runner.step("task", resources={"main_llm": llm})  # (raises what a failing agent raised)
        await proxy.flush()
        [done] = (await store.query_rollouts()).items
        return done.status, list((await store.query_spans(done.rollout_id, "latest")).items)


def _cut(request: dict[str, Any]) -> Reply:
    return Reply(content="an answer that goes on an", finish_reason="length")


CASES: list[tuple[Callable[..., Any], dict[str, Any], NoDataReason | None, str]] = [
    (answers_and_rewards, {}, None, ""),
    (fails, {}, NoDataReason.FAILED, "error"),
    (never_asks, {}, NoDataReason.NO_LLM_CALL, "call its model"),
    (answers_and_rewards, {"direct": True}, NoDataReason.BYPASSED_PROXY, "base_url=llm.endpoint"),
    (answers_and_rewards, {"token_ids_supported": False}, NoDataReason.NO_TOKEN_IDS, "return_token_ids"),
    (answers_without_reward, {}, NoDataReason.NO_REWARD, "emit_reward"),
    (answers_without_reward, {"script": _cut}, NoDataReason.TRUNCATED_NO_REWARD, "max_tokens"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("agent", "options", "reason", "fix"), CASES, ids=[c[2].name if c[2] else "trains" for c in CASES]
)
async def test_each_reason_comes_from_an_agent_that_causes_it(
    agent: Any, options: dict[str, Any], reason: NoDataReason | None, fix: str
) -> None:
    status, spans = await _spans_of_one_rollout(agent, **options)
    assert diagnose(status, spans) is reason
    if reason is None:
        assert LlmProxyTraceToTriplet().adapt(spans), "the healthy agent gives triplets"
        return
    tally = NoDataTally()
    tally.add(reason)
    message = tally.message(with_fixes=True)
    assert message is not None and message.startswith(
        f"1 of 1 rollouts gave no training data: 1 {reason.value}"
    )
    assert fix in message


def test_the_tally_counts_by_reason_and_keeps_every_series() -> None:
    tally = NoDataTally()
    for reason in [None, NoDataReason.NO_REWARD, NoDataReason.NO_REWARD, NoDataReason.BYPASSED_PROXY, None]:
        tally.add(reason)
    assert (
        tally.message()
        == "3 of 5 rollouts gave no training data: 2 no reward emitted, 1 calls bypassed the LLM proxy"
    )
    metrics = tally.as_metrics()
    assert metrics["no_data"] == 3 and metrics["no_data_no_reward"] == 2 and metrics["no_data_failed"] == 0
    assert NoDataTally().message() is None


class _Diagnosing(Algorithm):
    """A user's algorithm: one rollout per task, each diagnosed, the tally reported at the end of ``fit``."""

    def __init__(self) -> None:
        self.tally = NoDataTally()
        self.marked: list[dict[str, Any]] = []

    async def run(self, train_dataset: Any = None, val_dataset: Any = None) -> None:
        store = self.get_store()
        await store.add_resources({"main_llm": LLM(endpoint="http://127.0.0.1:9/v1", model=MODEL)})
        ids = [(await store.enqueue_rollout(input=task)).rollout_id for task in train_dataset or []]
        for finished in await store.wait_for_rollouts(rollout_ids=ids, timeout=60):
            reason = diagnose(finished.status, list(await store.query_spans(finished.rollout_id, "latest")))
            self.tally.add(reason)
            if reason is not None:
                await mark_no_data(store, finished, reason)
        self.marked = [r.metadata or {} for r in await store.query_rollouts(rollout_id_in=ids)]

    def training_data_report(self) -> str | None:
        return self.tally.message(with_fixes=True)


def test_the_trainer_shows_the_algorithms_report_at_the_end_of_fit(caplog: pytest.LogCaptureFixture) -> None:
    algorithm = _Diagnosing()
    trainer = Trainer(algorithm=algorithm, n_runners=1, strategy="shm", progress=False)
    with caplog.at_level(logging.WARNING, logger="agl.runner.trainer"):
        trainer.fit(never_asks, train_dataset=["a", "b"])
    assert algorithm.tally.rollouts == 2
    assert "2 of 2 rollouts gave no training data: 2 made no LLM call" in caplog.text
    assert NoDataReason.NO_LLM_CALL.fix in caplog.text
    # each such rollout carries its reason in the store, for the dashboard's rollout page
    noted = {"reason": NoDataReason.NO_LLM_CALL.value, "fix": NoDataReason.NO_LLM_CALL.fix}
    assert algorithm.marked == [{NO_TRAINING_DATA: noted}] * 2
