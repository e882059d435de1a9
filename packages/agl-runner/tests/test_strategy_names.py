"""A strategy chosen by name: the short aliases and the reference system's names build the same strategies."""

from __future__ import annotations

import asyncio

import pytest
from agl.algorithms import Baseline
from agl.runner import ClientServerExecutionStrategy, LitAgent, SharedMemoryExecutionStrategy, Trainer
from agl.runner.strategies import STRATEGY_REGISTRY
from agl.store import InMemoryLightningStore
from agl.types import NamedResources, Rollout

NAMES = [
    ("cs", ClientServerExecutionStrategy),
    ("client_server", ClientServerExecutionStrategy),
    ("shm", SharedMemoryExecutionStrategy),
    ("shared_memory", SharedMemoryExecutionStrategy),
]


@pytest.mark.parametrize(("name", "cls"), NAMES)
def test_a_strategy_name_builds_its_strategy(name: str, cls: type[object]) -> None:
    trainer = Trainer(strategy=name, n_runners=2, progress=False)
    assert type(trainer.strategy) is cls
    assert trainer.strategy.n_runners == 2


@pytest.mark.parametrize(("name", "cls"), NAMES)
def test_a_config_dict_names_its_strategy(name: str, cls: type[object]) -> None:
    by_type = Trainer(strategy={"type": name, "n_runners": 3}, progress=False)
    by_name = Trainer(strategy={"name": name, "n_runners": 3}, progress=False)
    for trainer in (by_type, by_name):
        assert type(trainer.strategy) is cls
        assert trainer.strategy.n_runners == 3


def test_the_reference_names_and_the_aliases_name_the_same_classes() -> None:
    assert STRATEGY_REGISTRY["client_server"] == STRATEGY_REGISTRY["cs"]
    assert STRATEGY_REGISTRY["shared_memory"] == STRATEGY_REGISTRY["shm"]


def test_the_import_paths_of_the_registry_name_the_public_modules() -> None:
    assert STRATEGY_REGISTRY["cs"] == "agl.runner.strategies.client_server.ClientServerExecutionStrategy"
    assert STRATEGY_REGISTRY["shm"] == "agl.runner.strategies.shared_memory.SharedMemoryExecutionStrategy"
    trainer = Trainer(strategy=STRATEGY_REGISTRY["cs"], progress=False)
    assert isinstance(trainer.strategy, ClientServerExecutionStrategy)


def test_an_unknown_strategy_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known aliases: client_server, cs, shared_memory, shm"):
        Trainer(strategy="threads", progress=False)


class Double(LitAgent[int]):
    def rollout(self, task: int, resources: NamedResources, rollout: Rollout) -> float:
        return float(task * 2)


def test_a_run_under_a_reference_name_finishes() -> None:
    store = InMemoryLightningStore()
    Trainer(algorithm=Baseline(), strategy="shared_memory", store=store, progress=False).dev(Double(), [1, 2])
    rollouts = asyncio.run(store.query_rollouts())
    assert sorted(r.status for r in rollouts) == ["succeeded", "succeeded"]
