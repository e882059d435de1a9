"""The VERL GPU smoke: ``train_calc_x.py --algorithm verl`` on the embedded model for a few steps, watched.

    python3 benchmarks/verl_smoke/smoke.py --steps 2 --out smoke-out     # (run_on_gpu.sh calls this)

Batch 8 tasks x n 4, eager vLLM at 0.3 of the GPU. Prints, and writes to ``OUT/smoke.json``:
steps done, wall time, peak GPU memory (nvidia-smi, polled), reward per step, whether the token ids the
proxy recorded are the ones vLLM sampled (their decoded text is the recorded answer, and verl's
``training/rollout_probs_diff_mean`` between vLLM's logprobs and FSDP's on those ids is small), and whether
the weights reached vLLM (a fixed probe's greedy next-token logprobs change after the updates).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class GpuWatch(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_mib = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout
                self.peak_mib = max([self.peak_mib, *(int(x) for x in out.split() if x.strip().isdigit())])
            except Exception:
                pass
            self.stop.wait(1.0)


async def token_id_check(store_path: Path, limit: int = 50) -> dict[str, Any]:
    """Decode the recorded response ids of some proxy spans and compare with the recorded text."""
    from agl.store import SqlLightningStore
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "apps" / "calc_tiny" / "model")
    store = SqlLightningStore(f"sqlite:///{store_path}")
    checked = equal = 0
    try:
        for rollout in (await store.query_rollouts()).items[:limit]:
            for span in (await store.query_spans(rollout.rollout_id)).items:
                attrs = span.attributes or {}
                ids = attrs.get("response_token_ids") or attrs.get("gen_ai.completion.0.token_ids")
                text = attrs.get("gen_ai.completion.0.content")
                if isinstance(ids, str):
                    ids = json.loads(ids)
                if not ids or not isinstance(text, str) or not text:
                    continue
                checked += 1
                decoded = tokenizer.decode(ids, skip_special_tokens=True)
                equal += int(decoded.strip() == text.strip() or text.strip() in decoded)
    finally:
        await store.close()
    return {"spans_checked": checked, "decoded_equal_text": equal}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("smoke-out"))
    ap.add_argument(
        "--keep-cache-engine", action="store_true", help="vLLM keeps its KV cache (free_cache_engine=false)"
    )
    args = ap.parse_args()
    out: Path = args.out
    run_dir = out / "run"
    probe = out / "probe.jsonl"
    watch = GpuWatch()
    watch.start()
    started = time.time()
    cmd = [
        sys.executable,
        str(ROOT / "apps" / "train_calc_x.py"),
        *("--algorithm", "verl", "--steps", str(args.steps), "--prompts-per-step", "8", "--n", "4"),
        *("--val-size", "16", "--val-every", "0", "--enforce-eager", "--gpu-memory-utilization", "0.3"),
        *("--output-dir", str(run_dir), "--verl-probe-file", str(probe), "--val-temperature", "0"),
        *(["--keep-cache-engine"] if args.keep_cache_engine else []),
    ]
    with (out / "train.log").open("w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    wall = time.time() - started
    watch.stop.set()
    watch.join(timeout=5)

    records = []
    if (run_dir / "metrics.jsonl").exists():
        records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train = [r for r in records if r["kind"] == "train"]
    validation = [r for r in records if r["kind"] == "validation"]
    probes = [json.loads(x) for x in probe.read_text().splitlines()] if probe.exists() else []
    probe_values = [json.dumps(p["replicas"], sort_keys=True) for p in probes]
    diffs = [r.get("verl", {}).get("training/rollout_probs_diff_mean") for r in train]
    result: dict[str, Any] = {
        "exit_code": rc,
        "free_cache_engine": not args.keep_cache_engine,
        "steps_done": len(train),
        "wall_s": round(wall, 1),
        "peak_gpu_mib": watch.peak_mib,
        "reward_per_step": [round(r["reward"], 4) for r in train],
        "validation_accuracy": [round(v["accuracy"], 4) for v in validation],
        "rollout_probs_diff_mean": diffs,
        "probe_steps": [p["step"] for p in probes],
        "weights_reached_vllm": len(set(probe_values)) > 1,
        "samples_per_step": [r.get("verl", {}).get("agl/samples") for r in train],
    }
    if (run_dir / "store.sqlite").exists():
        result["token_ids"] = asyncio.run(token_id_check(run_dir / "store.sqlite"))
    ok_diff = all(d is not None and d < 0.05 for d in diffs) if diffs else False
    result["token_ids_match_vllm"] = ok_diff
    (out / "smoke.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    tail = (out / "train.log").read_text().splitlines()[-40:] if (out / "train.log").exists() else []
    if rc != 0:
        print("\n".join(tail))
    return 0 if rc == 0 and len(train) == args.steps else 1


if __name__ == "__main__":
    sys.exit(main())
