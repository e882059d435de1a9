"""VERL pieces with verl 0.9 itself, on CPU: config + validate_config, verl's own post-processing and
multi-trajectory GRPO advantage on batches our conversion built (with the credit options), the dataset
round trip through verl's RLHFDataset, the trainer hook publishing proxy backends and ``main_llm``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agl.testing.child import run_python

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

import numpy as np
import torch
from agl.algorithms.adapter import Turn
from agl.algorithms.credit import CreditAssignment
from agl.algorithms.verl.bridge import TOKEN_RETURNS_KEY, AglAgentLoopOutput, to_agent_loop_output
from agl.algorithms.verl.config import AGENT_LOOP_CONFIG, compose_config, validate
from agl.algorithms.verl.convert import TraceLevel, convert_rollout
from agl.algorithms.verl.dataset import read_task, write_tasks
from agl.algorithms.verl.trainer import credit_advantages

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "apps" / "calc_tiny" / "model"


def base_config(**agl: Any) -> Any:
    user = {
        "actor_rollout_ref": {"model": {"path": str(MODEL)}},
        "data": {"train_files": "train.parquet", "val_files": "val.parquet"},
    }
    if agl:
        user["agentlightning"] = agl
    return compose_config(user)


# -- config -----------------------------------------------------------------------------------


def test_composed_config_passes_verls_validate_config() -> None:
    config = base_config()
    validate(config)
    assert config.trainer.use_v1 is True and config.trainer.v1.trainer_mode == "agl_sync"
    assert config.trainer.v1.sampler.sync_refill_failed_groups is True
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "agl_bridge"
    assert config.actor_rollout_ref.rollout.mode == "async"
    assert config.algorithm.adv_estimator == "grpo"
    assert config.agentlightning.trace_aggregator.level == "transition"
    assert config.agentlightning.trace_aggregator.trajectory_max_response_length == 8192
    # verl's own defaults are still there underneath
    assert config.actor_rollout_ref.actor.optim.lr > 0
    assert config.actor_rollout_ref.rollout.prompt_length == config.data.max_prompt_length


def test_user_keys_win_and_lora_passes_through() -> None:
    config = compose_config(
        {
            "actor_rollout_ref": {"model": {"path": str(MODEL), "lora_rank": 16, "lora_alpha": 32}},
            "agentlightning": {
                "trace_aggregator": {"level": "trajectory"},
                "credit": {"mode": "turn-discount"},
            },
            "trainer": {"total_training_steps": 3},
        }
    )
    validate(config)
    assert config.actor_rollout_ref.model.lora_rank == 16 and config.actor_rollout_ref.model.lora_alpha == 32
    assert config.agentlightning.trace_aggregator.level == "trajectory"
    assert config.agentlightning.trace_aggregator.trajectory_max_prompt_length == 2048  # default kept
    assert config.trainer.total_training_steps == 3 and config.trainer.v1.trainer_mode == "agl_sync"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"agentlightning": {"trace_aggregator": {"level": "episode"}}}, "trace_aggregator.level"),
        ({"agentlightning": {"credit": {"mode": "sometimes"}}}, "credit mode"),
        ({"actor_rollout_ref": {"rollout": {"mode": "sync"}}}, "rollout.mode=async"),
        ({"actor_rollout_ref": {"model": {"lora_rank": 1024}}}, "lora_rank"),
    ],
)
def test_bad_config_is_refused_with_the_key(override: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, AssertionError), match=message):
        validate(compose_config({"actor_rollout_ref": {"model": {"path": str(MODEL)}}} | override))


def test_the_agent_loop_registry_resolves_to_the_bridge() -> None:
    from hydra.utils import get_class
    from omegaconf import ListConfig, OmegaConf

    loaded = OmegaConf.load(AGENT_LOOP_CONFIG)
    assert isinstance(loaded, ListConfig)
    (entry,) = loaded
    assert entry.name == "agl_bridge"
    from agl.algorithms.verl.bridge import AglBridgeAgentLoop

    assert get_class(entry._target_) is AglBridgeAgentLoop


def test_agl_sync_is_registered_and_is_verls_sync_trainer() -> None:
    from agl.algorithms.verl.trainer import AglPPOTrainerSync
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls

    assert get_trainer_cls("agl_sync") is AglPPOTrainerSync
    assert issubclass(AglPPOTrainerSync, PPOTrainerSync)
    assert not issubclass(AglPPOTrainerSync, RayPPOTrainer)


# -- VERL construction and run() without a GPU ------------------------------------------------


def test_verl_constructs_without_verl_and_run_names_the_extra() -> None:
    code = (
        "import sys; sys.modules.update({m: None for m in ('verl', 'ray', 'transfer_queue')})\n"
        "import agl.algorithms as a\n"
        "algo = a.VERL({'trainer': {'total_training_steps': 1}})\n"
        "try:\n    algo.run([{'q': 1}])\nexcept RuntimeError as e:\n    print('ERR', e)\n"
    )
    out = run_python(code)
    assert "ERR VERL needs verl, ray, transfer_queue" in out and "--extra verl" in out


def test_run_on_a_machine_without_vllm_or_gpu_says_what_is_missing() -> None:
    from agl.algorithms import VERL

    with pytest.raises(RuntimeError, match=r"vLLM|CUDA GPU"):
        VERL({}).run([{"q": 1}])
    composed = VERL({"actor_rollout_ref": {"model": {"path": str(MODEL)}}}).compose("t.parquet", "v.parquet")
    assert composed.data.train_files == "t.parquet"


# -- verl's own post-processing and advantage on our samples --------------------------------------


def test_as_dict_puts_the_reward_on_the_last_token_and_keeps_our_returns() -> None:
    turns = [Turn([1, 2], [3, 4], [-0.1, -0.2]), Turn([1, 2, 3, 4, 9], [5], [-0.3], reward=1.0)]
    credit = CreditAssignment("turn-discount", turn_discount=0.5)
    (sample,), _ = convert_rollout(
        turns, level="trajectory", max_prompt_length=8, max_response_length=8, credit=credit
    )
    out = to_agent_loop_output(sample, "ro-1", num_turns=2).as_dict()
    assert out["prompts"].tolist() == [1, 2]
    assert out["responses"].tolist() == [3, 4, 9, 5]
    assert out["response_mask"].tolist() == [1, 1, 0, 1]
    assert out["rollout_log_probs"].tolist() == pytest.approx([-0.1, -0.2, 0.0, -0.3])
    assert out["rm_scores"].tolist() == [0.0, 0.0, 0.0, 1.0]
    assert out[TOKEN_RETURNS_KEY].tolist() == [0.5, 0.5, 0.0, 1.0]
    assert out["extra_fields"]["agl_rollout_id"] == "ro-1"


def _batch(credit: CreditAssignment, level: TraceLevel = "transition") -> tuple[Any, list[str]]:
    """Two tasks x 3 sessions of 2-turn calc-like rollouts, as verl's TQ would hold them."""
    from verl.protocol import DataProto

    outputs: list[AglAgentLoopOutput] = []
    keys: list[str] = []
    finals = {("a", 0): 1.0, ("a", 1): 0.0, ("a", 2): 1.0, ("b", 0): 0.0, ("b", 1): 1.0, ("b", 2): 0.0}
    for (uid, session), reward in finals.items():
        turns = [Turn([7, 8], [1, 2, 3]), Turn([7, 8, 1, 2, 3, 4], [5, 6], reward=reward)]
        samples, _ = convert_rollout(
            turns, level=level, max_prompt_length=16, max_response_length=16, credit=credit
        )
        for i, s in enumerate(samples):
            outputs.append(to_agent_loop_output(s, f"ro-{uid}{session}", 2))
            keys.append(f"{uid}_{session}_{i}")
    dicts = [o.as_dict() for o in outputs]
    width = max(len(d["responses"]) for d in dicts)

    def pad(name: str) -> torch.Tensor:
        return torch.stack(
            [torch.nn.functional.pad(d[name].float(), (0, width - len(d[name]))) for d in dicts]
        )

    data = DataProto.from_dict(
        tensors={
            "response_mask": pad("response_mask").long(),
            "token_level_rewards": pad("rm_scores"),
            "rm_scores": pad("rm_scores"),
            TOKEN_RETURNS_KEY: pad(TOKEN_RETURNS_KEY),
        },
        non_tensors={"uid": np.array([k.split("_")[0] for k in keys], dtype=object)},
    )
    return data, keys


