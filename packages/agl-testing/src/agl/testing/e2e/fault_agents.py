"""Agents that kill their own runner process, for the lost-runner tests (importable by any start method)."""

from __future__ import annotations

import os
import time
from typing import Any

from agl.runner import rollout
from agl.tracer import emit_reward
from agl.types import LLM, Rollout


@rollout
def exits_on_first_attempt(task: dict[str, Any], llm: LLM, rollout: Rollout) -> None:
    """``os._exit(1)`` on the first attempt of a task marked ``exit``: no traceback, no cleanup, like a crash
    in native code or a library calling exit."""
    if task.get("exit") and rollout.attempt.sequence_id == 1:  # type: ignore[attr-defined]
        os._exit(1)
    time.sleep(task.get("pause", 0.0))
    emit_reward(task["x"] / 10)


@rollout
def always_exits(task: dict[str, Any], llm: LLM) -> None:
    """Every runner that picks this up dies."""
    os._exit(3)
