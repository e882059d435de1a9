"""Execution strategies: where the algorithm and the runners run, and how they are stopped together."""

from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle, StrategyError
from .cs import ClientServerExecutionStrategy, LostRunner
from .shm import SharedMemoryExecutionStrategy

STRATEGY_REGISTRY: dict[str, str] = {
    "shm": "agl.runner.strategies.shm.SharedMemoryExecutionStrategy",
    "cs": "agl.runner.strategies.cs.ClientServerExecutionStrategy",
}
"""Aliases accepted wherever a strategy can be named (``Trainer(strategy="cs")``)."""

__all__ = [
    "STRATEGY_REGISTRY",
    "AlgorithmBundle",
    "ClientServerExecutionStrategy",
    "ExecutionStrategy",
    "LostRunner",
    "RunnerBundle",
    "SharedMemoryExecutionStrategy",
    "StrategyError",
]
