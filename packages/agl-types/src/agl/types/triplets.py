"""Triplets: the (prompt, response, reward) transitions adapters make of traces for RL training."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Triplet"]


class Triplet(BaseModel):
    """One RL transition: a prompt, the model's response and its reward.

    By convention ``prompt`` and ``response`` are dicts with at least ``token_ids``; the response
    may carry ``logprobs``. ``metadata`` holds what is needed to group by rollout and turn.
    """

    model_config = ConfigDict(extra="forbid")

    prompt: Any
    response: Any
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
