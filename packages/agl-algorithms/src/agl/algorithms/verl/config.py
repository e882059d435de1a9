"""The verl configuration ``VERL`` runs with: verl's own ``ppo_trainer`` + the project's overrides + the user's dict.

Composed with Hydra from verl's packaged config (struct mode off, so the ``agentlightning`` block and any
key verl knows can be given), then checked with verl's ``validate_config``. The reference's
``agentlightning.*`` keys keep their meaning; LoRA keys (``actor_rollout_ref.model.lora_rank`` ...) pass
through untouched.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._json import is_mapping

__all__ = [
    "AGENT_LOOP_CONFIG",
    "AGL_DEFAULTS",
    "ASYNC_TRAINER_MODE",
    "SYNC_TRAINER_MODE",
    "apply_staleness",
    "check_staleness",
    "compose_config",
    "max_position_embeddings",
    "merge",
    "validate",
]

SYNC_TRAINER_MODE = "agl_sync"
"""``trainer.v1.trainer_mode`` of :class:`~agl.algorithms.verl.trainer.AglPPOTrainerSync` (the default)."""
ASYNC_TRAINER_MODE = "agl_colocate_async"
"""``trainer.v1.trainer_mode`` of :class:`~agl.algorithms.verl.trainer.AglPPOTrainerColocateAsync`."""

AGENT_LOOP_CONFIG = Path(__file__).resolve().parent / "agent_loops.yaml"
"""The agent-loop registry file verl's workers load (``agl_bridge`` → :class:`AglBridgeAgentLoop`)."""

AGL_DEFAULTS: dict[str, Any] = {
    "agentlightning": {
        "store_url": None,  # set by VERL.run(): the HTTP store every process reaches
        "proxy": {"host": "127.0.0.1", "port": None},  # the LLM proxy beside the trainer; None: a free port
        "trace_aggregator": {
            "level": "transition",
            "trajectory_max_prompt_length": 2048,
            "trajectory_max_response_length": 8192,
            "debug": False,
            "mismatch_log_dir": "./mismatch_cases",
        },
        "credit": {"mode": "final", "turn_discount": 0.9},
        "reward_fillna_value": 0.0,
        "rollout_timeout_seconds": 1200.0,
        "temperature": None,  # None: actor_rollout_ref.rollout.temperature
        "val_temperature": None,  # None: actor_rollout_ref.rollout.val_kwargs.temperature
        "max_tokens": None,  # None: data.max_response_length
        # >0: verl's colocate_async trainer, samples at most this many weight versions old (apply_staleness)
        "max_staleness": 0,
    },
    "trainer": {
        "use_v1": True,
        "v1": {"trainer_mode": SYNC_TRAINER_MODE, "sampler": {"sync_refill_failed_groups": True}},
        "n_gpus_per_node": 1,
        "nnodes": 1,
        "logger": ["console"],
        "val_before_train": True,
        "test_freq": -1,
        "save_freq": -1,
        "resume_mode": "disable",
    },
    "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
    "critic": {"enable": False},
    # the agents' rewards come with the rollouts: verl's reward workers only stand by
    "reward": {"num_workers": 1},
    "transfer_queue": {"backend": {"SimpleStorage": {"num_data_storage_units": 2}}},
    "data": {
        "prompt_key": "prompt",
        "filter_overlong_prompts": False,
        "dataloader_num_workers": 0,
        "return_raw_chat": True,
        "max_prompt_length": 512,
        "max_response_length": 512,
        "train_batch_size": 16,
    },
    "actor_rollout_ref": {
        "model": {"override_config": {"attn_implementation": "sdpa"}, "enable_gradient_checkpointing": False},
        "actor": {"use_kl_loss": False, "ppo_mini_batch_size": 16, "ppo_micro_batch_size_per_gpu": 8},
        "rollout": {
            "name": "vllm",
            "mode": "async",
            "n": 4,
            "tensor_model_parallel_size": 1,
            "calculate_log_probs": True,
            "log_prob_micro_batch_size_per_gpu": 8,
            "agent": {
                "default_agent_loop": "agl_bridge",
                "agent_loop_config_path": str(AGENT_LOOP_CONFIG),
                "num_workers": 2,
            },
            "engine_kwargs": {"vllm": {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}},
        },
        "ref": {"log_prob_micro_batch_size_per_gpu": 8},
    },
}


def merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``top`` merged in, nested mappings key by key (copies; ``top`` wins)."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        if is_mapping(value) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def compose_config(user: Mapping[str, Any] | Any | None = None) -> Any:
    """verl's ``ppo_trainer`` config, then :data:`AGL_DEFAULTS`, then ``user`` (a dict or DictConfig)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        base = compose(config_name="ppo_trainer")
    OmegaConf.set_struct(base, False)
    user_dict: Any = (
        OmegaConf.to_container(user, resolve=False) if OmegaConf.is_config(user) else (user or {})
    )
    merged = OmegaConf.merge(base, OmegaConf.create(merge(AGL_DEFAULTS, user_dict)))
    OmegaConf.set_struct(merged, False)
    apply_staleness(merged)
    return merged


def check_staleness(value: Any, name: str) -> int:
    """``value`` as a staleness bound: an integer >= 0 (``ValueError`` naming ``name`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return value


def apply_staleness(config: Any) -> None:
    """Map ``agentlightning.max_staleness`` (K) onto verl's asynchronous mode; K = 0 leaves the synchronous
    trainer as it is.

    With K > 0: ``trainer.v1.trainer_mode=agl_colocate_async`` (verl's ``colocate_async``: generation goes on
    while the update runs), K warm-up batches in flight (as LocalGRPO keeps K batches waiting), and the replay
    buffer's ``max_off_policy_threshold = K + 1`` with ``drop``: a group submitted at step ``s`` was
    generated by weights of step ``s - 1`` or later, so trained at step ``g`` with weights ``g - 1`` it is at
    most ``g - s`` versions behind, and verl drops it when ``g - s + 1`` exceeds the threshold.
    """
    staleness = check_staleness(config.agentlightning.get("max_staleness", 0), "agentlightning.max_staleness")
    if staleness == 0:
        return
    v1 = config.trainer.v1
    v1.trainer_mode = ASYNC_TRAINER_MODE
    v1.setdefault("colocate_async", {})
    v1.colocate_async.num_warmup_batches = staleness
    v1.sampler.max_off_policy_threshold = staleness + 1
    v1.sampler.max_off_policy_strategy = "drop"


def validate(config: Any) -> None:
    """verl's ``validate_config`` plus the checks of the ``agentlightning`` block (ValueError if wrong)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    agl = config.agentlightning
    level = agl.trace_aggregator.level
    if level not in ("transition", "trajectory"):
        raise ValueError(
            f"agentlightning.trace_aggregator.level must be 'transition' or 'trajectory', got {level!r}"
        )
    from ..credit import CreditAssignment

    CreditAssignment.parse(agl.credit.mode, turn_discount=float(agl.credit.turn_discount))
    mode = config.trainer.v1.trainer_mode
    if agl.get("max_staleness", 0) and mode != ASYNC_TRAINER_MODE:
        raise ValueError(
            f"agentlightning.max_staleness > 0 runs trainer.v1.trainer_mode={ASYNC_TRAINER_MODE}, not {mode!r}: "
            "leave trainer_mode unset"
        )
    if config.actor_rollout_ref.rollout.mode != "async":
        raise ValueError("VERL needs actor_rollout_ref.rollout.mode=async (agents call vLLM's HTTP server)")
    _check_lengths(config)
    checked = config
    if config.actor_rollout_ref.rollout.name == "vllm" and not _vllm_importable():
        # verl's LoRA-rank check imports vLLM; without it (CPU machines) check the rank against vLLM's
        # largest allowed one here and let verl check the rest.
        from omegaconf import OmegaConf

        rank = int(config.actor_rollout_ref.model.get("lora_rank", 0) or 0)
        if rank > 512:
            raise ValueError(f"lora_rank must be less than or equal to 512 for vLLM, but got {rank}")
        checked = copy.deepcopy(config)
        OmegaConf.update(checked, "actor_rollout_ref.rollout.name", "vllm (not installed)")
    validate_config(
        config=checked, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )


def max_position_embeddings(model_path: str | Path) -> int | None:
    """The model's ``max_position_embeddings`` from its local ``config.json`` (``None`` when unknown, e.g.
    a hub id): the most tokens vLLM (and verl's check before it) accepts as ``max_model_len``."""
    import json

    path = Path(str(model_path)) / "config.json"
    if not path.is_file():
        return None
    try:
        data: Any = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not is_mapping(data):
        return None
    value: Any = data.get("max_position_embeddings")
    text: Any = data.get("text_config")
    if value is None and is_mapping(text):
        value = text.get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def _check_lengths(config: Any) -> None:
    """``rollout.max_model_len`` within the model's positions (verl's vLLM server checks it only once the
    GPU machine is up)."""
    rollout = config.actor_rollout_ref.rollout
    limit = max_position_embeddings(config.actor_rollout_ref.model.path)
    max_model_len = rollout.get("max_model_len")
    if limit is not None and max_model_len is not None and int(max_model_len) > limit:
        raise ValueError(
            f"actor_rollout_ref.rollout.max_model_len ({max_model_len}) is larger than the model's "
            f"max_position_embeddings ({limit}): vLLM refuses it; set it to at most {limit}"
        )


def _vllm_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None
