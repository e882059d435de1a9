"""Algorithms for agl: the ``Algorithm`` contract, ``@algo``, ``Baseline``; adapters, APO and RL backends.

Importing this package stays light (no torch, no LiteLLM): heavy algorithms live in their own modules.
"""

from typing import TYPE_CHECKING, Any

from .base import Algorithm, SupportsAdapt, SupportsLLMProxy
from .decorator import FunctionalAlgorithm, algo
from .fast import FINAL_REWARD_METADATA_KEY, Baseline, BaselineSummary, FastAlgorithm
from .utils import batch_iter_over_dataset, running_proxy, with_llm_proxy, with_store

if TYPE_CHECKING:
    from .adapter import (
        Adapter,
        LlmProxyTraceToTriplet,
        TraceAdapter,
        TracerTraceToTriplet,
        TraceToMessages,
        TraceToTripletBase,
    )
    from .apo import APO
    from .local import GRPOConfig, LocalGRPO, ModelServer
    from .verl import VERL

__version__ = "0.1.0"

__all__ = [
    "APO",
    "FINAL_REWARD_METADATA_KEY",
    "VERL",
    "Adapter",
    "Algorithm",
    "Baseline",
    "BaselineSummary",
    "FastAlgorithm",
    "FunctionalAlgorithm",
    "GRPOConfig",
    "LlmProxyTraceToTriplet",
    "LocalGRPO",
    "ModelServer",
    "SupportsAdapt",
    "SupportsLLMProxy",
    "TraceAdapter",
    "TraceToMessages",
    "TraceToTripletBase",
    "TracerTraceToTriplet",
    "algo",
    "batch_iter_over_dataset",
    "running_proxy",
    "with_llm_proxy",
    "with_store",
]


_ADAPTERS = frozenset(
    {
        "Adapter",
        "LlmProxyTraceToTriplet",
        "TraceAdapter",
        "TraceToMessages",
        "TraceToTripletBase",
        "TracerTraceToTriplet",
    }
)

_LOCAL = frozenset({"GRPOConfig", "LocalGRPO", "ModelServer"})


def __getattr__(name: str) -> Any:
    # APO and the local backend are exported lazily: importing agl.algorithms never pulls in their extras.
    if name == "APO":
        from .apo import APO

        return APO
    if name == "VERL":  # constructs without the ``verl`` extra; run() says what to install
        from .verl import VERL

        return VERL
    if name in _LOCAL:  # needs the ``local`` extra (torch, transformers)
        from . import local

        return getattr(local, name)
    if name in _ADAPTERS:  # adapters are light, but load only when asked for
        from . import adapter

        return getattr(adapter, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
