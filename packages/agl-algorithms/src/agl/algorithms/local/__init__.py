"""The local RL backend: an OpenAI-compatible server for a Hugging Face causal LM and a GRPO trainer.

Needs the ``local`` extra (torch, transformers). Names are imported lazily, so ``import
agl.algorithms.local`` itself stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.types.lazy import lazy_exports

if TYPE_CHECKING:
    from ._serving import ServedModel
    from .config import GRPOConfig
    from .engine import GenerationEngine, GenerationResult, SamplingParams
    from .grpo import LocalGRPO
    from .lora import LoraSettings
    from .server import ModelServer, load_model
    from .server_process import ModelServerProcess

__all__ = [
    "GRPOConfig",
    "GenerationEngine",
    "GenerationResult",
    "LocalGRPO",
    "LoraSettings",
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
        "GRPOConfig": ".config",
        "LocalGRPO": ".grpo",
        "LoraSettings": ".lora",
        "ModelServer": ".server",
        "ModelServerProcess": ".server_process",
        "load_model": ".server",
        "ServedModel": "._serving",
    },
    globals(),
)