@pytest.mark.parametrize("level", ["transition", "trajectory"])
def test_verls_multi_trajectory_grpo_matches_our_final_credit(level: TraceLevel) -> None:
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    data, keys = _batch(CreditAssignment(), level)
    ours = credit_advantages(
        keys, data.batch["rm_scores"].sum(-1), data.batch[TOKEN_RETURNS_KEY], data.batch["response_mask"]
    )
    verl_out = compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator=AdvantageEstimator.GRPO, num_repeat=3
    )
    assert torch.allclose(verl_out.batch["advantages"], ours, atol=1e-5)
    # a session's rows share one advantage: positive for the successes, negative for the failures
    mask = data.batch["response_mask"].bool()
    for row, key in enumerate(keys):
        values = verl_out.batch["advantages"][row][mask[row]]
        assert torch.allclose(values, values[0].expand_as(values))
        success = {"a_0", "a_2", "b_1"}
        assert (values[0] > 0) == (key.rsplit("_", 1)[0] in success)


def test_turn_discount_credit_gives_the_earlier_turn_less() -> None:
    data, keys = _batch(CreditAssignment("turn-discount", turn_discount=0.5))
    adv = credit_advantages(
        keys, data.batch["rm_scores"].sum(-1), data.batch[TOKEN_RETURNS_KEY], data.batch["response_mask"]
    )
    first, last = adv[keys.index("a_0_0")], adv[keys.index("a_0_1")]
    assert float(first[0]) < float(last[0])  # turn 0 of a success: 0.5 vs 1.0 return
    assert torch.allclose(
        adv[keys.index("a_1_0")][:3], adv[keys.index("a_1_1")][0].expand(3)
    )  # failure: 0 both
    assert float((adv * (1 - data.batch["response_mask"])).abs().sum()) == 0.0


