"""Placeholders for the reference's names that have no equivalent here (mostly its v0.1 API).

Each can be imported (so ``from agl.compat import *`` and old import lines work) and raises ``NotImplementedError``
naming what to use instead as soon as it is used: called, instantiated or subclassed.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = [
    "REPLACEMENTS",
    "AgentLightningClient",
    "AgentLightningServer",
    "CollectionBasedLightningStore",
    "DevTaskLoader",
    "GenericResponse",
    "LegacyAgentRunner",
    "OtelTraceAdapter",
    "RolloutLegacy",
    "RolloutRawResultLegacy",
    "Task",
    "TaskIfAny",
    "lightning_cli",
]

_V01 = "the v0.1 server/client API is not rebuilt"
REPLACEMENTS: dict[str, str] = {
    "AgentLightningClient": f"{_V01}; runners talk to a LightningStoreClient (Trainer(store='http://...'))",
    "AgentLightningServer": f"{_V01}; serve a store with `agl store` or LightningStoreServer",
    "DevTaskLoader": f"{_V01}; run Trainer.dev(agent, train_dataset=[...]) on a list of tasks",
    "LegacyAgentRunner": f"{_V01}; use LitAgentRunner",
    "GenericResponse": f"{_V01}; the store's methods return typed results",
    "Task": f"{_V01}; rollouts are Rollout (its task is rollout.input)",
    "TaskIfAny": f"{_V01}; LightningStore.dequeue_rollout() returns an AttemptedRollout or None",
    "RolloutLegacy": f"{_V01}; use Rollout and the store's spans",
    "RolloutRawResultLegacy": f"{_V01}; use RolloutRawResult",
    "CollectionBasedLightningStore": "there are no collection-based stores; use InMemoryLightningStore or "
    "agl.store.SqlLightningStore (SQLite, PostgreSQL)",
    "OtelTraceAdapter": "adapters here take agl Spans: derive from TraceAdapter",
    "lightning_cli": "the config CLI helper is not rebuilt; use argparse (or jsonargparse) and pass the values "
    "to the constructors",
}
"""Legacy name -> what to use instead (the placeholder's error message)."""


def _removed(name: str) -> NoReturn:
    raise NotImplementedError(f"agentlightning.{name} has no equivalent in agl: {REPLACEMENTS[name]}")


class _Placeholder:
    """A reference class without an equivalent: using it raises ``NotImplementedError`` saying what to use."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _removed(type(self).__name__)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        placeholder = next(c for c in cls.__mro__ if c.__bases__ == (_Placeholder,))
        if cls is not placeholder:
            _removed(placeholder.__name__)


class AgentLightningClient(_Placeholder):
    """Placeholder: the v0.1 client. See :data:`REPLACEMENTS`."""


class AgentLightningServer(_Placeholder):
    """Placeholder: the v0.1 server. See :data:`REPLACEMENTS`."""


class DevTaskLoader(_Placeholder):
    """Placeholder: the v0.1 dev task loader. See :data:`REPLACEMENTS`."""


class LegacyAgentRunner(_Placeholder):
    """Placeholder: the v0.1 runner. See :data:`REPLACEMENTS`."""


class GenericResponse(_Placeholder):
    """Placeholder: the v0.1 server's response model. See :data:`REPLACEMENTS`."""


class Task(_Placeholder):
    """Placeholder: the v0.1 task model. See :data:`REPLACEMENTS`."""


class TaskIfAny(_Placeholder):
    """Placeholder: the v0.1 task poll result. See :data:`REPLACEMENTS`."""


class RolloutLegacy(_Placeholder):
    """Placeholder: the v0.1 rollout model. See :data:`REPLACEMENTS`."""


class RolloutRawResultLegacy(_Placeholder):
    """Placeholder: the v0.1 rollout result. See :data:`REPLACEMENTS`."""


class CollectionBasedLightningStore(_Placeholder):
    """Placeholder: the reference's collection-based store. See :data:`REPLACEMENTS`."""


class OtelTraceAdapter(_Placeholder):
    """Placeholder: the reference's adapter over OpenTelemetry spans. See :data:`REPLACEMENTS`."""


def lightning_cli(*args: Any, **kwargs: Any) -> NoReturn:
    """Placeholder: the reference's configuration CLI helper. See :data:`REPLACEMENTS`."""
    _removed("lightning_cli")
