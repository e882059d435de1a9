"""Generated tokens/s of the local model server at several concurrencies, through HTTP and the openai client.

    uv run benchmarks/model_server_bench.py                      # concurrency 1, 16, 128
    uv run benchmarks/model_server_bench.py --concurrency 16 --requests 4

Each of C clients sends its requests one after another (a closed loop, like agents waiting for their
model): the calculator question with the ``calculator`` tool, temperature 1, ``max_tokens`` 48, on the
embedded model ``apps/calc_tiny/model`` with one torch thread. Clients start a few milliseconds apart,
so requests keep arriving while others are being decoded, as in a training step. The clients run in the
same process as the server (as the app's runners do). On a shared machine, "tokens per CPU second" (this
process's CPU time, clients included) varies less than tokens/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from calc_x.tasks import CALCULATOR_TOOL, make_tasks  # noqa: E402


async def run(url: str, concurrency: int, requests: int, max_tokens: int) -> tuple[int, float, float]:
    """Returns (generated tokens, wall seconds, mean seconds per request)."""
    import httpx
    from openai import AsyncOpenAI

    tasks = make_tasks(concurrency * requests, seed=1)
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    client = AsyncOpenAI(
        base_url=url, api_key="x", max_retries=0, timeout=300, http_client=httpx.AsyncClient(limits=limits)
    )
    latencies: list[float] = []

    async def worker(k: int) -> int:
        await asyncio.sleep(0.002 * k)  # staggered arrivals
        tokens = 0
        for j in range(requests):
            t0 = time.perf_counter()
            r = await client.chat.completions.create(
                model="calc-tiny",
                messages=[{"role": "user", "content": tasks[k * requests + j]["question"]}],
                tools=[CALCULATOR_TOOL],  # type: ignore[list-item]
                temperature=1.0,
                max_tokens=max_tokens,
                extra_body={"return_token_ids": True},
            )
            latencies.append(time.perf_counter() - t0)
            tokens += len(r.choices[0].token_ids)  # type: ignore[attr-defined]
        return tokens

    started = time.perf_counter()
    counts = await asyncio.gather(*(worker(k) for k in range(concurrency)))
    wall = time.perf_counter() - started
    await client.close()
    return sum(counts), wall, sum(latencies) / len(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(ROOT / "apps" / "calc_tiny" / "model"))
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 128])
    parser.add_argument("--requests", type=int, default=0, help="per client (default: 256 requests in all)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--switch-interval", type=float, default=None)
    args = parser.parse_args()

    import torch
    from agl.algorithms.local import ModelServer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    with ModelServer(args.model, served_model_name="calc-tiny") as server:
        asyncio.run(run(server.url, 4, 2, args.max_tokens))  # warm-up
        print(f"load average {os.getloadavg()[0]:.2f}")
        for c in args.concurrency:
            per_client = args.requests or max(1, 256 // c)
            if c == 1:
                per_client = args.requests or 32
            busy0 = server.engine.stats["busy_s"]
            cpu0 = time.process_time()
            tokens, wall, latency = asyncio.run(run(server.url, c, per_client, args.max_tokens))
            busy = server.engine.stats["busy_s"] - busy0
            cpu = time.process_time() - cpu0
            print(
                f"concurrency {c:4d}: {c * per_client:4d} requests, {tokens:6d} tokens in {wall:6.2f}s = "
                f"{tokens / wall:7.0f} tokens/s; {latency * 1000:6.0f} ms per request; engine busy {busy:.2f}s; "
                f"process CPU {cpu:.2f}s = {tokens / cpu:5.0f} tokens per CPU second",
                flush=True,
            )


if __name__ == "__main__":
    main()
