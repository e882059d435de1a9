"""A real short training run into an ``agl store`` process, for the dashboard and metrics tests.

``agl store`` serves a SQLite file (a subprocess, with a token); the Baseline algorithm drives a calculator
agent that calls the offline OpenAI stand-in through the agl LLM proxy (with a tool call, so every rollout
has LLM-call spans with messages, tool calls and token counts), emits a per-turn and a final reward and an
annotation.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import openai
from agl.runner import rollout
from agl.testing.openai_standin import free_port
from agl.tracer import emit_annotation, emit_reward
from agl.types import LLM

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionToolParam

__all__ = [
    "ADD_TOOL",
    "PROMPT_V1",
    "PROMPT_V2",
    "agl_command",
    "agl_store",
    "calculator_agent",
    "read_store_endpoint",
    "stop",
]

ROOT = Path(__file__).resolve().parents[6]
"""The workspace root (agl-testing is installed editable, from packages/agl-testing/src/agl/testing/e2e)."""
PROMPT_V1 = "You are a calculator.\nPlease add {a} and {b}.\nUse the add tool."
PROMPT_V2 = (
    "You are a careful calculator.\nPlease add {a} and {b}.\nUse the add tool.\nAnswer with the sum only."
)
ADD_TOOL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@rollout
def calculator_agent(task: dict[str, Any], llm: LLM) -> None:
    """Asks the model to add two numbers, runs its tool call, checks the answer."""
    client = openai.OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": f"Please add {task['a']} and {task['b']}."}]
    first = client.chat.completions.create(model=llm.model, messages=messages, tools=[ADD_TOOL])
    message = first.choices[0].message
    calls = message.tool_calls or []
    messages.append(message.model_dump(exclude_none=True))
    for call in calls:
        args = json.loads(call.function.arguments)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType, reportAttributeAccessIssue]
        messages.append({"role": "tool", "tool_call_id": call.id, "content": str(args["a"] + args["b"])})
    emit_reward(0.5 if calls else 0.0)  # per-turn reward: the tool was used
    second = client.chat.completions.create(model=llm.model, messages=messages, tools=[ADD_TOOL])
    answer = second.choices[0].message.content or ""
    emit_annotation({"task": f"{task['a']}+{task['b']}", "answer": answer})
    emit_reward(1.0 if str(task["a"] + task["b"]) in answer else 0.0)


def agl_command() -> list[str]:
    """The installed ``agl`` command (or ``python -m agl.store.cli`` where no script was installed)."""
    script = Path(sys.executable).parent / "agl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "agl.store.cli"]


@contextmanager
def agl_store(db: Path, token: str | None, *extra: str) -> Generator[str, None, None]:
    """Run ``agl store`` on ``db``; yields its endpoint; stops it with SIGTERM."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGL_STORE_TOKEN", None)
    args = [*agl_command(), "store", "--backend", f"sqlite:///{db}", "--port", str(free_port())]
    if token:
        args += ["--token", token]
    proc = subprocess.Popen(
        [*args, "--log-level", "WARNING", "--watchdog-interval", "1", *extra],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        yield read_store_endpoint(proc, time.monotonic() + 60)
    finally:
        stop(proc)


def read_store_endpoint(proc: subprocess.Popen[str], deadline: float) -> str:
    """The address an ``agl store`` process announces on its standard output (read up to ``deadline``)."""
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"agl store exited early with code {proc.wait(5)}")
        match = re.search(r"at (http://127\.0\.0\.1:\d+)", line)
        if match:
            return match.group(1)
    raise AssertionError("agl store did not announce its address in time")


def stop(proc: subprocess.Popen[str], timeout: float = 30) -> None:
    """SIGTERM, wait (SIGKILL after ``timeout``), then close the pipes the test held to the process."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    finally:
        close_pipes(proc)


def close_pipes(proc: subprocess.Popen[str]) -> None:
    """Close ``proc``'s stdin/stdout/stderr pipes (left open, the garbage collector warns about each)."""
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
