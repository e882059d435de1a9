"""The shared-prefix cache of the local generation engine: requests that start alike get the tokens and
logprobs they get with every prompt prefilled whole; the prefix is learned, narrowed and replaced from the
groups admitted; a weight swap drops it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from agl.algorithms.local import GenerationEngine, SamplingParams
from agl.algorithms.local._prefix import MIN_TOKENS, SharedPrefix
from agl.algorithms.local.server import load_model
from agl.testing.tiny_model import build_tiny_model

SYSTEM = "You are a calculator assistant. Answer with a number. "
QUESTIONS = ["What is 12 + 30?", "What is 7 * 6?", "Hello there", "How are you?", "?"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    torch.set_num_threads(1)
    return load_model(build_tiny_model(tmp_path_factory.mktemp("tiny")))


def prompts_of(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    return [tokenizer.encode(t, add_special_tokens=False) for t in texts]


def generate(engine: GenerationEngine, prompts: list[list[int]], **params: Any) -> list[Any]:
    return engine.generate(prompts, SamplingParams(max_tokens=12, **params))


def assert_same_results(got: list[Any], expected: list[Any]) -> None:
    for a, b in zip(got, expected, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        assert a.finish_reason == b.finish_reason


def test_prompts_sharing_a_prefix_get_what_they_get_prefilled_whole(loaded: tuple[Any, Any]) -> None:
    model, tokenizer = loaded
    cached = GenerationEngine(model, tokenizer)
    whole = GenerationEngine(model, tokenizer, prefix_cache=False)
    prompts = prompts_of(tokenizer, [SYSTEM + q for q in QUESTIONS])
    for params in ({"temperature": 0.0}, {"temperature": 1.0, "seed": 3}):
        assert_same_results(generate(cached, prompts, **params), generate(whole, prompts, **params))
    assert cached.stats["prefix_tokens"] >= 2 * len(prompts) * MIN_TOKENS
    assert whole.stats["prefix_tokens"] == 0
    # a later group sharing only part of the prefix narrows it and still gets the same tokens
    partial = prompts_of(tokenizer, ["You are a calculator. " + q for q in QUESTIONS])
    assert cached._prefix is not None
    before = len(cached._prefix.ids)
    assert_same_results(generate(cached, partial, temperature=0.0), generate(whole, partial, temperature=0.0))
    assert cached._prefix is not None
    assert MIN_TOKENS <= len(cached._prefix.ids) < before


def test_a_weight_swap_drops_the_prefix_computed_by_the_old_weights(loaded: tuple[Any, Any]) -> None:
    model, tokenizer = loaded
    original = {k: v.clone() for k, v in model.state_dict().items()}
    engine = GenerationEngine(model, tokenizer)
    engine.start()
    try:
        prompts = prompts_of(tokenizer, [SYSTEM + q for q in QUESTIONS])
        generate(engine, prompts, temperature=0.0)
        assert engine._prefix is not None and engine._prefix.ids
        changed = {k: v + 0.05 * torch.randn_like(v) for k, v in original.items()}
        engine.update_weights(changed)
        assert not engine._prefix.ids
        after = generate(engine, prompts, temperature=0.0)
        fresh = GenerationEngine(model, tokenizer, prefix_cache=False)  # the same (new) weights, no cache
        assert_same_results(after, generate(fresh, prompts, temperature=0.0))
    finally:
        engine.stop()
        model.load_state_dict(original)


def _cache_of(ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A stand-in for the model's keys and values: position p holds token ids[p]."""
    values = torch.tensor(ids, dtype=torch.float32).view(1, 1, -1, 1)
    return [(values, -values)]


prompt_lists = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=24), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(prompt_lists, min_size=1, max_size=5))
def test_the_prefix_served_is_always_a_prefix_of_every_prompt_with_its_own_cache(
    groups: list[list[list[int]]],
) -> None:
    prefix = SharedPrefix()
    for group in groups:
        # every group shares a long opening, as an agent's requests do, then varies
        prompts = [[9] * 10 + p for p in group]
        served = prefix.tokens_for(prompts, _cache_of)
        assert served == 0 or served >= MIN_TOKENS
        for p in prompts:
            assert served < len(p)  # at least one token of each prompt is prefilled
            assert p[:served] == prefix.ids[:served]
        if served:
            assert served == len(prefix.ids)
            keys, values = prefix.layers[0]
            assert keys.flatten().tolist() == [float(t) for t in prefix.ids]
            assert values.flatten().tolist() == [-float(t) for t in prefix.ids]


def test_a_lone_request_uses_the_prefix_but_does_not_learn_one() -> None:
    prefix = SharedPrefix()
    assert prefix.tokens_for([[1] * 20], _cache_of) == 0 and not prefix.ids
    assert prefix.tokens_for([[1] * 20 + [2], [1] * 20 + [3]], _cache_of) == 20
    assert prefix.tokens_for([[1] * 20 + [4, 5]], _cache_of) == 20
    # one that shares too little neither uses nor replaces it
    assert prefix.tokens_for([[1] * 3 + [7] * 20], _cache_of) == 0 and len(prefix.ids) == 20
    # a group of its own replaces it
    assert prefix.tokens_for([[7] * 12 + [1], [7] * 12 + [2]], _cache_of) == 12 and prefix.ids == [7] * 12


def test_identical_prompts_are_prefilled_once_and_each_samples_its_own_tokens(
    loaded: tuple[Any, Any],
) -> None:
    model, tokenizer = loaded
    engine = GenerationEngine(model, tokenizer, prefix_cache=False)
    a, b = prompts_of(tokenizer, ["What is 12 + 30?", "Hello there"])
    group = [a, a, a, b, b]
    params = [SamplingParams(max_tokens=12, temperature=1.0, seed=seed) for seed in range(len(group))]
    before = engine.stats["prefilled_tokens"]
    together = engine.generate(group, params)
    assert engine.stats["prefilled_tokens"] - before == len(a) + len(b)
    alone = [engine.generate([p], [q])[0] for p, q in zip(group, params, strict=True)]
    assert_same_results(together, alone)
    assert len({tuple(r.token_ids) for r in together[:3]}) > 1  # three samples, not one copied thrice
