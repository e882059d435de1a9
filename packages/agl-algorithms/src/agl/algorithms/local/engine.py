"""Batched sampling from a Hugging Face causal LM with a KV cache, and a scheduler that batches requests.

Requests submitted from any thread are collected for a few milliseconds by one worker thread, generated
together (left-padded, one forward pass per new token for the whole batch, finished rows dropped from the
batch as they end), and answered through futures. Weights can be swapped between batches.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["GenerationEngine", "GenerationResult", "SamplingParams"]

logger = logging.getLogger(__name__)

TokenCallback = Callable[[int, float], None]


@dataclass
class SamplingParams:
    """Per-request sampling settings (OpenAI names)."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
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


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    future: concurrent.futures.Future[GenerationResult]
    on_token: TokenCallback | None = None
    # Filled while generating.
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    generator: torch.Generator | None = None
    limit: int = 0


class GenerationEngine:
    """Dynamic batching generator over one model.

    Args:
        model: a causal LM (``transformers`` ``PreTrainedModel``); put in eval mode and owned by the engine.
        tokenizer: its tokenizer (used to decode text and find stop tokens).
        max_batch_size: most sequences generated together.
        batch_wait_s: how long the worker waits for one more request before starting a batch.
        max_wait_s: the longest it delays a batch to collect more requests.
        context_length: longest prompt + completion; defaults to the model's ``max_position_embeddings``.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch_size: int = 256,
        batch_wait_s: float = 0.005,
        max_wait_s: float = 0.05,
        context_length: int | None = None,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.max_wait_s = max_wait_s
        config = model.config
        self.context_length = context_length or int(getattr(config, "max_position_embeddings", 2048))
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids))
        self.device = next(model.parameters()).device
        self.version = 0
        self._cache_kwarg = (
            "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        )
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.stats = {"batches": 0, "requests": 0, "generated_tokens": 0, "prompt_tokens": 0, "busy_s": 0.0}

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker thread (idempotent)."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._worker, name="agl-generation", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the worker after the current batch; pending requests fail with ``RuntimeError``."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout=30)
        self._thread = None
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                break
            if request is not None and not request.future.done():
                request.future.set_exception(RuntimeError("the generation engine was stopped"))

    # -- requests ------------------------------------------------------------------------------

    def submit(
        self, prompt_ids: list[int], params: SamplingParams, on_token: TokenCallback | None = None
    ) -> concurrent.futures.Future[GenerationResult]:
        """Queue one generation; ``on_token(token_id, logprob)`` is called from the worker thread per token."""
        params.validate()
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        if len(prompt_ids) >= self.context_length:
            raise ValueError(
                f"the prompt has {len(prompt_ids)} tokens; this model's context is {self.context_length} tokens"
            )
        if self._thread is None:
            raise RuntimeError("the generation engine is not started; call start() first")
        future: concurrent.futures.Future[GenerationResult] = concurrent.futures.Future()
        self._queue.put(_Request(list(prompt_ids), params, future, on_token))
        return future

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[GenerationResult]:
        """Generate for several prompts at once, synchronously, in the calling thread."""
        requests = [_Request(list(p), params, concurrent.futures.Future()) for p in prompts]
        with self._lock:
            self._run_batch(requests)
        return [r.future.result() for r in requests]

    def update_weights(self, state_dict: Mapping[str, torch.Tensor]) -> int:
        """Load new weights between two batches; returns the new version number."""
        with self._lock, torch.no_grad():
            self.model.load_state_dict(state_dict, strict=False)
            self.version += 1
            return self.version

    # -- worker --------------------------------------------------------------------------------

    def _worker(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + self.batch_wait_s
            while len(batch) < self.max_batch_size:
                remaining = deadline - time.monotonic()
                try:
                    item = (
                        self._queue.get(timeout=max(remaining, 0))
                        if remaining > 0
                        else self._queue.get_nowait()
                    )
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            with self._lock:
                try:
                    self._run_batch(batch)
                except Exception as exc:  # a failed batch must answer its callers, not kill the worker
                    logger.exception("generation batch failed")
                    for request in batch:
                        if not request.future.done():
                            request.future.set_exception(exc)

    def _forward(
        self, input_ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> Any:
        kwargs = {self._cache_kwarg: cache}
        return self.model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )

    @torch.inference_mode()
    def _run_batch(self, requests: list[_Request]) -> None:
        from transformers import DynamicCache

        started = time.perf_counter()
        active = [r for r in requests if r.future.set_running_or_notify_cancel()]
        if not active:
            return
        for r in active:
            r.limit = self.context_length - len(r.prompt_ids)
            if r.params.max_tokens is not None:
                r.limit = min(r.limit, r.params.max_tokens)
            if r.params.seed is not None:
                r.generator = torch.Generator(device=self.device).manual_seed(r.params.seed)
        width = max(len(r.prompt_ids) for r in active)
        ids = torch.full((len(active), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(active), width), dtype=torch.long)
        for row, r in enumerate(active):
            ids[row, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            attention[row, width - len(r.prompt_ids) :] = 1
        ids, attention = ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        temps = torch.tensor([r.params.temperature for r in active], device=self.device)
        top_ps = torch.tensor([r.params.top_p for r in active], device=self.device)
        rows = list(range(len(active)))  # index into `active` of each batch row
        step_ids = ids
        step_positions = positions
        generated = 0
        while rows:
            out = self._forward(step_ids, attention, step_positions, cache)
            cache = _output_cache(out, cache)
            logits = out.logits[:, -1, :].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            next_ids = _sample(logits, temps, top_ps, [active[i].generator for i in rows])
            chosen = logprobs.gather(1, next_ids.unsqueeze(1)).squeeze(1)
            k = max(active[i].params.top_logprobs for i in rows)
            top = torch.topk(logprobs, k, dim=-1) if k else None
            keep: list[int] = []
            for b, i in enumerate(rows):
                r = active[i]
                token, lp = int(next_ids[b]), float(chosen[b])
                r.tokens.append(token)
                r.logprobs.append(lp)
                if top is not None and r.params.top_logprobs:
                    n = r.params.top_logprobs
                    r.top.append(
                        [
                            (int(t), float(v))
                            for t, v in zip(top.indices[b, :n], top.values[b, :n], strict=False)
                        ]
                    )
                generated += 1
                if r.on_token is not None:
                    r.on_token(token, lp)
                reason = self._finish_reason(r, token)
                if reason is None:
                    keep.append(b)
                else:
                    self._finish(r, reason)
            if len(keep) < len(rows):
                if not keep:
                    break
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                rows = [rows[b] for b in keep]
                next_ids, attention, step_positions = next_ids[index], attention[index], step_positions[index]
                temps, top_ps = temps[index], top_ps[index]
            step_ids = next_ids.unsqueeze(1)
            step_positions = step_positions[:, -1:] + 1
            attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
        self.stats["batches"] += 1
        self.stats["requests"] += len(active)
        self.stats["generated_tokens"] += generated
        self.stats["prompt_tokens"] += sum(len(r.prompt_ids) for r in active)
        self.stats["busy_s"] += time.perf_counter() - started

    def _finish_reason(self, r: _Request, token: int) -> str | None:
        if token in self.eos_ids:
            return "stop"
        if r.params.stop:
            text = self.tokenizer.decode(r.tokens, skip_special_tokens=True)
            if any(s in text for s in r.params.stop):
                return "stop"
        if len(r.tokens) >= r.limit:
            return "length"
        return None

    def _finish(self, r: _Request, reason: str) -> None:
        text = self.tokenizer.decode(r.tokens, skip_special_tokens=True)
        for stop in r.params.stop:
            cut = text.find(stop)
            if cut >= 0:
                text = text[:cut]
        r.future.set_result(GenerationResult(r.tokens, r.logprobs, r.top, reason, text, self.version))


def _sample(
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


def _output_cache(out: Any, cache: Any) -> Any:
    # transformers 5 names it ``cache`` (``past_key_values`` is deprecated there); 4.x ``past_key_values``.
    for name in ("cache", "past_key_values"):
        if name in out and out[name] is not None:
            return out[name]
    return cache


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    if not ids:
        raise ValueError("the model has no eos token id; set generation_config.eos_token_id")
    return ids
