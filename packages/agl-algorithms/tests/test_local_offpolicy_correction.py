"""Off-policy correction in the GRPO update: the loss and its gradient equal the formulas computed by hand
(decoupled PPO and truncated importance sampling, with recorded behaviour logprobs that differ from the
recomputed ones), and ``correction="none"`` is today's update bit for bit."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch")

import torch
from agl.algorithms.adapter import Turn
from agl.algorithms.local.grpo_core import (
    Correction,
    Sample,
    _pad,  # the legacy update below pads as the module does
    episode_samples,
    grpo_update,
    sequence_logprobs,
)

CAP = 2.0
EPS = 0.2


class TinyLM(torch.nn.Module):
    """A causal toy LM with a Hugging Face-like ``.logits`` output: each position sees the running mean of
    the embeddings so far."""

    def __init__(self, vocab: int = 12, dim: int = 8, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)  # partially typed third-party API
        self.emb = torch.nn.Embedding(vocab, dim)
        self.mix = torch.nn.Linear(dim, dim)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None, use_cache: bool = False) -> Any:
        h = self.emb(input_ids)
        steps = torch.arange(1, input_ids.shape[1] + 1, dtype=h.dtype).view(1, -1, 1)
        context = h.cumsum(dim=1) / steps
        return SimpleNamespace(logits=self.out(torch.tanh(self.mix(context)) + h))


def _token_logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """By hand, one sequence, no padding: entry i is log p(ids[i] | ids[:i]) (entry 0 is 0)."""
    logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    out = [torch.zeros(())]
    for i in range(1, len(ids)):
        out.append(torch.log_softmax(logits[i - 1], dim=-1)[ids[i]])
    return torch.stack(out)


def _samples(model: torch.nn.Module) -> list[Sample]:
    """Four samples of different lengths; behaviour logprobs = recomputed ones shifted per token, so the
    weights π/μ spread on both sides of 1 and past the cap."""
    raw = [
        ([1, 2, 3, 4, 5], [0, 0, 1, 1, 1], 1.0),
        ([1, 3, 7, 9, 2, 6, 4], [0, 0, 1, 1, 0, 1, 1], -0.5),
        ([2, 5, 8, 10, 11, 3], [0, 1, 1, 1, 1, 1], 0.8),
        ([4, 4, 6, 1], [0, 0, 1, 1], -1.2),
    ]
    shifts = [-1.5, 0.4, -0.1, 0.9, -2.0, 0.05, 0.3]
    samples: list[Sample] = []
    with torch.no_grad():
        for ids, mask, advantage in raw:
            recomputed = _token_logprobs(model, ids).tolist()
            behaviour = [
                lp + shifts[i % len(shifts)] if m else 0.0
                for i, (lp, m) in enumerate(zip(recomputed, mask, strict=True))
            ]
            samples.append(Sample(ids, mask, advantage, behaviour))
    return samples


def _hand_loss(
    model: torch.nn.Module,
    samples: Sequence[Sample],
    prox: Sequence[torch.Tensor],
    correction: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss value, a surrogate whose gradient is the update's gradient) by the formulas, token by token."""
    values: list[torch.Tensor] = []
    surrogates: list[torch.Tensor] = []
    for s, p in zip(samples, prox, strict=True):
        new = _token_logprobs(model, s.ids)
        mu = torch.tensor(s.behaviour_logprobs or [])
        for t, m in enumerate(s.mask):
            if not m:
                continue
            a = s.advantage
            if correction == "tis":
                rho = torch.exp(new[t] - mu[t])
                w = torch.clamp(rho.detach(), max=CAP)
                values.append(-w * a)
                surrogates.append(-w * a * new[t])
                continue
            r = torch.exp(new[t] - p[t])
            term = torch.clamp(r, max=1 + EPS) * a if a >= 0 else torch.clamp(r, min=1 - EPS) * a
            w = min(math.exp(float(p[t] - mu[t])), CAP) if correction == "decoupled" else 1.0
            values.append(-w * term)
            surrogates.append(-w * term)
    n = len(values)
    return torch.stack(values).sum().detach() / n, torch.stack(surrogates).sum() / n


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [
        p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()
    ]


