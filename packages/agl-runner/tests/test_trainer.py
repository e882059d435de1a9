"""Trainer construction: component specs, defaults, environment; dev(); light imports."""

from __future__ import annotations

from typing import Any

import pytest
from agl.algorithms import Algorithm, Baseline, algo
from agl.runner import (
    ClientServerExecutionStrategy,
    Hook,
    LitAgentRunner,
    SharedMemoryExecutionStrategy,
    Trainer,
    rollout,
)
from agl.store import InMemoryLightningStore
from agl.testing.child import run_python
from agl.tracer import OtelTracer
from agl.types import LLM


@rollout
def agent(task: int, llm: LLM) -> float:
    return float(task)


def test_defaults_and_specs() -> None:
    trainer = Trainer(n_runners=3, progress=False)
    assert isinstance(trainer.strategy, ClientServerExecutionStrategy) and trainer.strategy.n_runners == 3
    assert isinstance(trainer.store, InMemoryLightningStore)
    assert isinstance(trainer.tracer, OtelTracer)
    assert isinstance(trainer.runner, LitAgentRunner) and trainer.runner.tracer is trainer.tracer
    assert trainer.algorithm is None and trainer.hooks == ()

    trainer = Trainer(
        strategy={"type": "shm", "n_runners": 2},
        store="agl.store.InMemoryLightningStore",
        tracer="otel",
        algorithm={"type": "agl.algorithms.Baseline", "n_epochs": 2},
        runner={"type": "agl.runner.LitAgentRunner", "poll_interval": 0.2},
        hooks=Hook(),
        max_rollouts=5,
    )
    assert isinstance(trainer.strategy, SharedMemoryExecutionStrategy) and trainer.n_runners == 2
    assert isinstance(trainer.algorithm, Baseline) and trainer.algorithm.n_epochs == 2
    runner: Any = trainer.runner
    assert runner.poll_interval == 0.2 and runner.max_rollouts == 5 and runner.tracer is trainer.tracer
    assert len(trainer.hooks) == 1

    strategy = ClientServerExecutionStrategy(n_runners=4)
    trainer = Trainer(strategy=strategy, port=5123, n_runners=1)
    assert trainer.strategy is strategy and strategy.server_port == 5123 and trainer.n_runners == 4


def test_bad_specs_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="strategy"):
        Trainer(strategy="nonsense")
    with pytest.raises(TypeError, match="algorithm must be a Algorithm"):
        Trainer(algorithm=lambda: 3)  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match="Hook"):
        Trainer(hooks=[object()])  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match="n_runners"):
        Trainer(n_runners=0)
    with pytest.raises(TypeError, match="LitAgent"):
        Trainer(strategy="shm").fit(lambda task: None)  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match="string"):
        Trainer(strategy="shm").fit(agent, "http://127.0.0.1:9999")  # type: ignore[arg-type]


def test_unmanaged_runner_role_connects_to_the_configured_store(monkeypatch: pytest.MonkeyPatch) -> None:
    from agl.store.client import LightningStoreClient

    monkeypatch.setenv("AGL_CURRENT_ROLE", "runner")
    monkeypatch.setenv("AGL_MANAGED_STORE", "0")
    monkeypatch.setenv("AGL_SERVER_PORT", "4999")
    trainer = Trainer()
    assert isinstance(trainer.store, LightningStoreClient)
    assert trainer.store.address == "http://127.0.0.1:4999"


def test_dev_runs_baseline_and_rejects_slow_algorithms() -> None:
    store = InMemoryLightningStore()
    trainer = Trainer(
        strategy="shm",
        n_runners=2,
        store=store,
        initial_resources={"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="m")},
        progress=False,
    )
    trainer.dev(agent, [1, 2, 3])
    assert {r.status for r in __import__("asyncio").run(store.query_rollouts())} == {"succeeded"}

    @algo
    def slow() -> None: ...

    with pytest.raises(TypeError, match="FastAlgorithm"):
        Trainer(algorithm=slow, strategy="shm").dev(agent, [1])
    assert isinstance(slow, Algorithm)


def test_import_is_light() -> None:
    code = (
        "import sys, agl.runner, agl.algorithms\n"
        "heavy = ('litellm', 'torch', 'transformers', 'fastapi', 'uvicorn', 'aiohttp', 'rich', 'openai', 'sqlalchemy')\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    assert run_python(code).strip() == "[]"
