"""What the generation engine is asked and answers: per-request sampling settings, one queued request (with what
it has generated so far), and the result of a finished one."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = ["GenerationRequest", "GenerationResult", "SamplingParams", "TokenCallback"]


@dataclass
class SamplingParams:
    """Per-request sampling settings (OpenAI names)."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list[str])
    top_logprobs: int = 0

    def validate(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0.0 <= self.temperature <= 10.0:
            raise ValueError(f"temperature must be within [0, 10], got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be within (0, 1], got {self.top_p}")
        if not 0 <= self.top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be within [0, 20], got {self.top_logprobs}")


@dataclass
class GenerationResult:
    """What one request produced. ``logprobs`` are of the model's raw distribution (temperature 1)."""

    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    finish_reason: str
    text: str
    model_version: int


TokenCallback = Callable[[int, float], None]


@dataclass
class GenerationRequest:
    """One submitted generation: its prompt and settings, its answer future, and what it generated so far."""

    prompt_ids: list[int]
    params: SamplingParams
    future: concurrent.futures.Future[GenerationResult]
    on_token: TokenCallback | None = None
    # Filled while generating.
    tokens: list[int] = field(default_factory=list[int])
    logprobs: list[float] = field(default_factory=list[float])
    top: list[list[tuple[int, float]]] = field(default_factory=list[list[tuple[int, float]]])
    generator: torch.Generator | None = None
    limit: int = 0
    reserve: int = 0  # prompt + the most tokens it may generate: its share of the KV cache bound
