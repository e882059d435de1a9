"""The VERL bridge end to end without Ray: verl's agent loop (``AglBridgeAgentLoop``) enqueues store
rollouts that a real runner executes with the calc agent, whose LLM calls go through our LLM proxy to our
local ``ModelServer`` standing in for a vLLM replica (both are OpenAI endpoints returning token ids). The
loop's outputs must carry exactly the token ids the model server generated. Also: the trainer hook, given
fake verl server addresses, points the proxy at them and publishes ``main_llm``."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "apps" / "calc_tiny" / "model"


class Recorder:
    """Wraps the model server's engine.submit to keep every (prompt ids, generated ids) it produced."""

    def __init__(self, engine: Any) -> None:
        self.calls: list[tuple[list[int], list[int]]] = []
        self._submit = engine.submit
        engine.submit = self.submit

    def submit(self, prompt_ids: list[int], params: Any, **kwargs: Any) -> Any:
        future = self._submit(prompt_ids, params, **kwargs)
        future.add_done_callback(lambda f: self.calls.append((list(prompt_ids), list(f.result().token_ids))))
        return future


def bridge_loop(config: Any) -> Any:
    from agl.algorithms.verl.bridge import AglBridgeAgentLoop
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    return AglBridgeAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=None,  # pyright: ignore[reportArgumentType]  (the bridge never calls verl's client)
        tokenizer=AutoTokenizer.from_pretrained(MODEL),
        processor=None,  # pyright: ignore[reportArgumentType]
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
    )


async def _shut_down(stop: Any, publisher: Any, server: Any) -> None:
    """Stop the runner, forget the bridge's runtime, close the proxy publisher and the model server."""
    from agl.algorithms.verl.runtime import set_runtime

    stop.set()
    set_runtime(None)
    await publisher.close()
    await asyncio.to_thread(server.stop)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["transition", "trajectory"])
async def test_bridge_loop_returns_the_token_ids_the_server_generated(tmp_path: Path, level: str) -> None:
    from agl.algorithms.local import ModelServer
    from agl.algorithms.verl.bridge import BRIDGE_STATS
    from agl.algorithms.verl.config import compose_config
    from agl.algorithms.verl.dataset import write_tasks
    from agl.algorithms.verl.runtime import AglRuntime, BackendPublisher, set_runtime
    from agl.runner import LitAgentRunner
    from agl.store import InMemoryLightningStore
    from agl.tracer import OtelTracer
    from calc_x.agent import calc_agent
    from verl.utils.dataset.rl_dataset import RLHFDataset

    store = InMemoryLightningStore()
    tasks = [{"question": "What is 19 + 17?", "result": 36}, {"question": "What is 7 * 6?", "result": 42}]
    path = write_tasks(tasks, tmp_path / "train.parquet", "train")
    config = compose_config(
        {
            "actor_rollout_ref": {"model": {"path": str(MODEL)}},
            "data": {"train_files": str(path), "max_prompt_length": 400, "max_response_length": 300},
            "agentlightning": {"trace_aggregator": {"level": level}, "rollout_timeout_seconds": 120},
        }
    )
    server = ModelServer(MODEL, served_model_name="calc-tiny")
    await asyncio.to_thread(server.start)
    recorder = Recorder(server.engine)
    publisher = BackendPublisher(store, sampling={"temperature": 1.0, "max_tokens": 48})
    set_runtime(AglRuntime(store=store, publisher=publisher))
    runner = LitAgentRunner(OtelTracer(), concurrency=4, heartbeat_interval=5.0)
    stop = threading.Event()
    try:
        # what the trainer hook does with verl's addresses: the server's "host:port"
        await publisher.set_backends([server.url.removeprefix("http://").removesuffix("/v1")], "calc-tiny")
        await publisher.publish()
        dataset = RLHFDataset(str(path), server.tokenizer, config.data)
        loop = bridge_loop(config)
        before = BRIDGE_STATS.rollouts
        with runner.run_context(agent=calc_agent, store=store):
            runner_task = asyncio.create_task(runner.iter(event=stop))
            rows = [dict(dataset[i]) for i in range(len(dataset))]
            results = await asyncio.wait_for(
                asyncio.gather(
                    *(
                        loop.run({}, **row, uid=f"u{i}", session_id=s, global_steps=1)
                        for i, row in enumerate(rows)
                        for s in range(2)
                    )
                ),
                timeout=240,
            )
            stop.set()
            await asyncio.wait_for(runner_task, timeout=30)
    finally:
        await _shut_down(stop, publisher, server)

    assert BRIDGE_STATS.rollouts - before == 4
    calls = {(tuple(p), tuple(r)) for p, r in recorder.calls}
    outputs = [o for result in results for o in result]
    assert outputs, "no sample came back"
    for result in results:
        for out in result:
            mask = out.response_mask
            assert len(mask) == len(out.response_ids) == len(out.token_returns or [])
            if level == "transition":
                assert set(mask) == {1}
            # every run of generated tokens is exactly what the server generated for the tokens before it
            full = out.prompt_ids + out.response_ids
            offset = len(out.prompt_ids)
            runs, start = [], None
            for j, m in enumerate([*mask, 0]):
                if m and start is None:
                    start = j
                elif not m and start is not None:
                    runs.append((start, j))
                    start = None
            assert runs
            for a, b in runs:
                assert (tuple(full[: offset + a]), tuple(full[offset + a : offset + b])) in calls
            if level == "trajectory":
                assert len(result) == 1  # the calc agent's turns extend each other: one merged sample
            assert out.reward_score in (0.0, 1.0)
            assert out.extra_fields["agl_rollout_id"].startswith("ro-")
    rollouts = (await store.query_rollouts()).items
    assert {r.status for r in rollouts} == {"succeeded"}
    assert all(r.metadata is not None for r in rollouts)
    assert {r.metadata["data_id"] for r in rollouts if r.metadata is not None} == {"u0", "u1"}


