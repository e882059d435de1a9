"""A small deterministic OpenAI-compatible chat server on 127.0.0.1, vLLM style (it returns token ids).

The answer to a conversation is ``"echo: <last user message>"``; if tools are offered and the last user message
starts with ``call``, the answer is a call of the first tool with ``{"q": <message>}``. Token ids are one per
whitespace-separated word (a stable hash), given as ``prompt_token_ids`` on the response and ``token_ids`` on
each choice, as vLLM does with ``return_token_ids``. Streaming sends one chunk per word, then usage.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse


def token_ids(text: str) -> list[int]:
    return [zlib.crc32(word.encode()) % 50_000 for word in text.split()]


def prompt_text(messages: list[dict[str, Any]]) -> str:
    return " ".join(f"{m.get('role')}: {m.get('content') or ''}" for m in messages)


def make_app() -> FastAPI:
    app = FastAPI()
    counter = {"n": 0}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        messages = body.get("messages") or []
        if not messages:
            return JSONResponse({"error": {"message": "messages must not be empty"}}, status_code=400)
        if body.get("model") == "fail":
            return JSONResponse({"error": {"message": "model 'fail' always fails"}}, status_code=400)
        counter["n"] += 1
        completion_id = f"chatcmpl-{counter['n']}"
        last_user = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
        tools = body.get("tools") or []
        prompt_ids = token_ids(prompt_text(messages))
        tool_call = None
        if tools and str(last_user).startswith("call"):
            tool_call = {
                "id": f"call-{counter['n']}",
                "type": "function",
                "function": {"name": tools[0]["function"]["name"], "arguments": json.dumps({"q": last_user})},
            }
            answer = ""
        else:
            answer = f"echo: {last_user}"
        answer_ids = token_ids(answer) if answer else [7]
        usage = {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(answer_ids),
            "total_tokens": len(prompt_ids) + len(answer_ids),
        }
        created = int(time.time())
        model = body.get("model", "tiny")
        if body.get("stream"):
            return StreamingResponse(
                _stream(completion_id, model, created, answer, tool_call, prompt_ids, usage, body),
                media_type="text/event-stream",
            )
        message: dict[str, Any] = {"role": "assistant", "content": answer or None}
        if tool_call is not None:
            message["tool_calls"] = [tool_call]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if tool_call else "stop",
            "token_ids": answer_ids,
        }
        if body.get("logprobs"):
            choice["logprobs"] = {
                "content": [
                    {"token": w, "logprob": -0.5, "bytes": list(w.encode()), "top_logprobs": []}
                    for w in answer.split()
                ]
            }
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": usage,
            "prompt_token_ids": prompt_ids,
        }

    return app


async def _stream(
    completion_id: str,
    model: str,
    created: int,
    answer: str,
    tool_call: dict[str, Any] | None,
    prompt_ids: list[int],
    usage: dict[str, int],
    body: dict[str, Any],
) -> Any:
    def chunk(
        delta: dict[str, Any], finish: str | None = None, ids: list[int] | None = None, **extra: Any
    ) -> str:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if ids is not None:
            choice["token_ids"] = ids
        data = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
            **extra,
        }
        return f"data: {json.dumps(data)}\n\n"

    yield chunk({"role": "assistant", "content": ""}, prompt_token_ids=prompt_ids)
    if tool_call is not None:
        args = tool_call["function"]["arguments"]
        half = len(args) // 2
        first = {
            "index": 0,
            "id": tool_call["id"],
            "type": "function",
            "function": {"name": tool_call["function"]["name"], "arguments": args[:half]},
        }
        yield chunk({"tool_calls": [first]}, ids=[7])
        yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}, ids=[])
        yield chunk({}, finish="tool_calls")
    else:
        words = answer.split(" ")
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            yield chunk({"content": piece}, ids=token_ids(word))
        yield chunk({}, finish="stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        data = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage,
        }
        yield f"data: {json.dumps(data)}\n\n"
    yield "data: [DONE]\n\n"


@contextmanager
def serve_llm() -> Iterator[str]:
    """Run the server on a free port of 127.0.0.1; yields its ``/v1`` base URL."""
    config = uvicorn.Config(make_app(), host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="tracer-llm-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the stand-in LLM server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(10)
