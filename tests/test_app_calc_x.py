"""`apps/train_calc_x.py` end to end: store, runners, tracer, LLM proxy, adapter and LocalGRPO on the
embedded model, through the app's real command line."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    assert all(m["step_cpu_s"] == pytest.approx(m["rollout_cpu_s"] + m["update_cpu_s"]) for m in train)
    assert all(m["step_cpu_s"] > 0 for m in train)
    first = next(line for line in result.stdout.splitlines() if line.startswith("first training step"))
    assert re.search(r"torch [\d.]+s, model load \(transformers\) [\d.]+s, .*LLM proxy [\d.]+s", first), first
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
                names = {s.name for s in spans}
                assert "agentlightning.llm_call" in names  # recorded by the LLM proxy
                assert "openai.chat.completion" not in names  # the client side is not traced twice by default
                assert find_final_reward(spans) in (0.0, 1.0)  # emitted by the agent
        finally:
            await store.close()

    asyncio.run(inspect())


def test_verl_without_cuda_exits_2_with_one_clear_line() -> None:
    import importlib.util

    import torch

    if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available():
        pytest.skip("this machine can run --algorithm verl")
    result = run_app("--algorithm", "verl", timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no traceback
    assert lines[0].startswith("--algorithm verl cannot run here: VERL needs")
    assert "--algorithm local runs on CPU" in lines[0]


@pytest.mark.slow
@pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="apps/calc_tiny/model not built")
def test_turn_discount_credit_trains_through_the_app(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_app(
        *("--steps", "2", "--prompts-per-step", "4", "--n", "4", "--val-size", "8", "--val-every", "0"),
        *("--credit", "turn-discount", "--turn-discount", "0.5", "--output-dir", str(out), "--seed", "2"),
        *("--model-server", "thread"),  # the other tests run the default, a process of its own
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.fullmatch(r"validation accuracy: \d+\.\d% -> \d+\.\d%", result.stdout.strip().splitlines()[-1])
    train = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"train"' in x]
    assert [m["step"] for m in train] == [1, 2]
    # per-turn credit trains one sequence per turn: at least as many samples as episodes with a trained group
    assert all(m["samples"] >= 4 * m["groups_trained"] for m in train)
    assert any(m["samples"] > 0 for m in train)


def test_bad_store_url_is_a_clear_error(tmp_path: Path) -> None:
    result = run_app("--store", "mongodb://x", "--output-dir", str(tmp_path), timeout=120)
    assert result.returncode != 0
    assert "--store" in result.stderr


def test_the_agents_connection_pool_is_shared_by_a_loop_and_closes_with_it() -> None:
    from calc_x import agent

    async def main() -> Any:
        client = await agent._http_client()
        assert await agent._http_client() is client  # one pool per loop, not one per rollout
        assert not client.is_closed
        return client

    clients = [asyncio.run(main()) for _ in range(2)]
    assert clients[0] is not clients[1]  # a new loop gets its own
    assert all(c.is_closed for c in clients)  # closed when its loop ended, not left to the garbage collector
