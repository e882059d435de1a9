"""The local RL backend: an OpenAI-compatible server for a Hugging Face causal LM and a GRPO trainer.

Needs the ``local`` extra (torch, transformers). Names are imported lazily, so ``import
agl.algorithms.local`` itself stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import GenerationEngine, GenerationResult, SamplingParams
    from .grpo import GRPOConfig, LocalGRPO
    from .server import ModelServer, load_model

__all__ = [
    "GRPOConfig",
    "GenerationEngine",
    "GenerationResult",
    "LocalGRPO",
    "ModelServer",
    "SamplingParams",
    "load_model",
]

_WHERE = {
    "GenerationEngine": "engine",
    "GenerationResult": "engine",
    "SamplingParams": "engine",
    "GRPOConfig": "grpo",
    "LocalGRPO": "grpo",
    "ModelServer": "server",
    "load_model": "server",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'agl.algorithms.local' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
