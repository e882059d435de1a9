"""Agents that kill their own runner process, for the lost-runner tests (importable by any start method)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from typing import Any

from agl.runner import rollout
from agl.tracer import emit_reward
from agl.types import LLM, Rollout


@rollout
def exits_on_first_attempt(task: dict[str, Any], llm: LLM, rollout: Rollout) -> None:
    """``os._exit(1)`` on the first attempt of a task marked ``exit``: no traceback, no cleanup, like a crash
    in native code or a library calling exit.

    With ``linger`` (seconds) in the task, the process first closes its ends of the pipes its parent reads,
    and exits only that much later: an exit as its parent may see it (the process sentinel at end of file,
    the process not yet reapable), stretched from a moment to ``linger`` (Linux)."""
    if task.get("exit") and rollout.attempt.sequence_id == 1:  # pyright: ignore[reportUnknownMemberType, reportAttributeAccessIssue]
        linger = float(task.get("linger", 0.0))
        if linger:
            _close_pipes_to_parent()
            time.sleep(linger)
        os._exit(1)
    time.sleep(task.get("pause", 0.0))
    emit_reward(task["x"] / 10)


def _close_pipes_to_parent() -> None:
    """Close this process's write ends of the pipes whose read end its parent holds (``/proc``)."""
    parent_fds = f"/proc/{os.getppid()}/fd"
    held_by_parent: set[str] = set()
    for name in os.listdir(parent_fds):
        with contextlib.suppress(OSError):
            held_by_parent.add(os.readlink(f"{parent_fds}/{name}"))
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            writes_only = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
        except OSError:
            continue
        if fd > 2 and target.startswith("pipe:") and target in held_by_parent and writes_only:
            os.close(fd)


@rollout
def always_exits(task: dict[str, Any], llm: LLM) -> None:
    """Every runner that picks this up dies."""
    os._exit(3)