# -- data -------------------------------------------------------------------------------------


def test_written_tasks_read_back_through_verls_rlhf_dataset(tmp_path: Path) -> None:
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tasks = [{"question": f"What is {i} + 1?", "result": i + 1} for i in range(5)]
    path = write_tasks(tasks, tmp_path / "train.parquet", "train")
    config = base_config()
    dataset = RLHFDataset(str(path), AutoTokenizer.from_pretrained(MODEL), config.data)
    assert len(dataset) == 5
    row = dataset[3]
    assert row["raw_prompt"] == [{"role": "user", "content": "What is 3 + 1?"}]
    assert json.loads(row["agl_task"]) == tasks[3] and row["agl_mode"] == "train"
    assert read_task(row) == (tasks[3], "train")
    assert row["index"] == 3


def test_write_tasks_refuses_what_it_cannot_carry(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="JSON"):
        write_tasks([object()], tmp_path / "x.parquet", "train")
    with pytest.raises(ValueError, match="no val tasks"):
        write_tasks([], tmp_path / "x.parquet", "val")


def test_conversion_counters_reach_verls_metrics_through_extra_fields() -> None:
    from agl.algorithms.verl.trainer import conversion_metrics

    turns = [
        Turn([1, 2], [3, 4, 5, 6]),
        Turn([9, 9], [7], reward=1.0),
    ]  # the second does not extend the first
    samples, stats = convert_rollout(turns, level="trajectory", max_prompt_length=8, max_response_length=3)
    outputs = [
        to_agent_loop_output(s, "ro-1", 2, stats=stats if i == len(samples) - 1 else None).as_dict()
        for i, s in enumerate(samples)
    ]
    metrics = conversion_metrics([o["extra_fields"] for o in outputs])
    assert metrics["agl/samples"] == 2
    assert metrics["agl/truncated_responses"] == 1 == stats.truncated_responses
    assert metrics["agl/prefix_mismatches"] == 1
    assert metrics["agl/rollouts"] == 1 and metrics["agl/triplets"] == 2
