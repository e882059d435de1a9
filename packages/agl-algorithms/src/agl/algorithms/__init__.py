"""Algorithms for agl: the ``Algorithm`` contract, ``@algo``, ``Baseline``; adapters, APO and RL backends.

Importing this package stays light (no torch, no LiteLLM): heavy algorithms live in their own modules.
"""

from typing import TYPE_CHECKING

from agl.types.lazy import lazy_exports

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


# APO, VERL and the local backend (the ``local`` extra: torch, transformers) are exported lazily, so importing
# agl.algorithms never pulls in their extras; adapters are light, but load only when asked for.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "APO": ".apo",
        "VERL": ".verl",  # constructs without the ``verl`` extra; run() says what to install
        **dict.fromkeys(("GRPOConfig", "LocalGRPO", "ModelServer"), ".local"),
        **dict.fromkeys(
            (
                "Adapter",
                "LlmProxyTraceToTriplet",
                "TraceAdapter",
                "TraceToMessages",
                "TraceToTripletBase",
                "TracerTraceToTriplet",
            ),
            ".adapter",
        ),
    },
    globals(),
)