async def test_trainer_hook_publishes_proxy_backends_and_main_llm() -> None:
    from agl.algorithms.verl.config import compose_config
    from agl.algorithms.verl.runtime import AglRuntime, BackendPublisher, set_runtime
    from agl.algorithms.verl.trainer import AglPPOTrainerSync
    from agl.store import InMemoryLightningStore
    from agl.types import ProxyLLM

    class FakeServers:
        def get_addresses(self) -> list[str]:
            return ["10.0.0.5:8000", "10.0.0.6:8001"]

    class FakeCheckpoints:
        def __init__(self) -> None:
            self.updates: list[int] = []

        def update_weights(self, step: int) -> None:
            self.updates.append(step)

    store = InMemoryLightningStore()
    publisher = BackendPublisher(store)
    set_runtime(AglRuntime(store=store, publisher=publisher))
    trainer = AglPPOTrainerSync.__new__(AglPPOTrainerSync)  # verl's __init__ builds Ray worker groups
    trainer.config = compose_config(
        {
            "actor_rollout_ref": {"model": {"path": "/models/qwen"}, "rollout": {"temperature": 0.7}},
            "data": {"max_response_length": 96},
        }
    )
    trainer.llm_server_manager = FakeServers()  # pyright: ignore[reportAttributeAccessIssue]
    trainer.checkpoint_manager = FakeCheckpoints()  # pyright: ignore[reportAttributeAccessIssue]
    trainer.global_steps = 0
    try:
        await asyncio.to_thread(trainer.on_init_end)
        assert trainer.checkpoint_manager.updates == [0]  # pyright: ignore[reportAttributeAccessIssue]  (verl's sync first)
        proxy = publisher.proxy
        assert proxy is not None and proxy.is_running()
        assert proxy.model_list == [
            {
                "model_name": "/models/qwen",
                "litellm_params": {"model": "hosted_vllm//models/qwen", "api_base": f"http://{a}/v1"},
            }
            for a in ["10.0.0.5:8000", "10.0.0.6:8001"]
        ]
        latest = await store.get_latest_resources()
        assert latest is not None
        llm = latest.resources["main_llm"]
        assert isinstance(llm, ProxyLLM)
        assert llm.model == "/models/qwen" and llm.endpoint == f"{proxy.endpoint}/v1"
        assert llm.sampling_parameters == {"temperature": 0.7, "max_tokens": 96}
        await asyncio.to_thread(trainer.on_validate_begin)
        val = await store.get_latest_resources()
        assert val is not None and isinstance(val.resources["main_llm"], ProxyLLM)
        assert val.resources["main_llm"].sampling_parameters["temperature"] == 0.0
        await asyncio.to_thread(trainer.on_validate_end)
        again = await store.get_latest_resources()
        assert again is not None and isinstance(again.resources["main_llm"], ProxyLLM)
        assert again.resources["main_llm"].sampling_parameters["temperature"] == 0.7
        assert len(publisher.published) == 3
    finally:
        set_runtime(None)
        from agl.algorithms.verl.runtime import run_sync

        run_sync(publisher.close())


