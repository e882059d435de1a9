"""The defects an audit of the VERL path against verl 0.9.1 found (issue 29), each pinned on CPU:
a ``max_model_len`` the embedded model does not have, a proxy not asked for logprobs, outputs without the
weight-version fields verl's metrics read, the trainer taking verl's async replay buffer, ``agl/*`` metrics
counting verl's padding rows, an empty training rollout verl does not refill, and the served model name
under verl's Prometheus option."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, cast

import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "apps" / "calc_tiny" / "model"
APP = ROOT / "apps" / "train_calc_x.py"


def _app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agl_test_train_calc_x", APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# -- 1. max_model_len ---------------------------------------------------------------------------


def test_the_app_asks_for_no_more_positions_than_the_model_has(tmp_path: Path) -> None:
    import json

    from agl.algorithms.verl.config import compose_config, validate
    from calc_x.verl_run import verl_config

    args = _app().parse_args(["--algorithm", "verl"])
    config = verl_config(args, tmp_path)
    limit = json.loads((MODEL / "config.json").read_text())["max_position_embeddings"]
    assert limit == 512
    rollout = config["actor_rollout_ref"]["rollout"]
    assert rollout["max_model_len"] <= limit
    data = config["data"]
    assert data["max_prompt_length"] + data["max_response_length"] <= rollout["max_model_len"]
    validate(compose_config(config | {"data": {**data, "train_files": "t", "val_files": "v"}}))


def test_the_apps_checkpoint_resume_and_cache_flags_become_verls_own_settings(tmp_path: Path) -> None:
    """``--checkpoint-every``, ``--resume`` and ``--keep-cache-engine`` drive verl's settings (issues 29, 31)."""
    from agl.algorithms.verl.config import compose_config, validate
    from calc_x.verl_run import verl_config

    app = _app()
    fresh = verl_config(app.parse_args(["--algorithm", "verl", "--steps", "7"]), tmp_path)
    trainer = fresh["trainer"]
    assert (trainer["save_freq"], trainer["resume_mode"], trainer["val_before_train"]) == (5, "disable", True)
    assert trainer["default_local_dir"] == str(tmp_path / "checkpoint")
    assert fresh["actor_rollout_ref"]["rollout"]["free_cache_engine"] is True
    argv = [
        "--algorithm",
        "verl",
        "--checkpoint-every",
        "0",
        "--keep-cache-engine",
        "--resume",
        str(tmp_path),
    ]
    resumed = verl_config(app.parse_args([*argv, "--steps", "7"]), tmp_path)
    trainer = resumed["trainer"]
    # no checkpoint yet: verl starts afresh (and validates first); 0 saves after the last step only
    assert (trainer["save_freq"], trainer["resume_mode"], trainer["val_before_train"]) == (7, "auto", True)
    assert resumed["actor_rollout_ref"]["rollout"]["free_cache_engine"] is False
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "latest_checkpointed_iteration.txt").write_text("3")
    assert (
        verl_config(app.parse_args([*argv, "--steps", "7"]), tmp_path)["trainer"]["val_before_train"] is False
    )
    data = resumed["data"]
    validate(compose_config(resumed | {"data": {**data, "train_files": "t", "val_files": "v"}}))


def test_validate_refuses_a_max_model_len_over_the_models_positions() -> None:
    from agl.algorithms.verl.config import compose_config, validate

    config = compose_config(
        {"actor_rollout_ref": {"model": {"path": str(MODEL)}, "rollout": {"max_model_len": 1024}}}
    )
    with pytest.raises(ValueError, match=r"max_model_len \(1024\).*max_position_embeddings \(512\)"):
        validate(config)


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


# -- 2. logprobs ----------------------------------------------------------------------------------


async def test_the_proxy_the_verl_path_builds_asks_for_logprobs() -> None:
    from agl.algorithms.verl.runtime import BackendPublisher
    from agl.proxy import LLMProxy
    from agl.store import InMemoryLightningStore

    store = InMemoryLightningStore()
    built = BackendPublisher(store)
    given = BackendPublisher(store, proxy=LLMProxy(store=store))
    try:
        for publisher in (built, given):
            await publisher.set_backends(["127.0.0.1:9"], "m")
            assert publisher.proxy is not None and publisher.proxy.settings.request_logprobs is True
    finally:
        await built.close()
        await given.close()


