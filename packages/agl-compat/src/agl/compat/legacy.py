"""Placeholders for the reference's names that have no equivalent here (mostly its v0.1 API).

Each can be imported (so ``from agl.compat import *`` and old import lines work) and raises ``NotImplementedError``
naming what to use instead as soon as it is used: called, instantiated or subclassed.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ._names import LEGACY

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

REPLACEMENTS = LEGACY
"""Legacy name -> what to use instead (the placeholder's error message): :data:`agl.compat._names.LEGACY`."""


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
