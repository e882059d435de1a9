"""The reference Trainer's older keywords: ``n_workers``, ``max_tasks``, ``triplet_exporter``, ``dev``, ``daemon``,
and an ``llm_proxy`` dict without ``type``. Each deprecated spelling warns with the new one and keeps its meaning.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from agl.algorithms import TracerTraceToTriplet
from agl.proxy import LLMProxy
from agl.runner import SharedMemoryExecutionStrategy, Trainer


def test_n_workers_is_n_runners_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="n_workers.*n_runners") as caught:
        trainer = Trainer(n_workers=3, strategy="shm", progress=False)
    assert len(caught) == 1
    assert trainer.n_runners == 3 and trainer.strategy.n_runners == 3
    assert isinstance(trainer.strategy, SharedMemoryExecutionStrategy)


def test_n_runners_wins_over_a_different_n_workers() -> None:
    with pytest.warns(DeprecationWarning, match="n_workers.*ignored"):
        trainer = Trainer(n_runners=2, n_workers=5, strategy="shm", progress=False)
    assert trainer.n_runners == 2


def test_max_tasks_is_max_rollouts_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="max_tasks.*max_rollouts"):
        trainer = Trainer(max_tasks=4, strategy="shm", progress=False)
    runner: Any = trainer.runner
    assert trainer.max_rollouts == 4 and runner.max_rollouts == 4
    with pytest.warns(DeprecationWarning, match="max_tasks.*ignored"):
        trainer = Trainer(max_tasks=4, max_rollouts=2, strategy="shm", progress=False)
    assert trainer.max_rollouts == 2


def test_triplet_exporter_is_the_adapter_with_a_warning() -> None:
    exporter = TracerTraceToTriplet()
    with pytest.warns(DeprecationWarning, match="triplet_exporter.*adapter"):
        trainer = Trainer(triplet_exporter=exporter, strategy="shm", progress=False)
    assert trainer.adapter is exporter
    other = TracerTraceToTriplet()
    with pytest.warns(DeprecationWarning, match="triplet_exporter.*ignored"):
        trainer = Trainer(adapter=other, triplet_exporter=exporter, strategy="shm", progress=False)
    assert trainer.adapter is other


def test_dev_true_warns_that_trainer_dev_is_the_way() -> None:
    with pytest.warns(DeprecationWarning, match=r"Trainer\.dev"):
        Trainer(dev=True, strategy="shm", progress=False)


def test_daemon_true_is_what_happens_anyway_and_false_says_it_has_no_effect() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Trainer(daemon=True, strategy="shm", progress=False).daemon is True
    with pytest.warns(UserWarning, match="daemon=False"):
        trainer = Trainer(daemon=False, strategy="shm", progress=False)
    assert trainer.daemon is False


def test_new_spellings_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer = Trainer(n_runners=2, max_rollouts=3, strategy="shm", progress=False)
    assert trainer.n_runners == 2 and trainer.max_rollouts == 3


def test_an_llm_proxy_dict_without_type_builds_an_llm_proxy_on_the_trainers_store() -> None:
    models = [
        {"model_name": "m", "litellm_params": {"model": "hosted_vllm/m", "api_base": "http://127.0.0.1:1/v1"}}
    ]
    trainer = Trainer(llm_proxy={"port": 0, "model_list": models}, strategy="shm", progress=False)
    proxy = trainer.llm_proxy
    assert isinstance(proxy, LLMProxy)
    assert proxy.model_list == models and proxy.store is trainer.store