# -- the bridge with a stand-in store: weight versions, logprobs, empty rollouts ------------------


class _Store:
    """Answers the bridge's three calls: the rollout is finished at once, with ``spans`` recorded."""

    def __init__(self, spans: list[Any], status: str = "succeeded") -> None:
        self.spans, self.status = spans, status

    async def enqueue_rollout(self, **kwargs: Any) -> Any:
        return SimpleNamespace(rollout_id="ro-1")

    async def wait_for_rollouts(self, rollout_ids: list[str], timeout: float) -> list[Any]:
        return [SimpleNamespace(rollout_id=rollout_ids[0], status=self.status)]

    async def query_spans(self, rollout_id: str, attempt_id: str) -> Any:
        return SimpleNamespace(items=self.spans)


class _Adapter:
    def __init__(self, triplets: list[Any]) -> None:
        self.triplets = triplets

    def adapt(self, spans: list[Any]) -> list[Any]:
        return self.triplets


def _triplet(prompt: list[int], response: list[int], logprobs: list[float] | None = None) -> Any:
    from agl.types import Triplet

    answer: dict[str, Any] = {"token_ids": response}
    if logprobs is not None:
        answer["logprobs"] = logprobs
    return Triplet(prompt={"token_ids": prompt}, response=answer, reward=None)


def _call_span(fingerprint: str | None = None) -> Any:
    from agl.algorithms.local.versions import SYSTEM_FINGERPRINT_ATTRIBUTE
    from agl.testing.spans import make_span

    attributes = {SYSTEM_FINGERPRINT_ATTRIBUTE: fingerprint} if fingerprint else {}
    return make_span("ro-1", "at-1", 1, name="openai.chat.completion", attributes=attributes)


async def _run_bridge(
    monkeypatch: pytest.MonkeyPatch,
    triplets: list[Any],
    mode: str,
    global_steps: int = 3,
    spans: list[Any] | None = None,
) -> list[Any]:
    import agl.tracer
    from agl.algorithms.verl.bridge import AglBridgeAgentLoop
    from agl.algorithms.verl.config import compose_config
    from agl.algorithms.verl.runtime import AglRuntime, set_runtime
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    monkeypatch.setattr(agl.tracer, "find_final_reward", lambda spans: 1.0)
    config = compose_config({"actor_rollout_ref": {"model": {"path": str(MODEL)}}})
    if spans is None:
        spans = [_call_span()] if triplets else []
    set_runtime(AglRuntime(store=_Store(spans), adapter=_Adapter(triplets)))
    loop = AglBridgeAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=None,  # pyright: ignore[reportArgumentType]
        tokenizer=AutoTokenizer.from_pretrained(MODEL),
        processor=None,  # pyright: ignore[reportArgumentType]
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
    )
    row = {
        "agl_task": '{"question": "What is 1 + 1?"}',
        "agl_mode": mode,
        "raw_prompt": [{"role": "user", "content": "What is 1 + 1?"}],
    }
    try:
        # verl's @register types the class as AgentLoopBase, whose run returns one output; the bridge returns a list
        return cast("list[Any]", await loop.run({}, **row, uid="u0", session_id=0, global_steps=global_steps))
    finally:
        set_runtime(None)


@pytest.mark.parametrize(("mode", "version"), [("train", 2), ("val", 3)])
async def test_outputs_carry_the_weight_version_verls_metrics_read(
    monkeypatch: pytest.MonkeyPatch, mode: str, version: int
) -> None:
    import numpy as np

    outputs = await _run_bridge(monkeypatch, [_triplet([1, 2], [3, 4], [-0.5, -0.25])], mode)
    (out,) = outputs
    assert out.extra_fields["min_global_steps"] == version == out.extra_fields["max_global_steps"]
    # what trainer_base._compute_metrics does with the tags verl builds from these fields
    assert np.array([out.extra_fields["min_global_steps"]], dtype=int).tolist() == [version]


