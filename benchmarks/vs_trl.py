"""The same RL job with TRL's ``GRPOTrainer`` and with agl, back to back on one machine.

    uv run benchmarks/vs_trl.py                 # 20 steps each side (16 questions x 8 samples a step)
    uv run benchmarks/vs_trl.py --steps 5       # a quick look

Both sides train the embedded model ``apps/calc_tiny/model`` on the app's calculator task (same training
questions, same group size 8, 16 questions a step, same number of steps, hence the same number of
episodes), at temperature 1, learning rate 3e-4 constant, AdamW without weight decay, clip 0.2, no KL term,
advantages ``(r - mean) / std`` per group, loss averaged over every generated token of the batch, one
update per batch, one torch thread for generation. Both use tool calling: agl runs the app's agent
(``apps/calc_x/agent.py``, up to 4 LLM calls) through runners, the LLM proxy and the store; TRL runs its
own multi-turn tool loop (``tools=[calculator]``, up to 3 tool iterations) with ``transformers``
generation. The tool schema rendered into the prompt is the app's exact ``CALCULATOR_TOOL`` on both sides
(see ``_exact_tool_schema``).

Before and after, both models are validated by the same code (this script's evaluator: the agl model
server and the app's ``solve`` loop, no store) on the same held-out questions, at temperature 1 and
greedy. Printed per side: generated tokens/s while generating (TRL: inside ``model.generate``; agl: while
its model engine is busy) and per second of training (both: tokens over the training wall time), s/step,
training wall time, validation accuracy before/after, gain per minute of training.

Differences that remain (written down, not hidden): TRL caps the whole multi-turn completion at
``max_completion_length`` (128 tokens here) while agl caps each LLM call at 64; TRL trains on one
sequence per episode with tool-result tokens masked, agl likewise merges the turns of an episode that
extend each other; TRL generates with ``model.generate`` in the training process and does not record calls
anywhere, agl serves the model over HTTP and records every call's token ids in its store (SQLite).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from calc_x.tasks import CALCULATOR_TOOL, evaluate, format_number, reward, split_tasks  # noqa: E402

MODEL = ROOT / "apps" / "calc_tiny" / "model"
PROMPTS_PER_STEP = 16
GROUP = 8
LR = 3e-4


# -- the shared evaluator ----------------------------------------------------------------------------


def validate(model_dir: Path, val: list[dict[str, Any]], temperature: float) -> float:
    """Accuracy of ``model_dir`` on ``val`` with the app's agent loop against the agl model server."""
    import torch
    from agl.algorithms.local import ModelServer
    from calc_x.agent import solve
    from openai import AsyncOpenAI

    torch.set_num_threads(1)

    async def run(url: str) -> float:
        client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=600)

        async def one(task: dict[str, Any]) -> float:
            answer, _ = await solve(client, "m", task["question"], temperature=temperature, max_tokens=64)
            return reward(answer, task["result"])

        scores = await asyncio.gather(*(one(t) for t in val))
        await client.close()
        return sum(scores) / len(scores)

    with ModelServer(model_dir, served_model_name="m") as server:
        return asyncio.run(run(server.url))


# -- TRL's side --------------------------------------------------------------------------------------


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: the expression
    """
    try:
        return format_number(evaluate(str(expression)))
    except ValueError as exc:
        return f"error: {exc}"


def _exact_tool_schema() -> None:
    """TRL passes tools as Python callables and transformers derives their JSON schema from the docstring,
    which would add a parameter description the embedded model never saw; render the app's exact schema."""
    import transformers.utils.chat_template_utils as ctu

    derive = ctu.get_json_schema

    def schema(func: Any) -> dict[str, Any]:
        return CALCULATOR_TOOL if func is calculator else derive(func)

    ctu.get_json_schema = schema


