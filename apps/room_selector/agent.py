"""The room-selector agent: an OpenAI-compatible chat model with one tool, steered by a prompt template.

The prompt template (the resource APO optimises) becomes the system message; the request itself is
the user message. The model may call ``list_free_rooms`` and then names a room. The reward is 1.0
for the expected room and 0.0 otherwise, or an LLM judge's score in [0, 1] when a judge model is set.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from typing import Any

from agl.runner import rollout
from agl.types import PromptTemplate

from .tasks import RoomTask
from .world import RoomRequest, extract_choice, list_free_rooms

__all__ = [
    "SEED_PROMPT",
    "TOOLS",
    "judge_answer",
    "make_room_selector",
    "open_client",
    "render_request",
    "run_room_agent",
]

logger = logging.getLogger(__name__)

SEED_PROMPT = (
    "You are a scheduling assistant. Use the list_free_rooms tool to see which rooms are free "
    "for the requested slot, then answer with the name of one room."
)
"""The starting prompt: it says how to look rooms up but none of the rules that pick the right one."""

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "list_free_rooms",
            "description": (
                "List the meeting rooms free for a whole time slot, nearest first, with their capacity, "
                "equipment, wheelchair accessibility and walking distance in metres."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "date": {"type": "string", "description": "YYYY-MM-DD"},
                    "time": {"type": "string", "description": "start time, HH:MM (24-hour)"},
                    "duration_min": {"type": "integer", "description": "length in minutes"},
                },
                "required": ["date", "time", "duration_min"],
            },
        },
    }
]

MAX_TURNS = 4


def render_request(request: RoomRequest) -> str:
    """The user message for one request."""
    needs = ",".join(request.needs) if request.needs else "none"
    return (
        f"Meeting request: date={request.date}; time={request.time}; duration_min={request.duration_min}; "
        f"attendees={request.attendees}; needs={needs}; "
        f"accessible_required={'true' if request.accessible_required else 'false'}"
    )


def _call_tool(name: str, arguments: str) -> str:
    if name != "list_free_rooms":
        return json.dumps({"error": f"unknown tool {name!r}; the only tool is list_free_rooms"})
    try:
        args = json.loads(arguments or "{}")
        rows = list_free_rooms(str(args["date"]), str(args["time"]), int(args["duration_min"]))
    except (ValueError, KeyError, TypeError) as exc:
        return json.dumps({"error": f"bad arguments for list_free_rooms: {exc}"})
    return json.dumps(rows)


async def run_room_agent(client: Any, model: str, system_prompt: str, request: RoomRequest) -> str | None:
    """Run the tool loop and return the model's final text (``None`` if it never answered)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": render_request(request)},
    ]
    for _ in range(MAX_TURNS):
        response = await client.chat.completions.create(
            model=model, messages=messages, tools=TOOLS, temperature=0.0
        )
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": call.function.arguments},
                    }
                    for call in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": _call_tool(call.function.name, call.function.arguments),
                }
            )
    return None


JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"reason": {"type": "string"}, "score": {"type": "number"}},
    "required": ["reason", "score"],
    "additionalProperties": False,
}


async def judge_answer(client: Any, judge_model: str, task: RoomTask, answer: str | None) -> float:
    """Score ``answer`` in [0, 1] with an LLM judge; falls back to exact match if the judge fails."""
    exact = 1.0 if extract_choice(answer) == task["expected_choice"] else 0.0
    prompt = (
        "You grade a meeting-room assistant.\n"
        f"{render_request(RoomRequest.from_dict(task['task_input']))}\n"
        f"Expected choice: {task['expected_choice']}\n"
        f"Assistant's final answer: {answer or '(no answer)'}\n"
        "Give score 1 if the answer clearly chooses the expected room (or clearly says no room fits when "
        "the expected choice is 'No Room'), 0 if it chooses something else or nothing; partial credit "
        "between 0 and 1 only for hedged answers that include the expected choice."
    )
    import openai

    try:
        response = await client.chat.completions.create(
            model=judge_model,
            messages=[{"role": "user", "content": prompt}],
            temperature=0.0,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "judgement", "schema": JUDGE_SCHEMA, "strict": True},
            },
        )
        verdict = json.loads(response.choices[0].message.content or "")
        return min(1.0, max(0.0, float(verdict["score"])))
    except (
        openai.APIError,
        ValueError,
        KeyError,
        TypeError,
        IndexError,
    ) as exc:  # bad verdict or failed call
        logger.warning(
            "judge failed (%s: %s); using exact match for task %s", type(exc).__name__, exc, task["id"]
        )
        return exact


_ssl_lock = threading.Lock()
_ssl_context: ssl.SSLContext | None = None


def _shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every client: building one costs 0.1-0.6 s, more than a whole rollout."""
    global _ssl_context
    with _ssl_lock:
        if _ssl_context is None:
            import httpx

            _ssl_context = httpx.create_ssl_context()
        return _ssl_context


def open_client(base_url: str | None = None, api_key: str | None = None, timeout: float = 120.0) -> Any:
    """An ``openai.AsyncOpenAI`` (``None``: from ``OPENAI_*``) sharing one TLS context with all others."""
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient

    http_client = DefaultAsyncHttpxClient(verify=_shared_ssl_context(), timeout=timeout)
    return AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, http_client=http_client)


def make_room_selector(
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    judge_model: str | None = None,
    timeout: float = 120.0,
) -> Any:
    """The ``@rollout`` agent bound to a model and endpoint (``None``: the ``OPENAI_*`` environment)."""

    @rollout
    async def room_selector(task: RoomTask, prompt_template: PromptTemplate) -> float:
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        request = RoomRequest.from_dict(task["task_input"])
        system_prompt = prompt_template.format(**request.as_dict())
        http_client = DefaultAsyncHttpxClient(verify=_shared_ssl_context(), timeout=timeout)
        async with AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, http_client=http_client
        ) as client:
            answer = await run_room_agent(client, model, system_prompt, request)
            if judge_model is not None:
                return await judge_answer(client, judge_model, task, answer)
        return 1.0 if extract_choice(answer) == task["expected_choice"] else 0.0

    return room_selector
