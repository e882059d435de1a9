"""Runners, agents and the Trainer of agl.

Write an agent as a :class:`LitAgent` subclass or a function decorated with :func:`rollout`, then run it with
:class:`Trainer` (``fit`` or ``dev``) or one rollout at a time with :class:`LitAgentRunner`.

Where things live:

- ``litagent``, ``decorators``: the agent (:class:`LitAgent`, :func:`rollout` and its variants);
- ``runner``: :class:`Runner` and :class:`LitAgentRunner` (claim, run, report); its heartbeat is in
  ``_heartbeat``, sync agents' threads in ``_agent_call``;
- ``strategies``: where the algorithm and the runners run: ``shared_memory`` (alias ``shm``, threads) and
  ``client_server`` (alias ``cs``, processes around a store server);
- ``trainer``: :class:`Trainer`, which wires it all; ``build``: :func:`build_component`, how a component given
  by name, class or dict is made;
- ``hooks``, ``progress``, ``errors``, ``events``: hooks around a rollout, the progress display, the
  exceptions, the stop signal; the ``AGL_*`` variables are :mod:`agl.types.env`'s; ``cli``: ``agl runner``.
"""

from agl.types.env import LightningEnvVar, resolve_bool_env_var, resolve_int_env_var, resolve_str_env_var

from .build import build_component, load_object
from .decorators import FunctionalLitAgent, llm_rollout, prompt_rollout, rollout
from .errors import AgentCancelled, AttemptEnded
from .events import ExecutionEvent
from .hooks import Hook
from .litagent import LitAgent, RolloutRawResult
from .progress import ProgressMonitor, ProgressSnapshot
from .runner import LitAgentRunner, Runner
from .strategies import (
    ClientServerExecutionStrategy,
    ExecutionStrategy,
    LostRunner,
    SharedMemoryExecutionStrategy,
    StrategyError,
)
from .trainer import Trainer

__version__ = "0.1.0"

__all__ = [
    "AgentCancelled",
    "AttemptEnded",
    "ClientServerExecutionStrategy",
    "ExecutionEvent",
    "ExecutionStrategy",
    "FunctionalLitAgent",
    "Hook",
    "LightningEnvVar",
    "LitAgent",
    "LitAgentRunner",
    "LostRunner",
    "ProgressMonitor",
    "ProgressSnapshot",
    "RolloutRawResult",
    "Runner",
    "SharedMemoryExecutionStrategy",
    "StrategyError",
    "Trainer",
    "build_component",
    "llm_rollout",
    "load_object",
    "prompt_rollout",
    "resolve_bool_env_var",
    "resolve_int_env_var",
    "resolve_str_env_var",
    "rollout",
]
