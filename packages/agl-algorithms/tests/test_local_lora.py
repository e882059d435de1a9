"""LoRA on the local path (``GRPOConfig.lora``, :mod:`agl.algorithms.local.lora`; issue 31): the served
weights are the merged ones, checkpoints hold the adapter alone, and an adapter-only checkpoint loaded onto
its base model serves the same greedy answers as the merged model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agl.runner import Trainer, rollout
from agl.testing.tiny_model import build_tiny_model
from agl.tracer import emit_reward
from agl.types import LLM

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from agl.algorithms.local._request import SamplingParams  # noqa: E402  (after the torch check)
from agl.algorithms.local.engine import GenerationEngine  # noqa: E402
from agl.algorithms.local.grpo_core import Sample, grpo_update  # noqa: E402
from agl.algorithms.local.lora import (  # noqa: E402
    LoraSettings,
    is_adapter_dir,
    load_policy,
    lora_settings,
    merged_state_dict,
    served_copy,
    served_model_path,
)
from agl.algorithms.local.server import load_model  # noqa: E402


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny randomly initialised Qwen2ForCausalLM (biased q/k/v projections) with the tiny test tokenizer."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), seed=1, architecture="qwen2")


PROMPTS = [[5, 6, 7, 8], [30, 31, 32], [40, 41, 42, 43, 44]]


def _greedy(model: Any, tokenizer: Any) -> list[list[int]]:
    engine = GenerationEngine(model, tokenizer)
    results = engine.generate(PROMPTS, SamplingParams(max_tokens=12, temperature=0.0))
    return [r.token_ids for r in results]


def _trained_policy(path: Path) -> tuple[Any, Any]:
    """A LoRA policy whose adapter moved (a few GRPO updates): its merged weights differ from the base's."""
    torch.manual_seed(0)
    policy, tokenizer = load_policy(
        path, {"rank": 4, "alpha": 8, "targets": ["q_proj", "v_proj", "down_proj"]}
    )
    optimizer = torch.optim.AdamW(policy.parameters(), lr=5e-2)
    samples = [
        Sample([5, 6, 7, 8, 10, 11, 12], [0] * 4 + [1] * 3, 1.0),
        Sample([5, 6, 7, 8, 20, 21], [0] * 4 + [1] * 2, -1.0),
    ]
    for _ in range(3):
        grpo_update(policy, optimizer, samples, pad_id=0)
    return policy, tokenizer


def test_settings_parse_from_a_rank_a_dict_or_the_dataclass() -> None:
    assert lora_settings(None) is None and lora_settings(0) is None and lora_settings({"rank": 0}) is None
    assert lora_settings(4) == LoraSettings(r=4)
    assert lora_settings({"rank": 2, "alpha": 4, "targets": ["q_proj"]}) == LoraSettings(2, 4, ["q_proj"])
    assert lora_settings(LoraSettings(r=16)) == LoraSettings(r=16)


def test_only_the_adapter_trains_and_the_merged_weights_are_the_base_models_keys(qwen2: Path) -> None:
    base, _ = load_model(qwen2)
    policy, _ = _trained_policy(qwen2)
    merged = merged_state_dict(policy)
    assert set(merged) == set(base.state_dict())
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    changed = [n for n in merged if not torch.equal(merged[n], base.state_dict()[n])]
    assert changed and all(
        n.endswith(("q_proj.weight", "v_proj.weight", "down_proj.weight")) for n in changed
    )
    reference = served_copy(policy).state_dict()  # PEFT's own merge
    for name, tensor in merged.items():
        torch.testing.assert_close(tensor, reference[name])
    assert all(not p.requires_grad or "lora_" in n for n, p in policy.named_parameters())  # left as it was


