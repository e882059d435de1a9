"""``max_staleness`` on the VERL path (issues 29 and 30): K > 0 runs verl 0.9.1's own asynchronous trainer
(``colocate_async``) under the agl hooks, with a replay-buffer bound that keeps every sample within K weight
versions; K = 0 leaves the synchronous configuration exactly as it was. Pinned against verl's own classes."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "apps" / "calc_tiny" / "model"
APP = ROOT / "apps" / "train_calc_x.py"
FILES = {"data": {"train_files": "t.parquet", "val_files": "v.parquet"}}


def _app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agl_test_train_calc_x_async", APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _composed(max_staleness: int | None, **config: Any) -> Any:
    from agl.algorithms.verl import VERL

    model = {"actor_rollout_ref": {"model": {"path": str(MODEL)}}}
    return VERL({**model, **config}, device="cpu", max_staleness=max_staleness).compose(
        "t.parquet", "v.parquet"
    )


def test_zero_staleness_is_the_synchronous_configuration_unchanged() -> None:
    from omegaconf import OmegaConf

    unset, zero = _composed(None), _composed(0)
    assert OmegaConf.to_container(unset) == OmegaConf.to_container(zero)
    assert zero.trainer.v1.trainer_mode == "agl_sync"


def test_a_positive_staleness_selects_verls_colocated_async_trainer_with_a_bound_of_k_plus_1() -> None:
    config = _composed(2)  # compose() validates with verl's validate_config too
    v1 = config.trainer.v1
    assert v1.trainer_mode == "agl_colocate_async"
    assert v1.colocate_async.num_warmup_batches == 2
    assert (v1.sampler.max_off_policy_threshold, v1.sampler.max_off_policy_strategy) == (3, "drop")
    # the config's own key works the same as the keyword
    from_config = _composed(None, agentlightning={"max_staleness": 2})
    assert from_config.trainer.v1 == v1


def test_bad_staleness_values_are_refused_with_what_to_give() -> None:
    from agl.algorithms.verl import VERL
    from agl.algorithms.verl.config import compose_config, validate

    with pytest.raises(ValueError, match="max_staleness must be an integer >= 0"):
        VERL(max_staleness=-1)
    with pytest.raises(ValueError, match="max_staleness must be an integer >= 0"):
        compose_config({"agentlightning": {"max_staleness": "2"}})
    config = compose_config(
        {
            "actor_rollout_ref": {"model": {"path": str(MODEL)}},
            "agentlightning": {"max_staleness": 1},
            **FILES,
        }
    )
    config.trainer.v1.trainer_mode = "agl_sync"
    with pytest.raises(ValueError, match="leave trainer_mode unset"):
        validate(config)


def test_the_async_trainer_is_verls_colocate_async_under_the_agl_hooks() -> None:
    from agl.algorithms.verl.trainer import AglPPOTrainerColocateAsync, AglTrainerMixin
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync

    assert get_trainer_cls("agl_colocate_async") is AglPPOTrainerColocateAsync
    mro = AglPPOTrainerColocateAsync.__mro__
    assert mro.index(AglTrainerMixin) < mro.index(PPOTrainerColocateAsync)  # agl's hooks first, then verl's
    trainer: Any = AglPPOTrainerColocateAsync.__new__(
        AglPPOTrainerColocateAsync
    )  # __init__ builds Ray groups
    trainer.config = _composed(1)
    trainer.trainer_mode = trainer.config.trainer.v1.trainer_mode
    trainer._add_prompts_to_generate = lambda n: None
    buffer = trainer._build_replay_buffer()
    assert type(buffer) is ReplayBufferAsync and buffer.max_off_policy_threshold == 2
    assert trainer.trainer_mode == "colocate_async"  # the name verl's async paths compare with


@functools.cache
def _sampler_bound(staleness: int) -> tuple[int, str]:
    """``(max_off_policy_threshold, max_off_policy_strategy)`` as apply_staleness sets them (composed once)."""
    from agl.algorithms.verl.config import compose_config

    sampler = compose_config({"agentlightning": {"max_staleness": staleness}}).trainer.v1.sampler
    return int(sampler.max_off_policy_threshold), str(sampler.max_off_policy_strategy)


@settings(max_examples=200, deadline=None)
@given(
    staleness=st.integers(1, 4),
    submitted=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    trained_at=st.integers(1, 16),
)
def test_verls_replay_buffer_keeps_exactly_the_groups_within_k_versions(
    staleness: int, submitted: list[int], trained_at: int
) -> None:
    """A group submitted at step ``s`` was generated by weights of step ``s - 1`` or later; trained at step
    ``g`` (weights ``g - 1``) it is at most ``g - s`` versions behind. With the bound apply_staleness sets,
    verl's own replay buffer drops exactly the groups further behind than K."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

    buffer = ReplayBufferAsync.__new__(ReplayBufferAsync)
    buffer.max_off_policy_threshold, buffer.max_off_policy_strategy = _sampler_bound(staleness)
    groups = {f"g{i}": s for i, s in enumerate(submitted) if s <= trained_at}
    buffer.prompt_global_steps = {"train": dict(groups)}
    buffer.finished_keys = {"train": set(groups)}
    dropped = buffer._stale_terminal_keys(trained_at, "train")
    assert dropped == {uid for uid, s in groups.items() if trained_at - s > staleness}


def test_the_apps_max_staleness_and_correction_reach_verl(tmp_path: Path) -> None:
    from agl.algorithms.verl.config import compose_config, validate
    from calc_x.verl_run import verl_config

    app = _app()
    sync = verl_config(app.parse_args(["--algorithm", "verl"]), tmp_path)
    assert sync["agentlightning"]["max_staleness"] == 0
    assert sync["algorithm"]["rollout_correction"] == {"rollout_is": None}
    asynchronous = verl_config(app.parse_args(["--algorithm", "verl", "--max-staleness", "2"]), tmp_path)
    assert asynchronous["agentlightning"]["max_staleness"] == 2
    correction = asynchronous["algorithm"]["rollout_correction"]
    assert correction == {"rollout_is": "token", "rollout_is_threshold": 2.0, "bypass_mode": False}
    tis = verl_config(
        app.parse_args(["--algorithm", "verl", "--max-staleness", "1", "--correction", "tis"]), tmp_path
    )
    assert tis["algorithm"]["rollout_correction"]["bypass_mode"] is True
    data = {**asynchronous["data"], "train_files": "t", "val_files": "v"}
    config = compose_config(asynchronous | {"data": data})
    assert config.trainer.v1.trainer_mode == "agl_colocate_async"
    validate(config)


def test_the_cpu_model_server_serves_verls_step_as_its_version() -> None:
    """verl's naive weight sync passes its step: agl's model server stamps answers with it
    (``agl-local-v<step>``), which the bridge reads back as each call's weight version."""
    from agl.algorithms.local import ModelServer

    server = ModelServer(str(MODEL))
    state = {name: tensor.clone() for name, tensor in server.engine.model.state_dict().items()}
    assert server.update_weights(state) == 1  # without a step: the next version
    assert server.update_weights(state, 7) == 7 and server.version == 7
    assert server.update_weights(state) == 8
