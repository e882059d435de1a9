"""The running batch of the generation engine: sequences decoded together, their KV cache, and sampling.

Pure tensor work, called by :class:`~agl.algorithms.local.engine.GenerationEngine`'s worker thread (which
owns the scheduling: the queue, admission, weight swaps) with the engine's lock held.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._prefix import SharedPrefix
from ._request import GenerationRequest

__all__ = ["BatchContext", "RunningBatch", "sample"]


@dataclass
class BatchContext:
    """What a running batch needs of its engine: the model call, how a row ends, and the engine's counters."""

    device: torch.device
    pad_id: int
    stats: dict[str, Any]
    forward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any], Any]
    """One model pass: (input ids, attention mask, position ids, KV cache) -> the model's output."""
    finish_reason: Callable[[GenerationRequest, int], str | None]
    """Why a row ends after the token it just sampled (``"stop"``, ``"length"``), or ``None``."""
    finish: Callable[[GenerationRequest, str], None]
    """Answer a finished row's future."""
    prefix: SharedPrefix | None = None
    """The cache of the prompt prefix requests share (``None``: every prompt is prefilled whole)."""


class RunningBatch:
    """The sequences decoded together: their requests, KV cache, attention mask, next input token (the
    last one sampled, not yet in the cache) and its position, per row. Rows are right-aligned: each row's
    cached positions are its last ``len`` columns."""

    def __init__(self, context: BatchContext) -> None:
        self.context = context
        self._reset()

    def _reset(self) -> None:
        self.rows: list[GenerationRequest] = []
        self.cache: Any = None
        self.attention = torch.zeros((0, 0), dtype=torch.long)
        self.next_ids = torch.zeros(0, dtype=torch.long)
        self.positions = torch.zeros(0, dtype=torch.long)
        self.temps = torch.zeros(0)
        self.top_ps = torch.zeros(0)

    @torch.inference_mode()
    def add(self, requests: list[GenerationRequest]) -> None:
        """Prefill ``requests`` together, sample their first tokens, and join the unfinished ones."""
        context = self.context
        started = time.perf_counter()
        device = context.device
        for r in requests:
            if r.params.seed is not None:
                r.generator = torch.Generator(device=device).manual_seed(r.params.seed)
        logits, cache, attention, positions = self._prefill([r.prompt_ids for r in requests])
        temps = torch.tensor([r.params.temperature for r in requests], device=device)
        top_ps = torch.tensor([r.params.top_p for r in requests], device=device)
        next_ids, keep = self._emit(requests, logits, temps, top_ps)
        stats = context.stats
        stats["prefills"] += 1
        stats["requests"] += len(requests)
        if keep:
            index = torch.tensor(keep, device=device)
            if len(keep) < len(requests):
                cache.batch_select_indices(index)
            new_rows = [requests[b] for b in keep]
            new_attention = attention[index]
            new_positions = positions[index, -1] + 1
            if not self.rows:
                stats["batches"] += 1
                self.rows, self.cache, self.attention = new_rows, cache, new_attention
                self.next_ids, self.positions = next_ids[index], new_positions
                self.temps, self.top_ps = temps[index], top_ps[index]
            else:
                self.cache, self.attention = join_caches(self.cache, self.attention, cache, new_attention)
                self.rows += new_rows
                self.next_ids = torch.cat([self.next_ids, next_ids[index]])
                self.positions = torch.cat([self.positions, new_positions])
                self.temps = torch.cat([self.temps, temps[index]])
                self.top_ps = torch.cat([self.top_ps, top_ps[index]])
            self._high_water()
        stats["busy_s"] += time.perf_counter() - started

    def _prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
        """One forward pass over ``prompts``: each distinct prompt once (a GRPO group's samples ask alike),
        without the shared prefix (its cache is copied in). Returns, per prompt, the last position's
        logits, and the KV cache, attention mask and position ids of its row."""
        from transformers import DynamicCache

        context = self.context
        device = context.device
        rows_of: dict[tuple[int, ...], int] = {}
        row_of_prompt = [rows_of.setdefault(tuple(p), len(rows_of)) for p in prompts]
        distinct = [list(key) for key in rows_of]
        prefix = context.prefix
        shared = prefix.tokens_for(distinct, self._prefix_cache) if prefix is not None else 0
        width = max(len(p) for p in distinct) - shared
        ids = torch.full((len(distinct), width), context.pad_id, dtype=torch.long)
        attention = torch.zeros((len(distinct), shared + width), dtype=torch.long)
        attention[:, :shared] = 1  # the shared prefix first, then each prompt's rest, right-aligned
        for row, prompt in enumerate(distinct):
            rest = len(prompt) - shared
            ids[row, width - rest :] = torch.tensor(prompt[shared:])
            attention[row, shared + width - rest :] = 1
        ids, attention = ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        if shared:
            assert prefix is not None
            prefix.seed(cache, len(distinct))
        out = context.forward(ids, attention, positions[:, shared:], cache)
        cache = output_cache(out, cache)
        logits = out.logits[:, -1, :]
        stats = context.stats
        stats["prompt_tokens"] += sum(len(p) for p in prompts)
        stats["prefix_tokens"] += shared * len(distinct)
        stats["prefilled_tokens"] += sum(len(p) for p in distinct) - shared * len(distinct)
        if len(distinct) < len(prompts):  # each prompt's own row, copied from its distinct one
            index = torch.tensor(row_of_prompt, device=device)
            cache.batch_select_indices(index)
            logits, attention, positions = logits[index], attention[index], positions[index]
        return logits, cache, attention, positions

    def _prefix_cache(self, ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Keys and values of ``ids`` alone, per layer (for :class:`SharedPrefix`)."""
        self.context.stats["prefix_computes"] += 1
        from transformers import DynamicCache

        device = self.context.device
        tokens = torch.tensor([ids], device=device)
        positions = torch.arange(len(ids), device=device).unsqueeze(0)
        cache = DynamicCache()
        out = self.context.forward(tokens, torch.ones_like(tokens), positions, cache)
        return cache_tensors(output_cache(out, cache))

    @torch.inference_mode()
    def step(self) -> None:
        """Decode one token for every row; finished and cancelled rows leave the batch."""
        if not self.rows:
            return
        context = self.context
        live = [b for b, r in enumerate(self.rows) if not r.future.cancelled()]
        if len(live) < len(self.rows):
            context.stats["cancelled"] += len(self.rows) - len(live)
            self._select(live)
            if not self.rows:
                return
        started = time.perf_counter()
        attention = torch.cat([self.attention, torch.ones_like(self.attention[:, :1])], dim=1)
        out = context.forward(self.next_ids.unsqueeze(1), attention, self.positions.unsqueeze(1), self.cache)
        self.cache = output_cache(out, self.cache)
        self.attention = attention
        self.next_ids, keep = self._emit(self.rows, out.logits[:, -1, :], self.temps, self.top_ps)
        self.positions = self.positions + 1
        if len(keep) < len(self.rows):
            self._select(keep)
        context.stats["decode_steps"] += 1
        context.stats["busy_s"] += time.perf_counter() - started

    def _emit(
        self,
        rows: list[GenerationRequest],
        last_logits: torch.Tensor,
        temps: torch.Tensor,
        top_ps: torch.Tensor,
    ) -> tuple[torch.Tensor, list[int]]:
        """Sample one token per row, record it, finish rows that end; returns the tokens and the rows kept."""
        context = self.context
        logits = last_logits.float()
        logprobs = torch.log_softmax(logits, dim=-1)
        next_ids = sample(logits, temps, top_ps, [r.generator for r in rows])
        chosen = logprobs.gather(1, next_ids.unsqueeze(1)).squeeze(1)
        k = max(r.params.top_logprobs for r in rows)
        top = torch.topk(logprobs, k, dim=-1) if k else None
        tokens, values = _tolist(next_ids), _tolist(chosen)
        keep: list[int] = []
        for b, r in enumerate(rows):
            token, lp = int(tokens[b]), float(values[b])
            r.tokens.append(token)
            r.logprobs.append(lp)
            if top is not None and r.params.top_logprobs:
                n = r.params.top_logprobs
                r.top.append(
                    [(int(t), float(v)) for t, v in zip(top.indices[b, :n], top.values[b, :n], strict=False)]
                )
            if r.on_token is not None:
                r.on_token(token, lp)
            reason = context.finish_reason(r, token)
            if reason is None:
                keep.append(b)
            else:
                context.finish(r, reason)
        context.stats["generated_tokens"] += len(rows)
        return next_ids, keep

    def _select(self, keep: list[int]) -> None:
        """Keep only the rows ``keep`` and drop the cache columns no remaining row uses."""
        if not keep:
            self._reset()
            return
        index = torch.tensor(keep, device=self.context.device)
        self.cache.batch_select_indices(index)
        self.rows = [self.rows[b] for b in keep]
        self.attention = self.attention[index]
        self.next_ids, self.positions = self.next_ids[index], self.positions[index]
        self.temps, self.top_ps = self.temps[index], self.top_ps[index]
        used = self.attention.any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        if first > 0:
            self.attention = self.attention[:, first:]
            _setcache_tensors(
                self.cache, [(k[..., first:, :], v[..., first:, :]) for k, v in cache_tensors(self.cache)]
            )

    def _high_water(self) -> None:
        stats = self.context.stats
        stats["max_rows"] = max(stats["max_rows"], len(self.rows))
        stats["max_cache_tokens_used"] = max(stats["max_cache_tokens_used"], int(self.attention.numel()))


def cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's (keys, values), ``[batch, heads, positions, head_dim]``."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers 5
        return [(layer.keys, layer.values) for layer in layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))  # transformers 4.x


def _setcache_tensors(cache: Any, tensors: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for layer, (k, v) in zip(layers, tensors, strict=True):
            layer.keys, layer.values = k, v
        return
    cache.key_cache = [k for k, _ in tensors]
    cache.value_cache = [v for _, v in tensors]


def join_caches(
    cache: Any, attention: torch.Tensor, other: Any, other_attention: torch.Tensor
) -> tuple[Any, torch.Tensor]:
    """Stack two right-aligned batches into one (into ``cache``), left-padding the narrower one."""
    width = max(attention.shape[1], other_attention.shape[1])

    def left_pad(t: torch.Tensor, dim_from_end: int) -> torch.Tensor:
        missing = width - t.shape[-dim_from_end]
        if not missing:
            return t
        pad = [0, 0] * (dim_from_end - 1) + [missing, 0]
        return torch.nn.functional.pad(t, pad)

    joined = [
        (torch.cat([left_pad(k, 2), left_pad(k2, 2)]), torch.cat([left_pad(v, 2), left_pad(v2, 2)]))
        for (k, v), (k2, v2) in zip(cache_tensors(cache), cache_tensors(other), strict=True)
    ]
    _setcache_tensors(cache, joined)
    return cache, torch.cat([left_pad(attention, 1), left_pad(other_attention, 1)])


def sample(
    logits: torch.Tensor, temps: torch.Tensor, top_ps: torch.Tensor, generators: list[Any]
) -> torch.Tensor:
    """One token per row: greedy where temperature is 0, else temperature + nucleus sampling."""
    greedy = logits.argmax(dim=-1)
    sampling = temps > 0
    if not bool(sampling.any()):
        return greedy
    scaled = logits / temps.clamp(min=1e-5).unsqueeze(1)
    probs = torch.softmax(scaled, dim=-1)
    if bool((top_ps < 1.0).any()):
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(dim=-1)
        drop = cumulative - sorted_probs > top_ps.unsqueeze(1)
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(1, order, sorted_probs)
    choice = greedy.clone()
    shared = [b for b, g in enumerate(generators) if g is None and bool(sampling[b])]
    if shared:
        index = torch.tensor(shared, device=logits.device)
        choice[index] = torch.multinomial(probs[index], 1).squeeze(1)
    for b, g in enumerate(generators):
        if g is not None and bool(sampling[b]):
            choice[b] = torch.multinomial(probs[b], 1, generator=g).squeeze(0)
    return choice


def output_cache(out: Any, cache: Any) -> Any:
    # transformers 5 names it ``cache`` (``past_key_values`` is deprecated there); 4.x ``past_key_values``.
    for name in ("cache", "past_key_values"):
        if name in out and out[name] is not None:
            return out[name]
    return cache


def _tolist(tensor: Any) -> list[Any]:
    """``tensor.tolist()`` (torch annotates it as a list of unknown items)."""
    return tensor.tolist()