def run_trl(steps: int, out: Path, seed: int) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_schema

    torch.set_num_threads(1)
    _exact_tool_schema()
    train, _ = split_tasks(seed)
    dataset = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": t["question"]}], "result": float(t["result"])}
            for t in train
        ]
    )
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    tokenizer.response_schema = qwen3_schema  # hermes tool calls, as Qwen renders them
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)

    generated = {"tokens": 0, "seconds": 0.0}
    generate = model.generate

    def counting_generate(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        output = generate(*args, **kwargs)
        generated["seconds"] += time.perf_counter() - started
        prompt = kwargs.get("input_ids", args[0] if args else None)
        sequences = output if isinstance(output, torch.Tensor) else output.sequences
        new = sequences[:, prompt.shape[1] :]
        ended = (new == tokenizer.eos_token_id).cumsum(-1)
        generated["tokens"] += int(((ended == 0) | ((ended == 1) & (new == tokenizer.eos_token_id))).sum())
        return output

    model.generate = counting_generate  # type: ignore[method-assign]

    def correct(completions: list[Any], result: list[float], **_: Any) -> list[float]:
        rewards = []
        for completion, expected in zip(completions, result, strict=True):
            last = completion[-1] if isinstance(completion, list) else {"content": completion}
            rewards.append(reward(str(last.get("content") or ""), expected))
        return rewards

    config = GRPOConfig(
        output_dir=str(out / "trl"),
        max_steps=steps,
        per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
        num_generations=GROUP,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        num_iterations=1,
        loss_type="dapo",
        scale_rewards="group",
        max_completion_length=128,
        max_tool_calling_iterations=3,
        use_cpu=True,
        bf16=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=seed,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=correct,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        tools=[calculator],
    )
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    model.generate = generate  # type: ignore[method-assign]
    trainer.save_model(str(out / "trl-final"))
    tokenizer.save_pretrained(str(out / "trl-final"))
    return {
        "wall_s": wall,
        "s_per_step": wall / steps,
        "generated_tokens": generated["tokens"],
        "tokens_per_s": generated["tokens"] / max(generated["seconds"], 1e-9),
        "tokens_per_training_s": generated["tokens"] / max(wall, 1e-9),
        "model": str(out / "trl-final"),
    }


# -- agl's side --------------------------------------------------------------------------------------


def run_agl(steps: int, out: Path, seed: int, model_server: str = "process") -> dict[str, Any]:
    started = time.perf_counter()
    command = [
        sys.executable,
        str(ROOT / "apps" / "train_calc_x.py"),
        f"--steps={steps}",
        f"--seed={seed}",
        f"--lr={LR}",
        f"--n={GROUP}",
        f"--prompts-per-step={PROMPTS_PER_STEP}",
        "--val-size=16",  # its own validation is not the comparison's: keep it small
        "--val-every=0",
        f"--model-server={model_server}",
        f"--output-dir={out / 'agl'}",
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    process_wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (out / "agl" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r.get("kind") == "train"]
    step_s = [float(r["step_s"]) for r in train]
    generating_s = sum(float(r["generation_s"]) for r in train)  # the model engine busy, as TRL's generate()
    tokens = sum(int(r["generated_tokens"]) for r in train)
    return {
        "wall_s": sum(step_s),
        "process_wall_s": process_wall,
        "s_per_step": sum(step_s) / len(step_s),
        "generated_tokens": tokens,
        "tokens_per_s": tokens / max(generating_s, 1e-9),
        "tokens_per_training_s": tokens / max(sum(step_s), 1e-9),
        "model": str(out / "agl" / "checkpoint" / "final"),
    }


# -- both --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--val-size", type=int, default=256)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "runs" / f"vs_trl-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    parser.add_argument("--side", choices=["both", "trl", "agl"], default="both")
    parser.add_argument(
        "--agl-model-server",
        choices=["process", "thread"],
        default="process",
        help="where agl's model server runs (the app's --model-server; default: %(default)s)",
    )
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)  # one side's result, for the parent
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args.out.mkdir(parents=True, exist_ok=True)

    if args.side != "both":  # one side, in its own process
        if args.side == "trl":
            result = run_trl(args.steps, args.out, args.seed)
        else:
            result = run_agl(args.steps, args.out, args.seed, args.agl_model_server)
        (args.json or args.out / f"{args.side}.json").write_text(json.dumps(result))
        return

    _, val = split_tasks(args.seed, n_val=args.val_size)
    print(
        f"load average {os.getloadavg()[0]:.2f}; {args.steps} steps of {PROMPTS_PER_STEP} x {GROUP} each side"
    )
    before = {t: validate(MODEL, val, t) for t in (1.0, 0.0)}
    print(f"before: validation accuracy {before[1.0]:.1%} (T=1), {before[0.0]:.1%} (greedy)", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for side in ("agl", "trl"):
        path = args.out / f"{side}.json"
        subprocess.run(
            [
                sys.executable,
                __file__,
                f"--side={side}",
                f"--steps={args.steps}",
                f"--seed={args.seed}",
                f"--out={args.out}",
                f"--json={path}",
                f"--agl-model-server={args.agl_model_server}",
            ],
            check=True,
        )
        results[side] = json.loads(path.read_text())
        results[side]["after"] = {t: validate(Path(results[side]["model"]), val, t) for t in (1.0, 0.0)}
        r = results[side]
        print(
            f"{side}: {r['tokens_per_s']:.0f} generated tokens/s, {r['s_per_step']:.2f} s/step, "
            f"training wall {r['wall_s'] / 60:.2f} min; validation {before[1.0]:.1%} -> {r['after'][1.0]:.1%} "
            f"(T=1), {before[0.0]:.1%} -> {r['after'][0.0]:.1%} (greedy); load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
    print()
    print(
        "| | generated tokens/s while generating | per second of training | s/step | training wall "
        "| validation T=1 | greedy | gain per minute |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for side, r in results.items():
        gain = (r["after"][1.0] - before[1.0]) * 100 / (r["wall_s"] / 60)
        print(
            f"| {side} | {r['tokens_per_s']:.0f} | {r['tokens_per_training_s']:.0f} | {r['s_per_step']:.2f} | "
            f"{r['wall_s'] / 60:.2f} min | "
            f"{before[1.0]:.1%} -> {r['after'][1.0]:.1%} | {before[0.0]:.1%} -> {r['after'][0.0]:.1%} | "
            f"{gain:.1f} points |"
        )


if __name__ == "__main__":
    main()
