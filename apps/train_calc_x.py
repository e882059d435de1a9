"""Train a calculator-using agent with reinforcement learning, through the whole agl system.

    uv run apps/train_calc_x.py                 # the embedded model, on CPU, about 2 minutes on 2 idle cores
    uv run apps/train_calc_x.py --steps 3       # a quick look

The agent (``calc_x/agent.py``) is an ordinary ``@rollout`` function that talks to its model with the
``openai`` client and may call a ``calculator`` tool. Runners execute it; its LLM calls go through the
LLM proxy, which records prompt and completion token ids as spans in the store; ``LocalGRPO`` turns those
spans into triplets, updates the model with GRPO and swaps the new weights into its model server.

Without flags it uses a synthetic arithmetic task set ("What is 19 + 17?"; fixed seed, train/validation
split) and the embedded model in ``calc_tiny/model`` (built by ``calc_tiny/build.py``; see apps/README.md
for how its warm start was made and why it guesses). Outputs go to ``runs/<timestamp>/``: the SQLite store
of the run, ``metrics.jsonl``, ``reward_curve.png`` and the final checkpoint.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

LAUNCHED = time.time()  # the heavy imports come later (in main): the time to the first step counts them

HERE = Path(__file__).resolve().parent

DEFAULT_MODEL = HERE / "calc_tiny" / "model"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-file", type=Path, help="Calc-X parquet with 'question' and 'result' columns")
    p.add_argument("--val-file", type=Path, help="validation parquet (same columns)")
    p.add_argument("--model", default=str(DEFAULT_MODEL), help="a local model directory or a hub id")
    p.add_argument(
        "--algorithm",
        choices=["local", "verl"],
        default="local",
        help="local: LocalGRPO on CPU (or one GPU); verl: VERL on vLLM, needs CUDA and the verl extra, or with "
        "--device cpu verl's trainer on CPU (default: %(default)s)",
    )
    p.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="VERL: cuda (vLLM rollouts) or cpu (verl's trainer on CPU, agl's model server as the rollout; "
        "for debugging on a laptop) (default: %(default)s)",
    )
    p.add_argument("--n-runners", type=int, default=2, help="runner threads")
    p.add_argument(
        "--model-server",
        choices=["process", "thread"],
        default="process",
        help="the model server in a process of its own, or in threads of this one (default: %(default)s)",
    )
    p.add_argument("--concurrency", type=int, default=64, help="rollouts each runner executes at once")
    p.add_argument("--steps", type=int, default=40, help="training steps (default: %(default)s)")
    p.add_argument(
        "--store",
        default=None,
        help="sqlite:///path.sqlite | memory | http://host:port (default: the run's sqlite file)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the task split, sampling and the update (default: %(default)s)",
    )
    p.add_argument(
        "--prompts-per-step",
        type=int,
        default=16,
        help="tasks per step, each sampled --n times (default: %(default)s)",
    )
    p.add_argument("--n", type=int, default=8, help="samples per task (the GRPO group size)")
    p.add_argument(
        "--max-staleness",
        type=int,
        default=0,
        help="asynchronous training: runners keep generating during updates, and samples may come from "
        "weights up to K versions old (0: synchronous; default: %(default)s)",
    )
    p.add_argument(
        "--correction",
        choices=["decoupled", "tis", "none"],
        default="decoupled",
        help="off-policy correction of --max-staleness > 0 (default: %(default)s)",
    )
    p.add_argument(
        "--lr", type=float, default=3e-4, help="learning rate of the update (default: %(default)s)"
    )
    p.add_argument(
        "--val-size",
        type=int,
        default=256,
        help="validation questions, evaluated before, during and after (default: %(default)s)",
    )
    p.add_argument(
        "--val-every",
        type=int,
        default=10,
        help="validate every this many steps; 0: only before and after (default: %(default)s)",
    )
    p.add_argument(
        "--val-temperature",
        type=float,
        default=1.0,
        help="sampling temperature of validation (1.0: the policy as trained; 0: greedy)",
    )
    p.add_argument(
        "--credit",
        choices=["final", "per-turn", "turn-discount"],
        default="final",
        help="credit over turns: every turn gets the final reward (default), per-turn rewards, or the final "
        "reward discounted backwards by --turn-discount per turn (AReaL-style)",
    )
    p.add_argument("--turn-discount", type=float, default=0.9, help="gamma of --credit turn-discount")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the training process")
    p.add_argument(
        "--trace-client-calls",
        action="store_true",
        help="also record each LLM call as the agent's openai client saw it (a second span per call; the "
        "LLM proxy's span, with the token ids training uses, is recorded either way)",
    )
    p.add_argument(
        "--trace-level",
        choices=["transition", "trajectory"],
        default="transition",
        help="VERL: one sample per LLM call, or turns merged by token prefix",
    )
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3, help="VERL: vLLM's share of the GPU")
    p.add_argument(
        "--enforce-eager", action="store_true", help="VERL: no CUDA graphs in vLLM (starts faster)"
    )
    p.add_argument(
        "--keep-cache-engine",
        action="store_true",
        help="VERL: keep vLLM's KV cache while the trainer updates (free_cache_engine=false): more GPU memory, "
        "no sleep/wake of vLLM between steps (the way round a vLLM whose sleep/wake fails)",
    )
    p.add_argument(
        "--verl-probe-file", type=Path, default=None, help=argparse.SUPPRESS
    )  # the GPU smoke's probe
    p.add_argument("--output-dir", type=Path, default=None, help="default: runs/<timestamp>")
    p.add_argument(
        "--logger",
        type=logger_names,
        default="jsonl",
        help="where the step metrics go: any of jsonl,tensorboard,mlflow,wandb, comma-separated, each writing "
        "in the output directory (metrics.jsonl, tensorboard/, an MLflow file store mlruns/, an offline W&B "
        "run wandb/; nothing is sent unless MLFLOW_TRACKING_URI or WANDB_MODE say so) (default: %(default)s)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=5,
        help="save a checkpoint every this many steps, to resume from (0: only the final one; default: %(default)s)",
    )
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="continue a killed run from its last checkpoint and its store (give the same other flags); "
        "with --algorithm verl, verl's own resume from its checkpoint in RUN_DIR/checkpoint",
    )
    p.add_argument(
        "--lora-rank",
        type=int,
        default=0,
        help="local: train a LoRA adapter of this rank (PEFT) instead of every weight; the model server gets the "
        "merged weights and checkpoints hold the adapter alone (0: full fine-tuning; default: %(default)s)",
    )
    p.add_argument(
        "--lora-alpha", type=float, default=None, help="LoRA alpha (scale alpha/rank; default: 2 x rank)"
    )
    p.add_argument(
        "--lora-targets",
        default="all-linear",
        help="comma-separated module names the adapter wraps (q_proj,v_proj,...) or all-linear (default)",
    )
    args = p.parse_args(argv)
    if args.lora_rank > 0 and args.algorithm != "local":
        p.error("--lora-rank is for --algorithm local")
    return args


def lora_setting(args: argparse.Namespace) -> dict[str, Any] | None:
    """``GRPOConfig.lora`` from ``--lora-rank``, ``--lora-alpha`` and ``--lora-targets`` (``None``: off)."""
    if args.lora_rank <= 0:
        return None
    targets = args.lora_targets if args.lora_targets == "all-linear" else args.lora_targets.split(",")
    alpha = args.lora_alpha if args.lora_alpha is not None else 2.0 * args.lora_rank
    return {"rank": args.lora_rank, "alpha": alpha, "targets": targets}


def logger_names(spec: str) -> tuple[str, ...]:
    """``--logger``: the tracker names (see :mod:`agl.algorithms.trackers`)."""
    from agl.algorithms.trackers import parse_loggers

    try:
        return parse_loggers(spec)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def run_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The flags, as the trackers' run config (MLflow parameters, the W&B config)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


def load_tasks(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from calc_x.tasks import split_tasks

    if args.train_file is None:
        train, val = split_tasks(args.seed, n_val=args.val_size)
        return train, val
    import pyarrow.parquet as pq

    def read(path: Path) -> list[dict[str, Any]]:
        table = pq.read_table(path, columns=["question", "result"]).to_pylist()
        return [{"question": str(r["question"]), "result": r["result"]} for r in table]

    train = read(args.train_file)
    if args.val_file is not None:
        return train, read(args.val_file)[: args.val_size]
    cut = max(1, len(train) - args.val_size)
    return train[:cut], train[cut:]


def make_store(spec: str | None, out_dir: Path) -> Any:
    if spec is None:
        spec = f"sqlite:///{out_dir / 'store.sqlite'}"
    from agl.store import open_store

    try:
        return open_store(spec)
    except ValueError as exc:
        raise SystemExit(f"--store: {exc}") from None


def startup_breakdown(marks: dict[str, float], first_step_at: float) -> str:
    """Seconds between the start-up milestones (``LocalGRPO.startup``), e.g. "app imports and store 3.1 s, ..."."""
    labels = {
        "run": "app imports, store, runners",
        "torch": "torch",
        "model": "model load (transformers)",
        "server": "model server (with the model load in its process)",
        "proxy": "LLM proxy",
    }
    parts: list[str] = []
    previous = LAUNCHED
    for name, at in [*marks.items(), ("first step", first_step_at)]:
        parts.append(f"{labels.get(name, name)} {at - previous:.1f}s")
        previous = at
    return ", ".join(parts)


def keep_metrics_until_checkpoint(out_dir: Path) -> int:
    """Before a resume: keep in ``metrics.jsonl`` only the records of the steps and validations the last
    checkpoint holds (the others are redone); the checkpoint's step (0: none)."""
    import json

    from agl.algorithms.local.checkpoint import latest_checkpoint

    checkpoint = latest_checkpoint(out_dir / "checkpoint")
    path = out_dir / "metrics.jsonl"
    if checkpoint is None or not path.is_file():
        path.unlink(missing_ok=True)
        return 0
    kept = {("train", m["step"]) for m in checkpoint.history} | {
        ("validation", m["step"]) for m in checkpoint.validations
    }
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(f"{line}\n" for line in lines if _kind_step(json.loads(line)) in kept))
    return checkpoint.step


