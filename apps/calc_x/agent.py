"""The calculator agent: asks the model, runs the `calculator` tool it calls, until the model answers."""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

import httpx
from agl.runner import rollout
from agl.tracer import emit_reward
from agl.types import LLM
from calc_x.tasks import CALCULATOR_TOOL, evaluate, format_number, reward

MAX_TURNS = 4


def run_calculator(arguments: str) -> str:
    """Run one calculator call; errors are returned to the model as text, as a real tool would."""
    try:
        expression = json.loads(arguments)["expression"]
        return format_number(evaluate(str(expression)))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        return f"error: {exc}"


async def solve(
    client: Any,
    model: str,
    question: str,
    *,
    temperature: float = 1.0,
    max_tokens: int = 48,
    extra_body: dict[str, Any] | None = None,
) -> tuple[str, list[Any]]:
    """Run the conversation with an ``openai.AsyncOpenAI`` client; returns the final answer text and the
    raw chat completions (one per turn)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    completions: list[Any] = []
    for _ in range(MAX_TURNS):
        completion = await client.chat.completions.create(
            model=model,
            messages=messages,
            tools=[CALCULATOR_TOOL],
            temperature=temperature,
            max_tokens=max_tokens,
            extra_body=extra_body,
        )
        completions.append(completion)
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or "", completions
        messages.append(
            {
                "role": "assistant",
                "content": message.content or "",
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            result = (
                run_calculator(call.function.arguments)
                if call.function.name == "calculator"
                else "error: unknown tool"
            )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return "", completions


# -- the agent as agl sees it --------------------------------------------------------------------

_HTTP_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, Any]] = (
    weakref.WeakKeyDictionary()
)


async def _closed_with_the_loop(client: Any) -> AsyncIterator[None]:
    """An async generator that closes ``client`` when it is finalised: asyncio's runner finalises every
    async generator of a loop before closing it (``shutdown_asyncgens``), so the pool closes with its loop."""
    try:
        yield
    finally:
        await client.aclose()


async def _http_client() -> Any:
    """One connection pool per event loop: making an HTTP client per rollout costs more than the rollout.

    Its transport is aiohttp's (openai's ``DefaultAioHttpClient``): httpx's pool checks every connection
    it holds, with a system call each, on every request and every response, which with 64 agents on one
    loop was about a fifth of the CPU outside the model."""
    from openai import DefaultAioHttpClient

    loop = asyncio.get_running_loop()
    found = _HTTP_CLIENTS.get(loop)
    if found is None:
        # Idle connections are dropped by us (2 s) before the server drops them (uvicorn: 5 s), so a request
        # never goes out on a connection the server is closing at that moment.
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200, keepalive_expiry=2.0)
        client = DefaultAioHttpClient(limits=limits)
        closer = _closed_with_the_loop(client)
        await anext(closer)
        found = _HTTP_CLIENTS[loop] = (client, closer)  # kept: a collected generator would close it now
    return found[0]


@rollout
async def calc_agent(task: dict[str, Any], llm: LLM) -> None:
    """Answer ``task["question"]`` with the calculator tool; reward 1.0 for the right number, else 0.0."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(
        base_url=llm.get_base_url(),
        api_key=llm.api_key or "unused",
        http_client=await _http_client(),
        max_retries=2,  # connection errors only happen before the model saw the request
        # openai's default connect timeout (5 s) is too short when a hundred rollouts share two busy cores.
        timeout=httpx.Timeout(300.0, connect=60.0),
    )
    answer, _ = await solve(
        client,
        llm.model,
        task["question"],
        temperature=float(llm.sampling_parameters.get("temperature", 1.0)),
        max_tokens=int(llm.sampling_parameters.get("max_tokens", 48)),
    )
    emit_reward(reward(answer, task["result"]))
