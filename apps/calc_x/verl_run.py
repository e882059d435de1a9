"""``train_calc_x.py --algorithm verl``: the calc agent trained with VERL (verl 0.9 + vLLM) on one GPU.

verl runs in Ray processes and logs its metrics with its ``file`` logger (``verl_metrics.jsonl``); a
thread here follows that file and turns each step into the app's own records (``metrics.jsonl``), the
progress bar and, at the end, the reward curve and the ``validation accuracy: A% -> B%`` line (the calc
reward is 1 for a right answer, else 0, so mean reward = accuracy).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

TRAIN_REWARD_KEYS = ("critic/score/mean", "critic/rewards/mean")


def model_lengths(model: str) -> tuple[int, int, int]:
    """``(max_model_len, max_prompt_length, max_response_length)`` for the model: 1024 (512 + 256) where
    the model has the positions, else its ``max_position_embeddings`` split 3:1 (the embedded model: 512 =
    384 + 128). vLLM refuses a ``max_model_len`` over the model's positions."""
    from agl.algorithms.verl.config import max_position_embeddings

    limit = max_position_embeddings(model)
    if limit is None or limit >= 1024:
        return 1024, 512, 256
    prompt = limit * 3 // 4
    return limit, prompt, limit - prompt


def verl_config(args: Any, out_dir: Path) -> dict[str, Any]:
    """The VERL overrides of the app's flags (batch = prompts per step, n = GRPO group size)."""
    batch = args.prompts_per_step
    max_model_len, max_prompt, max_response = model_lengths(str(args.model))
    ray_init: dict[str, Any] = {
        "runtime_env": {"env_vars": {"VERL_FILE_LOGGER_PATH": str(out_dir / "verl_metrics.jsonl")}}
    }
    if getattr(args, "device", "cuda") != "cpu":  # on CPU, VERL sets Ray's (logical) CPUs itself
        ray_init["num_cpus"] = max(2, (os.cpu_count() or 4) - 2)
    return {
        "trainer": {
            "total_training_steps": args.steps,
            "total_epochs": 1000,
            "test_freq": args.val_every if args.val_every > 0 else -1,
            "logger": ["console", "file"],
            "project_name": "calc_x",
            "experiment_name": out_dir.name,
            "seed": args.seed,
            **resume_settings(args, out_dir),
        },
        "data": {
            "train_batch_size": batch,
            "val_batch_size": None,
            "max_prompt_length": max_prompt,
            "max_response_length": max_response,
            "seed": args.seed,
        },
        "actor_rollout_ref": {
            "model": {"path": args.model},
            "actor": {
                "optim": {"lr": args.lr},
                "ppo_mini_batch_size": batch,
                "ppo_micro_batch_size_per_gpu": max(1, min(batch * args.n, 32)),
            },
            "rollout": {
                "n": args.n,
                "temperature": 1.0,
                "val_kwargs": {
                    "temperature": args.val_temperature,
                    "do_sample": args.val_temperature > 0,
                    "n": 1,
                },
                "gpu_memory_utilization": args.gpu_memory_utilization,
                "max_model_len": max_model_len,
                "enforce_eager": args.enforce_eager,
                "free_cache_engine": not getattr(args, "keep_cache_engine", False),
            },
        },
        "agentlightning": {
            "credit": {"mode": args.credit, "turn_discount": args.turn_discount},
            "max_tokens": 48,
            "trace_aggregator": {"level": args.trace_level},
            "probe_file": str(args.verl_probe_file) if getattr(args, "verl_probe_file", None) else None,
            "max_staleness": int(getattr(args, "max_staleness", 0)),
        },
        "algorithm": {"rollout_correction": rollout_correction(args)},
        "ray_kwargs": {"ray_init": ray_init},
    }


def rollout_correction(args: Any) -> dict[str, Any]:
    """verl's nearest to ``--correction`` for ``--max-staleness`` > 0 (synchronous: none): ``decoupled``,
    verl's decoupled mode (PPO against the recomputed log-probs of the weights at the update's start, and
    per-token importance weights of those against the recorded ones, truncated at 2); ``tis``, its bypass
    mode (the recorded log-probs are PPO's old policy, the ratio clipped as PPO clips it)."""
    correction = getattr(args, "correction", "none") if int(getattr(args, "max_staleness", 0)) > 0 else "none"
    if correction == "none":
        return {"rollout_is": None}
    return {"rollout_is": "token", "rollout_is_threshold": 2.0, "bypass_mode": correction == "tis"}


def checkpointed_step(out_dir: Path) -> int:
    """The step of verl's newest checkpoint of the run in ``out_dir`` (0: none)."""
    try:
        return int((out_dir / "checkpoint" / "latest_checkpointed_iteration.txt").read_text().strip())
    except (FileNotFoundError, ValueError):
        return 0


