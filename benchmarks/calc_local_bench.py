"""GRPO on the embedded calculator model in a bare loop: model server + agent + update, no store.

    uv run benchmarks/calc_local_bench.py --steps 40

It isolates the learning problem and the model server's speed from the rest of the system (store,
runners, proxy, adapter), so `apps/train_calc_x.py`'s figures can be compared with a floor. Prints, per
step: reward, tool use, step time split into rollout / update, generated tokens/s; validation accuracy
(sampled at temperature 1 unless told otherwise) before, every few steps, and after.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent

from calc_x.agent import solve  # noqa: E402
from calc_x.tasks import reward, split_tasks  # noqa: E402


async def run_episodes(
    client: Any, model: str, tasks: list[dict[str, Any]], temperature: float
) -> list[dict[str, Any]]:
    from agl.algorithms.adapter import Turn

    async def one(task: dict[str, Any]) -> dict[str, Any]:
        answer, completions = await solve(
            client, model, task["question"], temperature=temperature, extra_body={"return_token_ids": True}
        )
        turns = [Turn(list(c.prompt_token_ids), list(c.choices[0].token_ids)) for c in completions]
        tool = any(c.choices[0].message.tool_calls for c in completions)
        return {"reward": reward(answer, task["result"]), "turns": turns, "tool": tool}

    return await asyncio.gather(*(one(t) for t in tasks))


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(ROOT / "apps" / "calc_tiny" / "model"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--val-size", type=int, default=256)
    parser.add_argument("--val-every", type=int, default=10)
    parser.add_argument("--val-temperature", type=float, default=1.0, help="0 for greedy validation")
    parser.add_argument("--json", type=Path, help="write the per-step times and accuracies here")
    args = parser.parse_args()

    import torch
    from agl.algorithms.local.grpo_core import episode_samples, group_advantages, grpo_update
    from agl.algorithms.local.server import ModelServer, load_model
    from openai import AsyncOpenAI, DefaultAioHttpClient

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    policy, tokenizer = load_model(args.model)
    server = ModelServer(copy.deepcopy(policy), tokenizer, served_model_name="calc-tiny").start()
    # the same HTTP client as the app's agent (apps/calc_x/agent.py), so that the two compare the system
    http = DefaultAioHttpClient(limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200))
    client = AsyncOpenAI(base_url=server.url, api_key="local", max_retries=0, timeout=120, http_client=http)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=0.0)
    train, val = split_tasks(args.seed)
    val = val[: args.val_size]
    rng = random.Random(args.seed)

    async def validate() -> tuple[float, float]:
        episodes = await run_episodes(client, "calc-tiny", val, temperature=args.val_temperature)
        return sum(e["reward"] for e in episodes) / len(episodes), sum(e["tool"] for e in episodes) / len(
            episodes
        )

    t_start = time.time()
    before, before_tool = await validate()
    print(f"validation before: accuracy {before:.1%}, tool use {before_tool:.1%}", flush=True)
    rollout_s = update_s = 0.0
    step_times: list[float] = []
    step_cpu: list[float] = []
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        tasks = rng.sample(train, args.prompts)
        batch = [t for t in tasks for _ in range(args.n)]
        tokens_before = server.engine.stats["generated_tokens"]
        episodes = await run_episodes(client, "calc-tiny", batch, temperature=1.0)
        t1 = time.perf_counter()
        groups = [i // args.n for i in range(len(batch))]
        advantages = group_advantages([e["reward"] for e in episodes], groups)
        samples = [
            s
            for e, a in zip(episodes, advantages, strict=False)
            if a is not None
            for s in episode_samples(e["turns"], a)
        ]
        stats = grpo_update(policy, optimizer, samples, pad_id=tokenizer.pad_token_id)
        server.update_weights(policy.state_dict())
        t2 = time.perf_counter()
        rollout_s += t1 - t0
        update_s += t2 - t1
        step_times.append(t2 - t0)
        step_cpu.append(time.process_time() - cpu0)
        generated = server.engine.stats["generated_tokens"] - tokens_before
        mean_reward = sum(e["reward"] for e in episodes) / len(episodes)
        tool = sum(e["tool"] for e in episodes) / len(episodes)
        print(
            f"step {step:3d} reward {mean_reward:.3f} tool {tool:.2f} samples {len(samples):3d} "
            f"rollout {t1 - t0:.2f}s update {t2 - t1:.2f}s ({generated / (t1 - t0):.0f} tok/s) "
            f"loss {stats['loss']:+.3f} elapsed {time.time() - t_start:.0f}s",
            flush=True,
        )
        if step % args.val_every == 0 and step != args.steps:
            accuracy, tool_use = await validate()
            print(f"  validation: accuracy {accuracy:.1%}, tool use {tool_use:.1%}", flush=True)
    after, after_tool = await validate()
    await client.close()
    server.stop()
    minutes = (time.time() - t_start) / 60
    print(
        f"s/step: rollout {rollout_s / args.steps:.2f} + update {update_s / args.steps:.2f}; {minutes:.1f} min"
    )
    print(f"median s/step: {statistics.median(step_times):.2f}")
    print(f"tool use: {before_tool:.1%} -> {after_tool:.1%}")
    print(f"validation accuracy: {before:.1%} -> {after:.1%}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "step_s": step_times,
                    "step_cpu_s": step_cpu,
                    "before": before,
                    "after": after,
                    "minutes": minutes,
                }
            )
        )


if __name__ == "__main__":
    asyncio.run(main())
