"""Execution strategies: where the algorithm and the runners run, and how they are stopped together."""

from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle, StrategyError
from .client_server import ClientServerExecutionStrategy, LostRunner
from .shared_memory import SharedMemoryExecutionStrategy

STRATEGY_REGISTRY: dict[str, str] = {
    "shm": "agl.runner.strategies.shared_memory.SharedMemoryExecutionStrategy",
    "shared_memory": "agl.runner.strategies.shared_memory.SharedMemoryExecutionStrategy",
    "cs": "agl.runner.strategies.client_server.ClientServerExecutionStrategy",
    "client_server": "agl.runner.strategies.client_server.ClientServerExecutionStrategy",
}
"""Names accepted wherever a strategy is chosen by name (``Trainer(strategy="cs")``, a config dict's ``type``):
the short aliases ``cs``/``shm`` and the reference system's ``client_server``/``shared_memory``."""

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