def resume_settings(args: Any, out_dir: Path) -> dict[str, Any]:
    """verl's own checkpoint and resume settings from ``--checkpoint-every`` and ``--resume``: verl saves in
    ``out_dir/checkpoint`` (every N steps and after the last; 0: after the last only) and, resumed, continues
    from its newest checkpoint there (``resume_mode=auto``) without validating again before training."""
    every = int(getattr(args, "checkpoint_every", 0))
    resuming = getattr(args, "resume", None) is not None
    return {
        "default_local_dir": str(out_dir / "checkpoint"),
        "save_freq": every if every > 0 else args.steps,
        "max_actor_ckpt_to_keep": 2,
        "resume_mode": "auto" if resuming else "disable",
        "val_before_train": not (resuming and checkpointed_step(out_dir) > 0),
    }


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def keep_records_through(out_dir: Path, step: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Before a resume from verl's checkpoint of ``step``: keep the app's records and verl's log lines up
    to that step (the later ones are redone), verl's in ``verl_metrics.until-step-<step>.jsonl`` (verl's
    file logger starts its file afresh); the kept (train, validation) records."""
    verl_log = out_dir / "verl_metrics.jsonl"
    kept_log = [r for r in _records(verl_log) if int(r.get("step", 0)) <= step]
    (out_dir / f"verl_metrics.until-step-{step}.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in kept_log)
    )
    verl_log.unlink(missing_ok=True)
    app_log = out_dir / "metrics.jsonl"
    kept = [r for r in _records(app_log) if int(r.get("step", 0)) <= step]
    app_log.write_text("".join(json.dumps(r) + "\n" for r in kept))
    return [r for r in kept if r.get("kind") == "train"], [r for r in kept if r.get("kind") == "validation"]


def _val_accuracy(data: dict[str, Any]) -> float | None:
    keys = sorted(
        k for k in data if k.startswith("val-core/") and ("reward" in k or "score" in k or "acc" in k)
    )
    keys = [k for k in keys if "mean" in k] or keys
    return float(data[keys[0]]) if keys else None


def translate(step: int, data: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """One verl log line → (train record, validation record) in the app's format (either may be None)."""
    train = None
    reward = next((data[k] for k in TRAIN_REWARD_KEYS if k in data), None)
    if reward is not None:
        train = {
            "step": step,
            "reward": float(reward),
            "accuracy": float(reward),
            "tool_use": float("nan"),
            "failed": 0,
            "rollout_s": float(data.get("timing_s/gen", data.get("timing_s/generate_sequences", 0.0))),
            "update_s": float(data.get("timing_s/update_actor", 0.0)),
            "step_s": float(data.get("timing_s/step", 0.0)),
            "generated_tokens": int(data.get("response_length/mean", 0.0) * data.get("agl/samples", 0)),
            "generation_s": float(data.get("timing_s/gen", 0.0)),
            "verl": data,
        }
    validation = None
    accuracy = _val_accuracy(data)
    if accuracy is not None:
        validation = {"step": step, "reward": accuracy, "accuracy": accuracy, "tool_use": float("nan")}
    return train, validation


class MetricsFollower(threading.Thread):
    """Follows verl's jsonl log and calls back with each translated record."""

    def __init__(self, path: Path, on_train: Any, on_validation: Any) -> None:
        super().__init__(daemon=True, name="verl-metrics")
        self.path, self.on_train, self.on_validation = path, on_train, on_validation
        self.stop_event = threading.Event()

    def run(self) -> None:
        offset = 0
        while True:
            stopping = self.stop_event.is_set()
            if self.path.exists():
                with self.path.open("rb") as f:
                    f.seek(offset)
                    for line in f:
                        if not line.endswith(b"\n"):
                            break
                        offset += len(line)
                        entry = json.loads(line)
                        train, validation = translate(int(entry.get("step", 0)), entry.get("data", {}))
                        if validation is not None:
                            self.on_validation(validation)
                        if train is not None:
                            self.on_train(train)
            if stopping:
                return
            self.stop_event.wait(1.0)


def run_verl(
    args: Any, train: list[dict[str, Any]], val: list[dict[str, Any]], out_dir: Path, make_store: Any
) -> int:
    import sys

    from agl.algorithms import VERL
    from agl.runner import Trainer
    from calc_x.agent import calc_agent
    from calc_x.report import plot_curve, summary
    from tqdm import tqdm

    started = time.time()
    from agl.algorithms.metrics import AlgorithmMetrics

    done = checkpointed_step(out_dir) if args.resume else 0
    if done:
        history, validations = keep_records_through(out_dir, done)
        print(f"resume: continuing after step {done} from verl's checkpoint in {out_dir / 'checkpoint'}")
    else:
        history, validations = [], []
        (out_dir / "metrics.jsonl").unlink(missing_ok=True)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    # The app's records (verl's own figures under "verl") go to metrics.jsonl and the --logger trackers.
    metrics = AlgorithmMetrics.for_run("verl", out_dir, getattr(args, "logger", "jsonl"), config=settings)
    bar = tqdm(total=args.steps, initial=done, desc="VERL GRPO", unit="step", dynamic_ncols=True)

    def on_train(m: dict[str, Any]) -> None:
        history.append(m)
        metrics.log("train", m)
        bar.set_postfix(reward=f"{m['reward']:.2f}", s=f"{m['step_s']:.1f}")
        bar.update(1)

    def on_validation(m: dict[str, Any]) -> None:
        validations.append(m)
        metrics.log("validation", m)
        bar.write(f"validation at step {m['step']}: accuracy {m['accuracy']:.1%}")

    follower = MetricsFollower(out_dir / "verl_metrics.jsonl", on_train, on_validation)
    follower.start()
    algorithm = VERL(verl_config(args, out_dir), device=getattr(args, "device", "cuda"))
    trainer = Trainer(
        algorithm=algorithm,
        n_runners=args.n_runners,
        store=make_store(args.store, out_dir),
        strategy="shm",  # VERL serves the store over HTTP for verl's processes
        runner={"type": "agl.runner.LitAgentRunner", "concurrency": args.concurrency},
        progress=False,
    )
    try:
        trainer.fit(calc_agent, train, val_dataset=val)
    finally:
        follower.stop_event.set()
        follower.join(timeout=10)
        bar.close()
        metrics.close()
    if len(validations) < 1:
        print("no validation ran; nothing to summarise", file=sys.stderr)
        return 1
    curve = plot_curve(
        history, validations, out_dir / "reward_curve.png", f"calc_x VERL GRPO, seed {args.seed}"
    )
    print(f"reward curve: {curve}")
    print(summary(history, validations, (time.time() - started) / 60, out_dir))
    return 0