@pytest.mark.slow
async def test_rewards_emitted_after_each_turn_become_per_turn_credit(tmp_path: Path) -> None:
    """An agent that emits a reward after each of its two LLM calls: with ``credit.mode=per-turn`` the
    bridge's samples carry the rewards still to come (1.25 then 1.0); with ``final`` both get 1.0."""
    from agl.algorithms.local import ModelServer
    from agl.algorithms.verl.config import compose_config
    from agl.algorithms.verl.dataset import write_tasks
    from agl.algorithms.verl.runtime import AglRuntime, BackendPublisher, set_runtime
    from agl.runner import LitAgentRunner, rollout
    from agl.store import InMemoryLightningStore
    from agl.tracer import OtelTracer, emit_reward
    from agl.types import LLM
    from openai import AsyncOpenAI
    from verl.utils.dataset.rl_dataset import RLHFDataset

    @rollout
    async def two_turns(task: dict[str, Any], llm: LLM) -> None:
        async with AsyncOpenAI(base_url=llm.get_base_url(), api_key="unused") as client:
            for reward in (0.25, 1.0):
                await client.chat.completions.create(
                    model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=4
                )
                emit_reward(reward)

    store = InMemoryLightningStore()
    path = write_tasks([{"question": "What is 2 + 2?"}], tmp_path / "train.parquet", "train")
    server = ModelServer(MODEL, served_model_name="calc-tiny")
    await asyncio.to_thread(server.start)
    publisher = BackendPublisher(store, sampling={"temperature": 1.0, "max_tokens": 4})
    set_runtime(AglRuntime(store=store, publisher=publisher))
    runner = LitAgentRunner(OtelTracer(), concurrency=2, heartbeat_interval=5.0)
    stop = threading.Event()
    returns: dict[str, list[list[float]]] = {}
    try:
        await publisher.set_backends([server.url], "calc-tiny")
        await publisher.publish()
        with runner.run_context(agent=two_turns, store=store):
            runner_task = asyncio.create_task(runner.iter(event=stop))
            for mode in ("per-turn", "final"):
                config = compose_config(
                    {
                        "actor_rollout_ref": {"model": {"path": str(MODEL)}},
                        "data": {"train_files": str(path)},
                        "agentlightning": {"credit": {"mode": mode}, "rollout_timeout_seconds": 120},
                    }
                )
                row = dict(RLHFDataset(str(path), server.tokenizer, config.data)[0])
                outputs = await asyncio.wait_for(
                    bridge_loop(config).run({}, **row, uid="u0", session_id=0, global_steps=1), timeout=120
                )
                returns[mode] = [sorted(set(o.token_returns or [])) for o in outputs]
                assert {o.reward_score for o in outputs} == {1.0}  # the final reward
            stop.set()
            await asyncio.wait_for(runner_task, timeout=30)
    finally:
        await _shut_down(stop, publisher, server)
    assert returns["per-turn"] == [[1.25], [1.0]]
    assert returns["final"] == [[1.0], [1.0]]
