"""`apps/train_calc_x.py` end to end: store, runners, tracer, LLM proxy, adapter and LocalGRPO on the
embedded model, through the app's real command line."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "apps" / "train_calc_x.py"
MODEL = ROOT / "apps" / "calc_tiny" / "model"


def run_app(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(APP), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@pytest.mark.slow
@pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="apps/calc_tiny/model not built")
def test_three_steps_through_the_whole_system(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_app(
        "--steps",
        "3",
        "--prompts-per-step",
        "4",
        "--n",
        "4",
        "--val-size",
        "16",
        "--val-every",
        "2",
        "--output-dir",
        str(out),
        "--seed",
        "1",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"validation accuracy: \d+\.\d% -> \d+\.\d%", last), last

    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in lines if m["kind"] == "train"]
    validations = [m for m in lines if m["kind"] == "validation"]
    assert [m["step"] for m in train] == [1, 2, 3]
    assert [m["step"] for m in validations] == [0, 2, 3]
    assert all(m["failed"] == 0 for m in lines)
    assert all(m["generated_tokens"] > 0 and m["rollout_s"] > 0 for m in train)
    assert (out / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "checkpoint" / "final" / "config.json").exists()

    from agl.store import SqlLightningStore

    async def inspect() -> None:
        store = SqlLightningStore(f"sqlite:///{out / 'store.sqlite'}")
        try:
            rollouts = (await store.query_rollouts()).items
            assert len(rollouts) == 3 * 4 * 4 + 3 * 16
            assert {r.status for r in rollouts} == {"succeeded"}
            assert {r.mode for r in rollouts} == {"train", "val"}
            from agl.tracer import find_final_reward

            for rollout in rollouts[:5]:
                spans = (await store.query_spans(rollout.rollout_id)).items
                assert "agentlightning.llm_call" in {s.name for s in spans}  # recorded by the LLM proxy
                assert find_final_reward(spans) in (0.0, 1.0)  # emitted by the agent
        finally:
            await store.close()

    asyncio.run(inspect())


def test_verl_is_announced_as_not_yet_available() -> None:
    result = run_app("--algorithm", "verl", timeout=60)
    assert result.returncode == 2
    assert "not yet available" in result.stderr


def test_bad_store_url_is_a_clear_error(tmp_path: Path) -> None:
    result = run_app("--store", "mongodb://x", "--output-dir", str(tmp_path), timeout=120)
    assert result.returncode != 0
    assert "--store" in result.stderr