def _sgd_update(
    model: torch.nn.Module, samples: list[Sample], correction: Correction, *, lr: float, **kwargs: Any
) -> dict[str, float]:
    """``grpo_update`` with plain SGD at ``lr``, no gradient clipping, and the test's clip and cap."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    return grpo_update(
        model,
        optimizer,
        samples,
        pad_id=0,
        max_grad_norm=1e9,
        clip_eps=EPS,
        correction=correction,
        is_cap=CAP,
        **kwargs,
    )


@pytest.mark.parametrize("correction", ["decoupled", "tis"])
def test_one_step_loss_and_gradient_equal_the_formula(correction: Correction) -> None:
    model = TinyLM()
    samples = _samples(model)
    reference = copy.deepcopy(model)
    stats = _sgd_update(model, samples, correction, lr=0.0)  # the step leaves the weights: grads stay to read

    prox = [_token_logprobs(reference, s.ids).detach() for s in samples]
    value, surrogate = _hand_loss(reference, samples, prox, correction)
    surrogate.backward()  # partially typed third-party API
    assert stats["loss"] == pytest.approx(float(value), rel=1e-5, abs=1e-6)
    for got, want in zip(_grads(model), _grads(reference), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)

    # the recorded logprobs really differ from the recomputed ones, and the cap truncated some weights
    ratios = [
        math.exp(float(p[t]) - (s.behaviour_logprobs or [])[t])
        for s, p in zip(samples, prox, strict=True)
        for t, m in enumerate(s.mask)
        if m
    ]
    assert max(ratios) > CAP and min(ratios) < 1.0
    assert stats["is_ratio_mean"] == pytest.approx(sum(ratios) / len(ratios), rel=1e-5)
    assert stats["is_ratio_max"] == pytest.approx(max(ratios), rel=1e-5)
    assert stats["is_tokens"] == len(ratios) == stats["tokens"]
    assert stats["samples"] == len(samples)
    if correction == "tis":
        assert stats["clip_fraction"] == pytest.approx(sum(r > CAP for r in ratios) / len(ratios))
    else:
        assert stats["clip_fraction"] == 0.0  # one step: π = π_old


@pytest.mark.parametrize("correction", ["none", "decoupled", "tis"])
def test_several_steps_follow_the_formula(correction: Correction) -> None:
    """Two mini-batches, three epochs, plain SGD: every step's gradient is the formula's (the proximal policy
    stays the weights at the start of the update), so the weights end where hand-made SGD puts them."""
    lr, mini_batches, epochs = 0.5, 2, 3
    model = TinyLM(seed=1)
    samples = _samples(model)
    reference = copy.deepcopy(model)
    stats = _sgd_update(model, samples, correction, lr=lr, mini_batches=mini_batches, epochs=epochs)

    order = sorted(range(len(samples)), key=lambda i: len(samples[i].ids))
    chunks = [order[k::mini_batches] for k in range(mini_batches)]
    with torch.no_grad():
        prox = [_token_logprobs(reference, s.ids) for s in samples]
    losses: list[float] = []
    for _ in range(epochs):
        for chunk in chunks:
            value, surrogate = _hand_loss(
                reference, [samples[i] for i in chunk], [prox[i] for i in chunk], correction
            )
            reference.zero_grad(set_to_none=True)
            surrogate.backward()  # partially typed third-party API
            with torch.no_grad():
                for p in reference.parameters():
                    if p.grad is not None:
                        p -= lr * p.grad
            losses.append(float(value))
    assert stats["loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-4, abs=1e-6)
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert any(
        not torch.equal(a, b) for a, b in zip(model.parameters(), TinyLM(seed=1).parameters(), strict=True)
    )
    if correction != "tis":
        assert stats["clip_fraction"] > 0  # the clip mattered in later steps


# Today's update, verbatim (before the off-policy correction existed): the reference for ``"none"``.
def _legacy_grpo_update(
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
    if not samples:
        return {"loss": 0.0, "tokens": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0}
    device = next(model.parameters()).device
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].ids))
    chunks = [c for c in (order[k::mini_batches] for k in range(mini_batches)) if c]
    prepared: list[list[Any]] = []
    model.eval()
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


def _run(
    model_factory: Any, update: Any, samples: list[Sample], **kwargs: Any
) -> tuple[Any, dict[str, float]]:
    model = model_factory()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    stats = update(model, optimizer, samples, pad_id=0, mini_batches=2, epochs=2, clip_eps=0.1, **kwargs)
    stats["grads"] = _grads(model)
    return model, stats


def _assert_identical(a: Any, b: Any, stats_a: dict[str, Any], stats_b: dict[str, Any]) -> None:
    for key in ("loss", "tokens", "clip_fraction", "grad_norm"):
        assert stats_a[key] == stats_b[key], key  # exactly
    for x, y in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(x, y)
    for x, y in zip(stats_a["grads"], stats_b["grads"], strict=True):
        assert torch.equal(x, y)


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from agl.testing.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-offpolicy"))


@pytest.mark.parametrize("kind", ["toy", "hf"])
def test_none_is_todays_update_bit_for_bit(kind: str, request: pytest.FixtureRequest) -> None:
    if kind == "hf":
        from transformers import AutoModelForCausalLM

        path: Path = request.getfixturevalue("tiny_hf")

        def factory() -> Any:
            torch.manual_seed(0)  # partially typed third-party API
            return AutoModelForCausalLM.from_pretrained(path)
    else:

        def factory() -> Any:
            return TinyLM(seed=3)

    with_behaviour = _samples(TinyLM(seed=3))
    plain = [Sample(s.ids, s.mask, s.advantage) for s in with_behaviour]
    legacy_model, legacy = _run(factory, _legacy_grpo_update, plain)
    model, stats = _run(factory, grpo_update, plain)  # today's call: defaults
    _assert_identical(legacy_model, model, legacy, stats)
    assert stats["is_tokens"] == 0 and stats["is_ratio_mean"] == 1.0
    explicit_model, explicit = _run(factory, grpo_update, plain, correction="none")
    _assert_identical(legacy_model, explicit_model, legacy, explicit)
    # recorded behaviour logprobs only feed the statistics under "none"
    recorded_model, recorded = _run(factory, grpo_update, with_behaviour, correction="none")
    _assert_identical(legacy_model, recorded_model, legacy, recorded)
    assert recorded["is_tokens"] == recorded["tokens"]


def test_empty_batch_and_bad_settings() -> None:
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert grpo_update(model, optimizer, [], pad_id=0, correction="tis")["tokens"] == 0
    plain = [Sample([1, 2, 3], [0, 1, 1], 1.0)]
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        grpo_update(model, optimizer, plain, pad_id=0, correction="decoupled")
    short = [Sample([1, 2, 3], [0, 1, 1], 1.0, [0.0, -1.0])]
    with pytest.raises(ValueError, match="sample 0"):
        grpo_update(model, optimizer, short, pad_id=0, correction="tis")
    not_finite = [Sample([1, 2, 3], [0, 1, 1], 1.0, [0.0, float("nan"), -1.0])]
    with pytest.raises(ValueError, match="finite"):
        grpo_update(model, optimizer, not_finite, pad_id=0, correction="tis")
    with pytest.raises(ValueError, match="correction"):
        grpo_update(model, optimizer, plain, pad_id=0, correction="bogus")  # pyright: ignore[reportArgumentType]  # the point of the test
    with pytest.raises(ValueError, match="is_cap"):
        grpo_update(model, optimizer, plain, pad_id=0, is_cap=0.0)
    # prompt positions may hold anything (even NaN): they are ignored
    lenient = [Sample([1, 2, 3], [0, 1, 1], 1.0, [float("nan"), -1.0, -2.0])]
    stats = grpo_update(model, optimizer, lenient, pad_id=0, correction="tis")
    assert math.isfinite(stats["loss"]) and math.isfinite(stats["grad_norm"])


def test_episode_samples_carry_the_recorded_logprobs() -> None:
    turns = [Turn([1, 2, 3], [4, 5], [-0.1, -0.2]), Turn([1, 2, 3, 4, 5, 6], [8], [-0.3])]
    (sample,) = episode_samples(turns, 1.0)
    assert sample.ids == [1, 2, 3, 4, 5, 6, 8]
    assert sample.behaviour_logprobs == [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, -0.3]
    # a turn without logprobs, or with the wrong number of them: the sequence has none
    (missing,) = episode_samples([turns[0], Turn([1, 2, 3, 4, 5, 6], [8])], 1.0)
    assert missing.behaviour_logprobs is None
    (wrong,) = episode_samples([Turn([1, 2], [3, 4], [-0.5])], 1.0)
    assert wrong.behaviour_logprobs is None