def test_the_adapter_only_checkpoint_serves_the_merged_models_greedy_answers(
    qwen2: Path, tmp_path: Path
) -> None:
    policy, tokenizer = _trained_policy(qwen2)
    served, _ = load_model(qwen2)  # what the model server holds: the base model, then the merged swap
    engine = GenerationEngine(served, tokenizer)
    engine.update_weights(merged_state_dict(policy))  # the weights guard accepts the merged weights
    merged_answers = [
        r.token_ids for r in engine.generate(PROMPTS, SamplingParams(max_tokens=12, temperature=0.0))
    ]

    checkpoint = tmp_path / "step-3"
    policy.save_pretrained(checkpoint)  # what LocalGRPO.save writes for a LoRA policy
    tokenizer.save_pretrained(checkpoint)
    files = {p.name for p in checkpoint.iterdir()}
    assert is_adapter_dir(checkpoint) and "model.safetensors" not in files  # the adapter alone
    assert (
        sum(p.stat().st_size for p in checkpoint.glob("adapter_model.*"))
        < (qwen2 / "model.safetensors").stat().st_size
    )
    assert Path(served_model_path(checkpoint)) == qwen2.resolve()

    reloaded, reloaded_tokenizer = load_policy(checkpoint, None)  # the base model + the saved adapter
    assert _greedy(served_copy(reloaded), reloaded_tokenizer) == merged_answers
    base, _ = load_model(qwen2)
    base.load_state_dict(merged_state_dict(reloaded), strict=False)
    assert _greedy(base, tokenizer) == merged_answers
    assert _greedy(load_model(qwen2)[0], tokenizer) != merged_answers  # the adapter does change the answers


@rollout
async def length_agent(task: dict[str, Any], llm: LLM) -> None:
    """One chat call through the LLM proxy; reward 1 when the answer has an even number of characters (so a
    group's samples differ and GRPO has something to learn)."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=llm.get_base_url(), api_key="unused", max_retries=2) as client:
        completion = await client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": f"What is {task['x']} + 1?"}],
            max_tokens=8,
            temperature=float((llm.sampling_parameters or {}).get("temperature", 1.0)),
        )
    emit_reward(float(len(completion.choices[0].message.content or "") % 2 == 0))


def _fit(algorithm: Any) -> None:
    trainer = Trainer(algorithm=algorithm, n_runners=1, strategy="shm", progress=False)
    trainer.fit(length_agent, [{"x": i} for i in range(4)])


@pytest.mark.timeout(300)
def test_local_grpo_with_lora_serves_merged_weights_checkpoints_the_adapter_and_resumes(
    qwen2: Path, tmp_path: Path
) -> None:
    from agl.algorithms.local import LocalGRPO

    base = load_model(qwen2)[0].state_dict()
    served: list[bool] = []

    def on_step(metrics: dict[str, Any]) -> None:  # the thread server's model is the one that generates
        model = algorithm.server.engine.model  # pyright: ignore[reportOptionalMemberAccess, reportAttributeAccessIssue]
        now, merged = model.state_dict(), merged_state_dict(algorithm.policy)
        served.append(any(not torch.equal(now[k], base[k]) for k in merged))
        assert all(torch.equal(now[k], merged[k]) for k in merged)

    settings: dict[str, Any] = {"prompts_per_step": 2, "n": 4, "lr": 5e-2, "val_every": 0, "lora": 4}
    checkpoints = str(tmp_path / "checkpoint")
    algorithm = LocalGRPO(
        qwen2,
        steps=2,
        model_server="thread",
        checkpoint_dir=checkpoints,
        checkpoint_every=1,
        on_step=on_step,
        **settings,
    )
    _fit(algorithm)
    assert served and served[-1]  # the served weights moved away from the base model's
    for folder in ("step-2", "final"):
        assert is_adapter_dir(tmp_path / "checkpoint" / folder)
        assert not (tmp_path / "checkpoint" / folder / "model.safetensors").exists()

    resumed = LocalGRPO(
        qwen2, steps=3, checkpoint_dir=checkpoints, checkpoint_every=1, resume=True, **settings
    )
    _fit(resumed)  # the model server process starts from the base model and gets base + adapter, merged
    assert [m["step"] for m in resumed.history] == [1, 2, 3]
    assert resumed.history[-1]["model_version"] >= 1
    assert is_adapter_dir(tmp_path / "checkpoint" / "step-3")
