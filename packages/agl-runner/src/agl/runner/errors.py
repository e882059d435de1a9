"""Exceptions of agl.runner that an agent or a caller of ``Runner.step`` may see.

:class:`~agl.runner.StrategyError` (a runner or the algorithm failed) lives with the strategies, in
:mod:`agl.runner.strategies.base`.
"""

from __future__ import annotations

from agl.types import AglError

__all__ = ["AgentCancelled", "AttemptEnded"]


class AgentCancelled(AglError):
    """Raised inside a sync agent's thread after the runner abandoned it (the store ended its attempt).

    An agent may catch it to clean up; it should then return (or re-raise) promptly.
    """


class AttemptEnded(AglError):
    """The store ended the attempt (timeout, unresponsive, superseded, rollout cancelled) while the agent ran.

    ``status`` is the attempt status the store gave (``None`` when the rollout, not the attempt, ended).
    :meth:`LitAgentRunner.step <agl.runner.LitAgentRunner.step>` raises it; :meth:`~agl.runner.Runner.iter`
    records it in the attempt's metadata (``error.type == "AttemptEnded"``) and goes on.
    """

    def __init__(self, reason: str, status: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
