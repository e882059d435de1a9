"""The GRPO update: advantages, sample building, and one step moving probabilities the right way."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from agl.algorithms.adapter import Turn
from agl.algorithms.local import GRPOConfig, LocalGRPO
from agl.algorithms.local.grpo_core import (
    Sample,
    episode_samples,
    group_advantages,
    grpo_update,
    sequence_logprobs,
)
from agl.testing.tiny_model import build_tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st


@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.0, 0.5, 1.0])), min_size=1, max_size=40))
def test_group_advantages_are_normalised_per_group(items: list[tuple[int, float]]) -> None:
    groups = [g for g, _ in items]
    rewards = [r for _, r in items]
    advantages = group_advantages(rewards, groups)
    for g in set(groups):
        idx = [i for i, x in enumerate(groups) if x == g]
        values = [rewards[i] for i in idx]
        if len(set(values)) == 1:
            assert all(advantages[i] is None for i in idx)  # no signal: dropped
            continue
        adv = [a for a in (advantages[i] for i in idx) if a is not None]
        assert len(adv) == len(idx)  # none dropped
        mean = sum(adv) / len(adv)
        std = math.sqrt(sum((a - mean) ** 2 for a in adv) / len(adv))
        assert abs(mean) < 1e-6
        assert abs(std - 1.0) < 1e-3
        for i in idx:  # a better reward never gets a lower advantage
            for j in idx:
                if rewards[i] > rewards[j]:
                    better, worse = advantages[i], advantages[j]
                    assert better is not None and worse is not None and better > worse


def test_group_advantages_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError):
        group_advantages([1.0], [0, 1])


def test_episode_samples_merge_turns_that_extend_each_other() -> None:
    turns = [Turn([1, 2, 3], [4, 5]), Turn([1, 2, 3, 4, 5, 6, 7], [8, 9])]
    (sample,) = episode_samples(turns, 0.5)
    assert sample.ids == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert sample.mask == [0, 0, 0, 1, 1, 0, 0, 1, 1]
    assert sample.advantage == 0.5


def test_episode_samples_split_turns_that_do_not_extend() -> None:
    turns = [Turn([1, 2], [3]), Turn([9, 9, 9], [4, 4]), Turn([1], [])]
    samples = episode_samples(turns, -1.0)
    assert [s.ids for s in samples] == [[1, 2, 3], [9, 9, 9, 4, 4]]
    assert [s.mask for s in samples] == [[0, 0, 1], [0, 0, 0, 1, 1]]


@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(1, 50), min_size=1, max_size=5),
            st.lists(st.integers(1, 50), min_size=1, max_size=5),
        ),
        min_size=1,
        max_size=4,
    )
)
@settings(max_examples=50)
def test_episode_samples_keep_every_generated_token_once(raw: list[tuple[list[int], list[int]]]) -> None:
    # turns that extend the history as a real conversation does
    turns, history = [], []
    for extra, response in raw:
        prompt = history + extra
        turns.append(Turn(prompt, response))
        history = prompt + response
    (sample,) = episode_samples(turns, 1.0)
    generated = [t for t, m in zip(sample.ids, sample.mask, strict=False) if m]
    assert generated == [t for turn in turns for t in turn.response_ids]
    assert sample.ids == history


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-grpo"))


def test_one_update_raises_the_positive_sample_and_lowers_the_negative(tiny: Path) -> None:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    prompt = [5, 6, 7, 8]
    good, bad = [10, 11, 12], [20, 21, 22]
    samples = [Sample(prompt + good, [0] * 4 + [1] * 3, 1.0), Sample(prompt + bad, [0] * 4 + [1] * 3, -1.0)]

    def response_logprob(tokens: list[int]) -> float:
        ids = torch.tensor([prompt + tokens])
        with torch.no_grad():
            return float(sequence_logprobs(model, ids, torch.ones_like(ids))[0, len(prompt) :].sum())

    good_before, bad_before = response_logprob(good), response_logprob(bad)
    prompt_before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    stats = grpo_update(model, optimizer, samples, pad_id=0)
    assert stats["tokens"] == 6
    assert response_logprob(good) > good_before
    assert response_logprob(bad) < bad_before
    assert any(not torch.equal(a, b) for a, b in zip(prompt_before, model.parameters(), strict=False))


def test_zero_advantage_and_empty_batches_do_not_move_weights(tiny: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    assert grpo_update(model, optimizer, [], pad_id=0)["tokens"] == 0
    grpo_update(model, optimizer, [Sample([1, 2, 3], [0, 1, 1], 0.0)], pad_id=0)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=False))


def test_clipping_stops_the_ratio_running_away(tiny: Path) -> None:
    """With several mini-batch steps on the same data, the clipped objective has zero gradient once the
    ratio leaves [1 - eps, 1 + eps] in the advantage's direction."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    samples = [Sample([5, 6, 7, 10, 11], [0, 0, 0, 1, 1], 1.0)]
    optimizer = torch.optim.SGD(model.parameters(), lr=5.0)
    stats = grpo_update(model, optimizer, samples, pad_id=0, epochs=6, clip_eps=0.1)
    assert stats["clip_fraction"] > 0


def test_local_grpo_validates_settings() -> None:
    with pytest.raises(TypeError, match="unknown"):
        LocalGRPO("x", bogus=1)
    with pytest.raises(ValueError, match="n >= 2"):
        LocalGRPO("x", n=1)
    algo = LocalGRPO("x", GRPOConfig(steps=3), lr=1e-3)
    assert algo.config.steps == 3 and algo.config.lr == 1e-3
