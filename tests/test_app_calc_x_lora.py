"""`apps/train_calc_x.py --lora-rank`: LoRA (PEFT) on the embedded model through the app's real command line;
the checkpoints hold the adapter alone, and a resumed run continues from one (issue 31, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from tests.test_app_calc_x import MODEL, run_app


@pytest.mark.slow
@pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="apps/calc_tiny/model not built")
def test_lora_trains_the_embedded_model_and_checkpoints_the_adapter_alone(tmp_path: Path) -> None:
    out = tmp_path / "run"
    common = ("--prompts-per-step", "4", "--n", "4", "--val-size", "16", "--val-every", "0", "--seed", "1")
    lora = ("--lora-rank", "4", "--lora-targets", "q_proj,v_proj", "--lr", "2e-3", "--checkpoint-every", "1")
    result = run_app("--steps", "2", *common, *lora, "--output-dir", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    checkpoints = out / "checkpoint"
    for folder in ("step-2", "final"):
        adapter = json.loads((checkpoints / folder / "adapter_config.json").read_text())
        assert Path(adapter["base_model_name_or_path"]) == MODEL.resolve()  # the note of the base model
        assert adapter["r"] == 4 and set(adapter["target_modules"]) == {"q_proj", "v_proj"}
        assert not (checkpoints / folder / "model.safetensors").exists()  # the adapter alone
    train = [
        json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"train"' in line
    ]
    assert [m["step"] for m in train] == [1, 2] and train[-1]["model_version"] >= 1

    resumed = run_app("--steps", "3", *common, *lora, "--output-dir", str(out), "--resume", str(out))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert (checkpoints / "step-3" / "adapter_config.json").is_file()
