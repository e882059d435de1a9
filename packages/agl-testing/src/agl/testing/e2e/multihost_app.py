"""The parts of the multi-host test that run inside its network namespaces.

python -m agl.testing.e2e.multihost_app standin HOST PORT      # the OpenAI-compatible stand-in LLM
python -m agl.testing.e2e.multihost_app algorithm N_TASKS LLM_URL  # Baseline against AGL_SERVER_HOST:AGL_SERVER_PORT
python -m agl.testing.e2e.multihost_app wait HOST PORT SECONDS # until HOST:PORT accepts connections
python -m agl.testing.e2e.multihost_app check STORE_URL        # what the store holds, as JSON
agl runner agl.testing.e2e.multihost_app:chat_agent --store http://HOST:PORT   # the runners
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from agl.runner import rollout
from agl.tracer import emit_reward
from agl.types import LLM, RolloutConfig

ROLLOUT_CONFIG = RolloutConfig(
    timeout_seconds=30,
    unresponsive_seconds=3.0,
    max_attempts=5,
    retry_condition=["unresponsive", "timeout", "failed"],
)
"""A runner cut off for 3 s is given up on and its rollouts are retried elsewhere; an agent whose LLM call
failed while its link was down is retried too."""


@rollout
async def chat_agent(task: dict[str, Any], llm: LLM) -> None:
    """One chat completion on the stand-in (which answers ``echo: <text>``); reward 1 if it echoed."""
    import httpx

    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=30.0)) as http:
        answer = await http.post(
            llm.get_base_url().rstrip("/") + "/chat/completions",
            json={"model": llm.model, "messages": [{"role": "user", "content": f"task {task['x']}"}]},
        )
        answer.raise_for_status()
        text = answer.json()["choices"][0]["message"]["content"]
    emit_reward(1.0 if text == f"echo: task {task['x']}" else 0.0)


def _standin(host: str, port: int) -> None:
    import uvicorn
    from agl.testing.openai_standin import StandinBackend

    backend = StandinBackend(record_requests=False, delay_s=0.15)
    uvicorn.run(backend.app(), host=host, port=port, log_level="warning", access_log=False)


def _algorithm(n_tasks: int, llm_base_url: str) -> None:
    from agl.algorithms import Baseline
    from agl.runner import Trainer

    trainer = Trainer(
        algorithm=Baseline(rollout_config=ROLLOUT_CONFIG, polling_interval=0.5),
        initial_resources={"main_llm": LLM(endpoint=llm_base_url, model="stand-in")},
        progress=False,
    )
    trainer.fit(chat_agent, [{"x": i} for i in range(n_tasks)])
    print("multihost_app: done", flush=True)


def _wait(host: str, port: int, seconds: float) -> None:
    """Return once ``host:port`` accepts connections (exit 1 after ``seconds``)."""
    import socket
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{host}:{port} did not open within {seconds}s")


def _check(endpoint: str) -> None:
    """Print, as JSON, what the store holds: per rollout its status, attempts (status, worker) and reward."""
    import asyncio
    import json

    from agl.store.client import LightningStoreClient
    from agl.tracer import find_final_reward

    async def collect() -> list[dict[str, Any]]:
        client = LightningStoreClient(endpoint)
        try:
            out: list[dict[str, Any]] = []
            for r in await client.query_rollouts():
                attempts = await client.query_attempts(r.rollout_id)
                spans = await client.query_spans(r.rollout_id)
                out.append(
                    {
                        "rollout_id": r.rollout_id,
                        "status": r.status,
                        "x": r.input["x"],
                        "attempts": [[a.status, a.worker_id, a.attempt_id] for a in attempts],
                        "errors": [(a.metadata or {}).get("error", {}).get("message") for a in attempts],
                        "reward": find_final_reward(spans.items),
                    }
                )
            return out
        finally:
            await client.close()

    print(json.dumps(asyncio.run(collect())), flush=True)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(process)d %(name)s: %(message)s")
    if sys.argv[1] == "standin":
        _standin(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "algorithm":
        _algorithm(int(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "wait":
        _wait(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif sys.argv[1] == "check":
        _check(sys.argv[2])
    else:
        raise SystemExit(f"unknown part {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
