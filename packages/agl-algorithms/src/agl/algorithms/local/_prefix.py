"""The KV cache of the prompt prefix that requests share: computed once per weights version, copied into
each new row instead of being prefilled again.

An agent's requests mostly start with the same tokens (the system message and the tool schema: in the
calculator app 20 of a first turn's 29 prompt tokens), and prefilling prompts is most of a small model's
work. A causal model's keys and values for a prefix do not depend on what follows it, so the prefix's are
computed once and reused by every request that starts with it.

One prefix is kept. It is learned from a group of requests admitted together (their longest common
prefix), narrowed when a later group shares only part of it (a prefix's first ``n`` positions are the
cache of its first ``n`` tokens), and replaced when a group shares nothing with it but something of its
own. The engine drops it when the weights change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["SharedPrefix"]

MIN_TOKENS = 8
"""Shorter common prefixes are prefilled as usual (copying them would save too little)."""


class SharedPrefix:
    """The shared prompt prefix and its keys and values per layer (``[1, heads, tokens, head_dim]``)."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []

    def clear(self) -> None:
        """Forget the prefix (its cache belongs to weights that are gone)."""
        self.ids, self.layers = [], []

    def tokens_for(self, prompts: list[list[int]], compute: Callable[[list[int]], Any]) -> int:
        """How many leading tokens of every prompt in ``prompts`` come from this cache (0: none), learning
        or narrowing the prefix from them first. ``compute(ids)`` runs the model over ``ids`` alone and
        returns its per-layer ``(keys, values)``. Each prompt keeps at least its last token to prefill
        (its logits give the first sampled token)."""
        limit = min(len(p) for p in prompts) - 1
        if self.ids:
            shared = len(_common_prefix([self.ids[:limit], *prompts]))
            if shared == len(self.ids):
                return shared
            if shared >= MIN_TOKENS:
                self._narrow(shared)
                return shared
        if len(prompts) < 2:
            return 0
        common = _common_prefix(prompts)[:limit]
        if len(common) < MIN_TOKENS:
            return 0
        self.ids, self.layers = list(common), compute(list(common))
        return len(common)

    def seed(self, cache: Any, rows: int) -> None:
        """Fill an empty ``DynamicCache`` with the prefix, for ``rows`` rows."""
        for index, (keys, values) in enumerate(self.layers):
            cache.update(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), index)

    def _narrow(self, tokens: int) -> None:
        self.ids = self.ids[:tokens]
        self.layers = [(k[..., :tokens, :], v[..., :tokens, :]) for k, v in self.layers]


def _common_prefix(sequences: list[list[int]]) -> list[int]:
    """The longest list that every one of ``sequences`` starts with (the least and the greatest of them in
    sorted order share exactly that)."""
    first, last = min(sequences), max(sequences)
    for i, (a, b) in enumerate(zip(first, last, strict=False)):
        if a != b:
            return first[:i]
    return first
