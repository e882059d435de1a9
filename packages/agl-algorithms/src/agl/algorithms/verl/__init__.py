"""``agl.algorithms.verl``: the VERL/vLLM GPU path (extra ``verl``), on verl 0.9's V1 trainer.

``VERL`` and the pure pieces (config defaults, conversion, dataset writer) import without verl; the
agent loop (``bridge``) and the trainer (``trainer``) import verl when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.types.lazy import lazy_exports

if TYPE_CHECKING:
    from .bridge import AglAgentLoopOutput, AglBridgeAgentLoop
    from .convert import ConversionStats, LoopSample, convert_rollout, turns_from_triplets
    from .dataset import read_task, write_tasks
    from .interface import VERL, check_requirements
    from .runtime import AglRuntime, BackendPublisher, get_runtime, set_runtime
    from .trainer import AglPPOTrainerSync, credit_advantages

__all__ = [
    "VERL",
    "AglAgentLoopOutput",
    "AglBridgeAgentLoop",
    "AglPPOTrainerSync",
    "AglRuntime",
    "BackendPublisher",
    "ConversionStats",
    "LoopSample",
    "check_requirements",
    "convert_rollout",
    "credit_advantages",
    "get_runtime",
    "read_task",
    "set_runtime",
    "turns_from_triplets",
    "write_tasks",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "VERL": ".interface",
        "check_requirements": ".interface",
        "AglAgentLoopOutput": ".bridge",
        "AglBridgeAgentLoop": ".bridge",
        "AglPPOTrainerSync": ".trainer",
        "credit_advantages": ".trainer",
        "AglRuntime": ".runtime",
        "BackendPublisher": ".runtime",
        "get_runtime": ".runtime",
        "set_runtime": ".runtime",
        "ConversionStats": ".convert",
        "LoopSample": ".convert",
        "convert_rollout": ".convert",
        "turns_from_triplets": ".convert",
        "read_task": ".dataset",
        "write_tasks": ".dataset",
    },
    globals(),
)
