"""What a rollout costs on the wire under the client-server strategy, counted at the real server."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections import Counter
from typing import Any

import pytest
from agl.algorithms import algo
from agl.runner import LitAgentRunner, Trainer, rollout
from agl.store import InMemoryLightningStore
from agl.tracer import OtelTracer, emit_reward
from agl.types import LLM, EnqueueRolloutRequest

_LINE = re.compile(r'^agl_store_http_requests_total\{method="(\w+)",route="([^"]+)",status="(\d+)"\} (\S+)$')


def _requests(endpoint: str) -> Counter[str]:
    """Requests answered so far, by ``METHOD route`` (the server's own Prometheus counter)."""
    text = urllib.request.urlopen(endpoint + "/metrics", timeout=10).read().decode()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        match = _LINE.match(line)
        if match and match.group(2) != "/metrics":
            counts[f"{match.group(1)} {match.group(2)}"] += int(float(match.group(4)))
    return counts


@rollout
async def _trivial(task: int, llm: LLM) -> None:
    emit_reward(1.0)


@pytest.mark.timeout(120)
def test_a_trivial_rollout_costs_one_request() -> None:
    n_tasks, n_runners = 60, 2
    seen: dict[str, Any] = {}

    @algo
    async def count(store: Any, train_dataset: Any, initial_resources: Any) -> None:
        resources = await store.add_resources(initial_resources)
        before = await asyncio.to_thread(_requests, store.endpoint)
        rollouts = await store.enqueue_many_rollouts(
            [EnqueueRolloutRequest(input=t, resources_id=resources.resources_id) for t in train_dataset]
        )
        finished = await store.wait_for_rollouts(rollout_ids=[r.rollout_id for r in rollouts], timeout=60)
        seen["succeeded"] = sum(r.status == "succeeded" for r in finished)
        after = await asyncio.to_thread(_requests, store.endpoint)
        seen["requests"] = after - before

    trainer = Trainer(
        algorithm=count,
        n_runners=n_runners,
        strategy="cs",
        store=InMemoryLightningStore(),
        port=0,
        initial_resources={"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="m")},
        # Heartbeats are per interval, not per rollout: off, so that every request counted is a rollout's.
        runner=LitAgentRunner(tracer=OtelTracer(), heartbeat_interval=0),
        progress=False,
    )
    trainer.fit(_trivial, list(range(n_tasks)))

    assert seen["succeeded"] == n_tasks
    requests: Counter[str] = seen["requests"]
    # Per rollout: one request, its spans and outcome with the claim of the runner's next rollout. Claims of
    # their own: each runner's first, and a long poll that was waiting when work arrived or came back empty.
    assert requests["POST /v1/agl/rollouts/{id}/attempts/{id}/finish"] == n_tasks, requests
    assert requests["POST /v1/agl/queues/rollouts/claim"] <= 3 * n_runners, requests
    assert "POST /v1/agl/spans/in-order" not in requests, requests
    assert "POST /v1/agl/rollouts/{id}/attempts/{id}" not in requests, requests
    assert "GET /v1/agl/resources/{id}" not in requests, requests
    assert requests.total() <= n_tasks + 3 * n_runners, requests
