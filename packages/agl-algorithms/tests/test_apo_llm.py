"""Critique and edit calls over real HTTP to the stand-in: retries, backoff, and reasons for giving up."""

from __future__ import annotations

import random
from collections.abc import Iterator

import openai
import pytest
from agl.algorithms.apo import LLMCallFailed, RetryPolicy
from agl.algorithms.apo._llm import LLMCallStats, chat_text
from agl.testing.apo_standin import ApoStandinBackend, Fault, serve_apo_standin
from agl.testing.openai_standin import StandinServer

EDIT_PROMPT = "Edit this template.\n```text\nPick a room.\n```\nCritique: say that capacity must fit."
FAST = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05)


@pytest.fixture(scope="module")
def standin() -> Iterator[StandinServer]:
    with serve_apo_standin(ApoStandinBackend(slow_s=2.0)) as server:
        yield server


@pytest.fixture
def backend(standin: StandinServer) -> Iterator[ApoStandinBackend]:
    backend = standin.backend
    assert isinstance(backend, ApoStandinBackend)
    yield backend
    for queue in backend.faults.values():
        queue.clear()
    backend.permanent_faults.clear()


async def call(standin: StandinServer, stats: LLMCallStats, timeout: float = 10.0) -> str:
    client = openai.AsyncOpenAI(base_url=standin.base_url, api_key="test", max_retries=0, timeout=timeout)
    async with client:
        return await chat_text(
            client,
            model="editor-model",
            messages=[{"role": "user", "content": EDIT_PROMPT}],
            temperature=1.0,
            purpose="edit",
            policy=FAST,
            stats=stats,
            rng=random.Random(0),
        )


async def test_a_good_answer_is_returned(standin: StandinServer, backend: ApoStandinBackend) -> None:
    stats = LLMCallStats()
    text = await call(standin, stats)
    assert text == "Pick a room.\nOnly choose a room whose capacity is at least the number of attendees."
    assert (stats.requests, stats.succeeded, stats.failed) == (1, 1, 0)


@pytest.mark.parametrize("fault", ["rate_limit", "server_error", "empty", "refusal"])
async def test_transient_faults_are_retried(
    standin: StandinServer, backend: ApoStandinBackend, fault: Fault
) -> None:
    backend.queue_faults("editor", fault, fault)
    stats = LLMCallStats()
    before = backend.calls["editor"]
    text = await call(standin, stats)
    assert "capacity" in text
    assert stats.requests == 3 and stats.succeeded == 1
    assert backend.calls["editor"] - before == 3


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("rate_limit", "rate limited"),
        ("server_error", "HTTP 500"),
        ("empty", "empty answer"),
        ("refusal", "model refused: I can't help with that."),
    ],
)
async def test_persistent_faults_give_up_with_a_reason(
    standin: StandinServer, backend: ApoStandinBackend, fault: Fault, reason: str
) -> None:
    backend.fail_always("editor", fault)
    stats = LLMCallStats()
    with pytest.raises(LLMCallFailed, match="after 3 attempt") as info:
        await call(standin, stats)
    assert reason in info.value.reason
    assert (stats.requests, stats.succeeded, stats.failed) == (3, 0, 1)


async def test_bad_request_is_not_retried(standin: StandinServer, backend: ApoStandinBackend) -> None:
    backend.queue_faults("editor", "bad_request")
    stats = LLMCallStats()
    with pytest.raises(LLMCallFailed, match="HTTP 400"):
        await call(standin, stats)
    assert stats.requests == 1


async def test_timeouts_are_retried(standin: StandinServer, backend: ApoStandinBackend) -> None:
    backend.queue_faults("editor", "slow")
    stats = LLMCallStats()
    text = await call(standin, stats, timeout=0.3)
    assert "capacity" in text and stats.requests == 2


async def test_configuration_errors_stop_the_run(standin: StandinServer, backend: ApoStandinBackend) -> None:
    backend.queue_faults("editor", "unauthorized")
    with pytest.raises(openai.AuthenticationError):
        await call(standin, LLMCallStats())


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(initial_backoff_s=1.0, max_backoff_s=5.0)
    rng = random.Random(0)
    delays = [policy.backoff(attempt, rng) for attempt in range(1, 6)]
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 2.0 <= delays[2] <= 4.0
    assert all(d <= 5.0 for d in delays)
