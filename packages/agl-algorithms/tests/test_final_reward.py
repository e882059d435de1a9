"""The final reward has one owner: the runner records it in the attempt; algorithms read it from there."""

from __future__ import annotations

import asyncio
from typing import Any

import agl.algorithms
import pytest
from agl.algorithms import Baseline
from agl.algorithms.local import LocalGRPO
from agl.store import InMemoryLightningStore
from agl.tracer import emit_reward, final_reward_of, recorded_final_reward
from agl.types import UNSET, Attempt, AttemptedRollout, Rollout, RolloutStatus, Span
from agl.types.semconv import FINAL_REWARD_METADATA_KEY


def reward_span(value: float) -> Span:
    core = emit_reward(value, propagate=False)
    return Span.from_attributes(
        attributes=dict(core.attributes), rollout_id="ro", attempt_id="at", sequence_id=1, name=core.name
    )


def attempted(metadata: dict[str, Any] | None, status: RolloutStatus = "succeeded") -> AttemptedRollout:
    attempt = Attempt(rollout_id="ro", attempt_id="at", sequence_id=1, start_time=0.0, metadata=metadata)
    return AttemptedRollout(rollout_id="ro", input={}, start_time=0.0, status=status, attempt=attempt)


def test_the_key_lives_in_semconv_and_is_still_exported_by_algorithms() -> None:
    assert agl.algorithms.FINAL_REWARD_METADATA_KEY == FINAL_REWARD_METADATA_KEY == "final_reward"


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({FINAL_REWARD_METADATA_KEY: 0.7}, 0.7),
        ({FINAL_REWARD_METADATA_KEY: 3}, 3.0),
        ({FINAL_REWARD_METADATA_KEY: None}, None),  # recorded: the runner found no reward
        ({FINAL_REWARD_METADATA_KEY: "high"}, UNSET),  # unusable: treated as not recorded
        ({FINAL_REWARD_METADATA_KEY: True}, UNSET),
        ({FINAL_REWARD_METADATA_KEY: float("nan")}, UNSET),
        ({}, UNSET),
        (None, UNSET),
    ],
)
def test_recorded_final_reward_reads_the_attempt(metadata: dict[str, Any] | None, expected: Any) -> None:
    rollout = attempted(metadata)
    for source in (rollout, rollout.attempt, metadata):
        assert recorded_final_reward(source) == expected or recorded_final_reward(source) is expected
    assert recorded_final_reward(Rollout(rollout_id="ro", input={}, start_time=0.0)) is UNSET


def test_final_reward_of_prefers_the_record_and_falls_back_to_spans() -> None:
    spans = [reward_span(0.2)]
    assert final_reward_of(attempted({FINAL_REWARD_METADATA_KEY: 0.7}), spans) == 0.7
    assert final_reward_of(attempted({FINAL_REWARD_METADATA_KEY: None}), spans) is None
    assert final_reward_of(attempted({}), spans) == 0.2
    assert final_reward_of(Rollout(rollout_id="ro", input={}, start_time=0.0), spans) == 0.2
    assert final_reward_of(attempted({})) is None


def test_grpo_episodes_use_the_recorded_reward() -> None:
    grpo = LocalGRPO("unused-model-path")
    assert grpo.episode(attempted({FINAL_REWARD_METADATA_KEY: 0.7}), [reward_span(0.2)])[0] == 0.7
    assert grpo.episode(attempted({}), [reward_span(0.2)])[0] == 0.2  # written without the record
    assert grpo.episode(attempted({FINAL_REWARD_METADATA_KEY: 0.7}, status="failed"), [])[0] == 0.0


async def _runner(store: InMemoryLightningStore, count: int, reward: float) -> None:
    """Plays a runner: claims each rollout and records the final reward as LitAgentRunner does."""
    done = 0
    while done < count:
        claimed = await store.dequeue_rollout(worker_id="w")
        if claimed is None:
            await asyncio.sleep(0.01)
            continue
        await store.update_attempt(
            claimed.rollout_id,
            claimed.attempt.attempt_id,
            status="succeeded",
            metadata={FINAL_REWARD_METADATA_KEY: reward},
        )
        done += 1


async def test_grpo_rollouts_come_back_with_the_attempt_that_holds_the_reward() -> None:
    store = InMemoryLightningStore()
    resources = await store.add_resources({})
    grpo = LocalGRPO("unused-model-path")
    runner = asyncio.create_task(_runner(store, 3, 0.9))
    rollouts, spans = await grpo._run_rollouts(
        store, [{"x": 1}, {"x": 2}, {"x": 3}], "train", resources.resources_id
    )
    await runner
    assert spans == [[], [], []]  # no reward span anywhere: only the record has it
    assert [grpo.episode(r, s)[0] for r, s in zip(rollouts, spans, strict=True)] == [0.9, 0.9, 0.9]


async def test_baseline_counts_the_recorded_reward_without_reading_spans() -> None:
    store = InMemoryLightningStore()
    baseline = Baseline(n_epochs=1)
    baseline.set_store(store)
    runner = asyncio.create_task(_runner(store, 2, 0.5))
    await baseline.run(train_dataset=[{"x": 1}, {"x": 2}])
    await runner
    assert baseline.summary.rewards == [0.5, 0.5]
