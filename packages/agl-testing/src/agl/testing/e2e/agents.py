"""Agents for the end-to-end tests, written against the reference API (only the imports differ).

They live in an importable module so that runner processes started with any start method can find them.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agl.runner import rollout
from agl.tracer import emit_reward
from agl.types import LLM, Rollout

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam


@rollout
def reward_agent(task: dict[str, Any], llm: LLM) -> None:
    """Sync agent: reports a reward derived from the task."""
    assert llm.model == "stand-in"
    emit_reward(task["x"] / 10)


@rollout
async def flaky_agent(task: dict[str, Any], llm: LLM, rollout: Rollout) -> None:
    """Fails on the first attempt of every rollout, succeeds on the second."""
    if rollout.attempt.sequence_id == 1:  # pyright: ignore[reportUnknownMemberType, reportAttributeAccessIssue]
        raise RuntimeError(f"first attempt of task {task['x']} fails on purpose")
    emit_reward(1.0)


@rollout
def victim_agent(task: dict[str, Any], llm: LLM, rollout: Rollout) -> float:
    """On the first attempt of the victim task, writes its pid and hangs until killed."""
    if task.get("victim") and rollout.attempt.sequence_id == 1:  # pyright: ignore[reportUnknownMemberType, reportAttributeAccessIssue]
        Path(task["pid_file"]).write_text(str(os.getpid()))
        threading.Event().wait()  # hangs: the test kills this process
    return 1.0


BARRIER_TURNS = 4


@rollout
async def multi_turn_agent(task: dict[str, Any], llm: LLM, rollout: Rollout) -> None:
    """A conversation of ``BARRIER_TURNS`` turns, one after the other, its history growing as a chat agent's
    does; each message names the rollout first."""
    from openai import AsyncOpenAI, Timeout

    context = "Context: " + "the quick brown fox jumps over the lazy dog. " * 40
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": context}]
    timeout = Timeout(120.0, connect=60.0)
    async with AsyncOpenAI(
        base_url=llm.get_base_url(), api_key="unused", timeout=timeout, max_retries=2
    ) as client:
        for turn in range(BARRIER_TURNS):
            messages.append({"role": "user", "content": f"{rollout.rollout_id} turn {turn}"})
            completion = await client.chat.completions.create(model=llm.model, messages=messages)
            messages.append({"role": "assistant", "content": completion.choices[0].message.content or ""})
    emit_reward(1.0)