def _kind_step(record: dict[str, Any]) -> tuple[str, Any]:
    return str(record.get("kind")), record.get("step")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.algorithm == "verl":
        from agl.algorithms.verl.interface import check_requirements

        problem = check_requirements(need_gpu=args.device != "cpu")
        if problem:
            hint = "" if args.device == "cpu" else " --device cpu runs verl's trainer on CPU;"
            print(
                f"--algorithm verl cannot run here: {problem}.{hint} --algorithm local runs on CPU.",
                file=sys.stderr,
            )
            return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.time()
    out_dir = args.resume or args.output_dir or HERE.parent / "runs" / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    train, val = load_tasks(args)
    print(
        f"calc_x: {len(train)} training and {len(val)} validation tasks; model {args.model}; outputs in {out_dir}"
    )

    if args.algorithm == "verl":
        from calc_x.verl_run import run_verl

        return run_verl(args, train, val, out_dir, make_store)

    from agl.algorithms.local import LocalGRPO
    from agl.runner import Trainer
    from calc_x.agent import calc_agent
    from calc_x.report import plot_curve, summary
    from tqdm import tqdm
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our bar is the one that matters

    from agl.algorithms.metrics import AlgorithmMetrics

    done = keep_metrics_until_checkpoint(out_dir) if args.resume else 0
    if not args.resume:
        (out_dir / "metrics.jsonl").unlink(missing_ok=True)
    try:
        metrics = AlgorithmMetrics.for_run("local_grpo", out_dir, args.logger, config=run_settings(args))
    except ImportError as exc:  # a tracker's library is missing: the message names the extra
        print(f"--logger: {exc}", file=sys.stderr)
        return 2
    bar = tqdm(total=args.steps, initial=done, desc="GRPO", unit="step", dynamic_ncols=True)

    def on_step(m: dict[str, Any]) -> None:
        bar.set_postfix(
            reward=f"{m['reward']:.2f}",
            tool=f"{m['tool_use']:.2f}",
            s=f"{m['rollout_s']:.1f}+{m['update_s']:.1f}",
        )
        bar.update(1)

    def on_validation(m: dict[str, Any]) -> None:
        bar.write(
            f"validation at step {m['step']}: accuracy {m['accuracy']:.1%}, tool use {m['tool_use']:.1%}"
        )

    algorithm = LocalGRPO(
        args.model,
        steps=args.steps,
        prompts_per_step=args.prompts_per_step,
        n=args.n,
        lr=args.lr,
        seed=args.seed,
        val_every=args.val_every,
        val_temperature=args.val_temperature,
        torch_threads=args.threads,
        model_server=args.model_server,
        credit=args.credit,
        turn_discount=args.turn_discount,
        served_model_name="calc-tiny" if args.model == str(DEFAULT_MODEL) else Path(args.model).name,
        checkpoint_dir=str(out_dir / "checkpoint"),
        checkpoint_every=args.checkpoint_every,
        max_staleness=args.max_staleness,
        correction=args.correction,
        resume=args.resume is not None,
        lora=lora_setting(args),
        on_step=on_step,
        on_validation=on_validation,
        metrics=metrics,
    )
    from agl.tracer import OtelTracer

    trainer = Trainer(
        algorithm=algorithm,
        n_runners=args.n_runners,
        tracer=OtelTracer(instrument_openai=args.trace_client_calls),
        store=make_store(args.store, out_dir),
        strategy="shm",
        runner={"type": "agl.runner.LitAgentRunner", "concurrency": args.concurrency},
        progress=False,
    )
    trainer.fit(calc_agent, train, val_dataset=val)
    bar.close()
    if algorithm.first_step_at is not None:
        print(
            f"first training step began {algorithm.first_step_at - LAUNCHED:.1f}s after launch "
            f"({startup_breakdown(algorithm.startup, algorithm.first_step_at)})"
        )
    metrics.close()
    if not algorithm.validations:
        print("no validation ran; nothing to summarise", file=sys.stderr)
        return 1
    curve = plot_curve(
        algorithm.history,
        algorithm.validations,
        out_dir / "reward_curve.png",
        f"calc_x GRPO, seed {args.seed}",
        val_temperature=args.val_temperature,
    )
    print(f"reward curve: {curve}")
    print(summary(algorithm.history, algorithm.validations, (time.time() - started) / 60, out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
