"""The local RL backend: an OpenAI-compatible server for a Hugging Face causal LM and a GRPO trainer.

Needs the ``local`` extra (torch, transformers). Names are imported lazily, so ``import
agl.algorithms.local`` itself stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.types.lazy import lazy_exports

if TYPE_CHECKING:
    from ._serving import ServedModel
    from .engine import GenerationEngine, GenerationResult, SamplingParams
    from .grpo import GRPOConfig, LocalGRPO
    from .server import ModelServer, load_model
    from .server_process import ModelServerProcess

__all__ = [
    "GRPOConfig",
    "GenerationEngine",
    "GenerationResult",
    "LocalGRPO",
    "ModelServer",
    "ModelServerProcess",
    "SamplingParams",
    "ServedModel",
    "load_model",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "GenerationEngine": ".engine",
        "GenerationResult": ".engine",
        "SamplingParams": ".engine",
        "GRPOConfig": ".grpo",
        "LocalGRPO": ".grpo",
        "ModelServer": ".server",
        "ModelServerProcess": ".server_process",
        "load_model": ".server",
        "ServedModel": "._serving",
    },
    globals(),
)