async def test_outputs_carry_the_versions_the_model_server_recorded_on_the_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In verl's asynchronous mode a rollout's calls may span a weight update: agl's model server stamps each
    answer with its version, and the outputs carry the oldest and newest (submitted at step 3: version 2)."""
    spans = [_call_span("agl-local-v4"), _call_span("agl-local-v3"), _call_span("another-server")]
    (out,) = await _run_bridge(monkeypatch, [_triplet([1, 2], [3, 4], [-0.5, -0.25])], "train", spans=spans)
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (3, 4)


async def test_outputs_always_carry_logprobs_and_count_the_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    triplets = [_triplet([1, 2], [3, 4], [-0.5, -0.25]), _triplet([5, 6], [7, 8, 9])]
    outputs = await _run_bridge(monkeypatch, triplets, "train")
    assert [o.response_logprobs for o in outputs] == [[-0.5, -0.25], [0.0, 0.0, 0.0]]
    assert all("rollout_log_probs" in o.as_dict() for o in outputs)  # verl refuses mixed presence
    assert outputs[-1].extra_fields["agl_rollout_stats"]["samples_without_logprobs"] == 1


async def test_a_training_rollout_without_a_sample_fails_its_session_so_verl_refills_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agl.algorithms.verl.bridge import NoTrainingSample

    with pytest.raises(NoTrainingSample, match="gave no sample"):
        await _run_bridge(monkeypatch, [], "train")


async def test_a_validation_rollout_without_a_sample_counts_as_a_miss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (out,) = await _run_bridge(monkeypatch, [], "val")
    assert out.response_mask == [0] and len(out.response_ids) == 1
    assert out.prompt_ids and out.extra_fields["min_global_steps"] == 3
    assert out.reward_score == 1.0  # find_final_reward's answer (patched): the rollout's own reward


# -- trainer --------------------------------------------------------------------------------------


def _trainer(**rollout: Any) -> Any:
    from agl.algorithms.verl.config import compose_config
    from agl.algorithms.verl.trainer import AglPPOTrainerSync

    trainer = AglPPOTrainerSync.__new__(AglPPOTrainerSync)  # verl's __init__ builds Ray worker groups
    trainer.config = compose_config(
        {"actor_rollout_ref": {"model": {"path": "/models/qwen"}, "rollout": rollout}}
    )
    return trainer


def test_the_trainer_runs_as_verls_sync_mode() -> None:
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

    trainer = _trainer()
    trainer.trainer_mode = trainer.config.trainer.v1.trainer_mode
    assert trainer.trainer_mode == "agl_sync"  # the registered name verl looks up
    trainer._add_prompts_to_generate = lambda n: None
    buffer = trainer._build_replay_buffer()
    assert type(buffer) is ReplayBuffer and not isinstance(buffer, ReplayBufferAsync)
    assert trainer.trainer_mode == "sync"


def test_agl_metrics_do_not_count_verls_padding_rows() -> None:
    from agl.algorithms.verl.trainer import conversion_metrics

    stats = {"rollouts": 1, "triplets": 2, "samples_without_logprobs": 1}
    real = [{"agl_truncated": 1}, {"agl_truncated": 0, "agl_rollout_stats": stats}]
    rows = [*real, real[1], real[1]]  # verl pads with copies of real rows
    metrics = conversion_metrics(rows, padding=[False, False, True, True])
    assert metrics["agl/samples"] == 2 and metrics["agl/truncated_responses"] == 1
    assert metrics["agl/rollouts"] == 1 and metrics["agl/triplets"] == 2
    assert metrics["agl/samples_without_logprobs"] == 1


@pytest.mark.parametrize(
    ("prometheus", "name"),
    [
        ({}, "/models/qwen"),
        ({"enable": True, "served_model_name": "/models/qwen"}, "qwen"),
        ({"enable": False, "served_model_name": "elsewhere"}, "/models/qwen"),
    ],
)
def test_served_model_name_follows_verls_vllm_server(prometheus: dict[str, Any], name: str) -> None:
    assert _trainer(prometheus=prometheus).served_model_name() == name
