"""The GRPO update itself, independent of where the samples come from.

A sample is one episode's tokens: ``ids`` (prompt and generated tokens of every turn, in order) and
``mask`` (1 on the tokens the model generated, 0 on prompt and tool tokens), plus the episode's advantage.
Multi-turn episodes whose later prompts extend the earlier ones token for token are one sequence; others
are split at each break (same advantage): :func:`agl.algorithms.adapter.merge_turns`, as for VERL.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..adapter.turns import Turn, merge_turns

__all__ = ["Sample", "episode_samples", "group_advantages", "grpo_update", "sequence_logprobs"]


@dataclass
class Sample:
    """One training sequence with its loss mask and advantage."""

    ids: list[int]
    mask: list[int]
    advantage: float


def group_advantages(
    rewards: Sequence[float], groups: Sequence[Hashable], eps: float = 1e-6
) -> list[float | None]:
    """GRPO advantages: ``(r - mean) / (std + eps)`` within each group; ``None`` for groups whose rewards are
    all equal (they carry no learning signal and are dropped)."""
    if len(rewards) != len(groups):
        raise ValueError("rewards and groups must have the same length")
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    out: list[float | None] = [None] * len(rewards)
    for idx in members.values():
        values = [float(rewards[i]) for i in idx]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        if std < eps:
            continue
        for i in idx:
            out[i] = (float(rewards[i]) - mean) / (std + eps)
    return out


def episode_samples(turns: Sequence[Turn], advantage: float) -> list[Sample]:
    """Training sequences for one episode: its turns merged by :func:`~agl.algorithms.adapter.merge_turns`
    (so a shared prefix is computed once); turns without generated tokens are left out."""
    trajectories, _ = merge_turns([t for t in turns if t.response_ids])
    return [
        Sample(t.prompt_ids + t.response_ids, [0] * len(t.prompt_ids) + t.response_mask, advantage)
        for t in trajectories
    ]


def _pad(
    samples: Sequence[Sample], pad_id: int, device: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(s.ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(samples), width), dtype=torch.long)
    mask = torch.zeros((len(samples), width), dtype=torch.float32)
    for row, s in enumerate(samples):
        ids[row, : len(s.ids)] = torch.tensor(s.ids)
        attention[row, : len(s.ids)] = 1
        mask[row, : len(s.mask)] = torch.tensor(s.mask, dtype=torch.float32)
    return ids.to(device), attention.to(device), mask.to(device)


def sequence_logprobs(model: Any, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """Log-probability of each token given the ones before it (position 0 gets 0)."""
    logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits.float()
    logprobs = torch.log_softmax(logits[:, :-1], dim=-1).gather(2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(logprobs, (1, 0))


def grpo_update(
    model: Any,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[Sample],
    *,
    pad_id: int,
    clip_eps: float = 0.2,
    max_grad_norm: float = 1.0,
    mini_batches: int = 1,
    epochs: int = 1,
) -> dict[str, float]:
    """Clipped policy-gradient steps on the generated tokens (token-mean loss over the whole batch).

    The old policy's log-probabilities are those of the weights before the first step: the first
    mini-batch takes them from its own first forward pass (no extra pass), the others get a no-grad pass
    up front. With one epoch and one mini-batch this is the plain policy gradient; the clip matters from
    the second step on.
    """
    if not samples:
        return {"loss": 0.0, "tokens": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0}
    device = next(model.parameters()).device
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].ids))  # similar lengths pad less
    chunks = [c for c in (order[k::mini_batches] for k in range(mini_batches)) if c]
    prepared: list[list[Any]] = []
    model.eval()  # no dropout in the old-policy pass
    with torch.no_grad():
        for k, chunk in enumerate(chunks):
            batch = [samples[i] for i in chunk]
            ids, attention, mask = _pad(batch, pad_id, device)
            old = sequence_logprobs(model, ids, attention) if k > 0 else None
            advantages = torch.tensor([s.advantage for s in batch], device=device).unsqueeze(1)
            prepared.append([ids, attention, mask, old, advantages])
    model.train()
    total_tokens = sum(float(p[2].sum()) for p in prepared)
    stats = {"loss": 0.0, "tokens": total_tokens, "clip_fraction": 0.0, "grad_norm": 0.0}
    steps = 0
    for _ in range(epochs):
        for entry in prepared:
            ids, attention, mask, old, advantages = entry
            new = sequence_logprobs(model, ids, attention)
            if old is None:
                old = entry[3] = new.detach()
            ratio = torch.exp(new - old)
            unclipped = ratio * advantages
            clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantages
            per_token = -torch.minimum(unclipped, clipped) * mask
            tokens = mask.sum().clamp(min=1)
            loss = per_token.sum() / tokens
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            with torch.no_grad():
                clipped_tokens = (((ratio - 1).abs() > clip_eps).float() * mask).sum()
            stats["loss"] += float(loss.detach())
            stats["clip_fraction"] += float(clipped_tokens / tokens)
            stats["grad_norm"] += float(norm)
            steps += 1
    for key in ("loss", "clip_fraction", "grad_norm"):
        stats[key] /= max(steps, 1)
    model.eval()
    return stats
