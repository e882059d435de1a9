"""LLM proxy overhead: requests/s and latency, direct to the stand-in backend vs through the proxy.

Three processes: the OpenAI stand-in (packages/agl-testing/src/agl/testing/openai_standin.py), the proxy (this file with
``--serve-proxy``: an ``LLMProxy`` over an in-memory store, recording every call of one attempt), and
the load generator (this file). Each load level runs against the stand-in directly, then through the
proxy; at the end the proxy reports how many spans it stored, which must equal the calls it served.

    uv run python benchmarks/proxy_bench.py [--requests 2000] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BODY = {"model": "m", "messages": [{"role": "user", "content": "What is 2 + 2? Answer briefly."}]}


async def _load(url: str, concurrency: int, total: int, stream: bool) -> dict[str, float]:
    import aiohttp

    body = json.dumps({**BODY, "stream": stream}).encode()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer x"}
    latencies: list[float] = []
    remaining = total

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            start = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {await resp.text()}")
            latencies.append(time.perf_counter() - start)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        warm = min(50, total)
        for _ in range(warm):
            async with session.post(url, data=body, headers=headers) as resp:
                await resp.read()
        begin = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - begin
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "requests": len(latencies) + warm,
    }


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far (Linux), or NaN."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _best(runs: list[dict[str, float]]) -> dict[str, float]:
    """The least disturbed run (highest throughput): the machine is shared, noise only ever slows down."""
    return max(runs, key=lambda r: r["rps"])


def _wait_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"process exited before printing {prefix!r}")
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    raise RuntimeError(f"no {prefix!r} line within {timeout} s")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _serve_proxy(backend: str) -> None:
    from agl.proxy import LLMProxy
    from agl.store import InMemoryLightningStore

    store = InMemoryLightningStore()
    rollout = await store.start_rollout(input=None)
    proxy = LLMProxy(
        [{"model_name": "m", "litellm_params": {"model": "hosted_vllm/standin", "api_base": backend}}],
        store=store,
    )
    await proxy.start()
    url = proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id).endpoint
    print(f"PROXY {url}", flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # the benchmark closes stdin when done
    await proxy.flush()
    spans = (await store.query_spans(rollout.rollout_id)).items
    complete = sum(1 for s in spans if s.attributes.get("agentlightning.llm.response_token_ids"))
    seqs = {s.sequence_id for s in spans}
    print(
        f"SPANS {json.dumps({'spans': len(spans), 'with_token_ids': complete, 'distinct_seq': len(seqs)})}",
        flush=True,
    )
    await proxy.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000, help="requests per run at concurrency 32")
    parser.add_argument("--stream", action="store_true", help="streamed chat completions")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs per target; the best is kept")
    parser.add_argument("--serve-proxy", metavar="BACKEND_URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_proxy:
        asyncio.run(_serve_proxy(args.serve_proxy))
        return

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    port = _free_port()
    standin = subprocess.Popen(
        [sys.executable, "-m", "agl.testing.openai_standin", "--port", str(port)], cwd=ROOT, env=env
    )
    backend = f"http://127.0.0.1:{port}/v1"
    proxy = subprocess.Popen(
        [sys.executable, __file__, "--serve-proxy", backend],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        proxied = _wait_line(proxy, "PROXY ")
        results: dict[str, Any] = {}
        served = 0
        for concurrency, total in ((1, max(300, args.requests // 4)), (32, args.requests)):
            runs: dict[str, list[dict[str, float]]] = {"direct": [], "proxy": []}
            for _ in range(args.rounds):  # alternate, so both see the same background load
                runs["direct"].append(
                    asyncio.run(_load(f"{backend}/chat/completions", concurrency, total, args.stream))
                )
                before = _cpu_seconds(proxy.pid)
                run = asyncio.run(_load(f"{proxied}/chat/completions", concurrency, total, args.stream))
                run["proxy_cpu_ms_per_request"] = (_cpu_seconds(proxy.pid) - before) / run["requests"] * 1000
                runs["proxy"].append(run)
            served += sum(int(r["requests"]) for r in runs["proxy"])
            results[str(concurrency)] = {name: _best(rs) for name, rs in runs.items()}
        assert proxy.stdin is not None
        proxy.stdin.close()
        recorded = json.loads(_wait_line(proxy, "SPANS "))
    finally:
        for proc in (proxy, standin):
            proc.terminate()
            proc.wait(timeout=30)
    mode = "streamed" if args.stream else "non-streamed"
    print(
        f"\nLLM proxy overhead ({mode} chat completions, recording on, {os.cpu_count()} CPUs, "
        f"best of {args.rounds} alternating runs)"
    )
    print(f"{'concurrency':>11} {'target':>8} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for concurrency, pair in results.items():
        for name in ("direct", "proxy"):
            r = pair[name]
            print(f"{concurrency:>11} {name:>8} {r['rps']:>9.1f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}")
        added = pair["proxy"]["p50_ms"] - pair["direct"]["p50_ms"]
        added_p99 = pair["proxy"]["p99_ms"] - pair["direct"]["p99_ms"]
        cpu = pair["proxy"]["proxy_cpu_ms_per_request"]
        print(
            f"{'':>11} {'added':>8} {'':>9} {added:>8.2f} {added_p99:>8.2f}   proxy CPU {cpu:.2f} ms/request"
        )
    print(
        f"\nrecorded: {recorded['spans']} spans for {served} proxied calls "
        f"({recorded['with_token_ids']} with token ids, {recorded['distinct_seq']} distinct sequence ids)"
    )
    print(json.dumps({"results": results, "recorded": recorded, "served": served}))


if __name__ == "__main__":
    main()
