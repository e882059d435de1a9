"""A local, deterministic OpenAI-compatible backend for tests: a stand-in for vLLM on 127.0.0.1.

It answers ``POST /v1/chat/completions`` (tools, tool calls, SSE streaming), ``POST /v1/completions``,
``GET /v1/models`` and ``GET /health`` the way vLLM does when asked for token ids
(``return_token_ids: true``, or always with ``always_return_token_ids=True``): ``prompt_token_ids`` on the
response (first chunk when streaming) and ``token_ids`` on every choice (every chunk's choice when streaming),
plus per-token ``logprobs`` when ``logprobs`` is requested.

Its "tokenizer" is one token per character (``token id = ord(char)``) over a toy chat template,
so tests can predict every id. By default the model answers ``"echo: <last user text>"``; a
scripting hook decides other answers::

    def script(request: dict) -> Reply | str | None:   # None → default answer
        if request.get("tools"):
            return Reply(tool_calls=[ToolCall("get_weather", {"city": "Paris"})])
        return "sunny"

    with serve_standin(StandinBackend(script=script)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x")

Without a script, two options cover the usual cases: ``call_tools_on="call"`` answers a conversation whose
last user message starts with ``call`` (when tools are offered) by calling the first tool with
``{"q": <message>}``, and ``fail_model="fail"`` answers every request for that model with HTTP 400.

Run it alone (for benchmarks) with ``python -m agl.testing.openai_standin --port 8000``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, cast

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = [
    "Reply",
    "StandinBackend",
    "StandinServer",
    "ToolCall",
    "chat_prompt_text",
    "completion_token_ids",
    "content_text",
    "free_port",
    "json_list",
    "json_object",
    "serve_standin",
    "token_ids",
    "token_logprob",
]


@dataclass
class ToolCall:
    """A function call the model makes; ``arguments`` is a dict (JSON-encoded on the wire) or raw text."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict[str, Any])
    id: str | None = None

    def arguments_text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass
class Reply:
    """What the model answers: text, tool calls, or both."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list[ToolCall])
    finish_reason: str | None = None


Script = Callable[[dict[str, Any]], "Reply | str | Awaitable[Reply | str | None] | None"]


def token_ids(text: str) -> list[int]:
    """The stand-in's tokenizer: one token per character."""
    return [ord(ch) for ch in text]


def token_logprob(position: int) -> float:
    """Deterministic log-probability of the completion token at ``position``."""
    return -round(0.05 + 0.1 * (position % 7), 4)


def json_object(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object (a dict), else an empty one."""
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {}


def json_list(value: Any) -> list[Any]:
    """``value`` if it is a JSON array (a list), else an empty one."""
    return cast("list[Any]", value) if isinstance(value, list) else []


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the ``text`` of each part of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = cast("list[Any]", content)
        return "".join(str(json_object(p).get("text", "")) if isinstance(p, dict) else str(p) for p in parts)
    return str(content)


def chat_prompt_text(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> str:
    """The toy chat template: what the prompt token ids encode."""
    parts: list[str] = []
    if tools:
        parts.append("<|tools|>" + json.dumps(tools, sort_keys=True))
    for message in messages:
        text = content_text(message.get("content"))
        for call in json_list(message.get("tool_calls")):
            fn = json_object(json_object(call).get("function"))
            text += f"<tool_call>{fn.get('name')}:{fn.get('arguments')}</tool_call>"
        parts.append(f"<|{message.get('role')}|>{text}")
    parts.append("<|assistant|>")
    return "".join(parts)


def _reply_text(reply: Reply) -> str:
    text = reply.content or ""
    for call in reply.tool_calls:
        text += f"<tool_call>{call.name}:{call.arguments_text()}</tool_call>"
    return text


def completion_token_ids(reply: Reply | str) -> list[int]:
    """Token ids the stand-in reports for ``reply``'s completion."""
    return token_ids(reply if isinstance(reply, str) else _reply_text(reply))


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


class StandinBackend:
    """The behaviour of the stand-in: answers, delays, and a record of what it received.

    Args:
        script: called with each request body; returns a :class:`Reply`, a string, or ``None``
            for the default answer (``"echo: <last user text>"``). May be async.
        delay_s: wait this long before answering.
        chunk_size: characters per streamed content chunk.
        chunk_delay_s: wait between streamed chunks (to keep a stream open in tests).
        record_requests: keep every request body in :attr:`requests` (off for benchmarks).
        always_return_token_ids: report token ids even when a request does not ask (``return_token_ids``).
        call_tools_on: when tools are offered and the last user message starts with this text, the default
            answer calls the first tool with ``{"q": <message>}``.
        fail_model: requests for this model get an HTTP 400 error (a failed LLM call).
        token_ids_supported: ``False``: never report token ids, even when asked (as OpenAI's own API).
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        delay_s: float = 0.0,
        chunk_size: int = 4,
        chunk_delay_s: float = 0.0,
        record_requests: bool = True,
        always_return_token_ids: bool = False,
        call_tools_on: str | None = None,
        fail_model: str | None = None,
        token_ids_supported: bool = True,
    ) -> None:
        self.script = script
        self.delay_s = delay_s
        self.chunk_size = max(1, chunk_size)
        self.chunk_delay_s = chunk_delay_s
        self.record_requests = record_requests
        self.always_return_token_ids = always_return_token_ids
        self.call_tools_on = call_tools_on
        self.fail_model = fail_model
        self.token_ids_supported = token_ids_supported
        self.requests: list[dict[str, Any]] = []
        self.streams_started = 0
        self.streams_finished = 0
        self._counter = 0
        self._lock = threading.Lock()

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            return f"{prefix}-standin-{self._counter}"

    async def reply_for(self, body: dict[str, Any]) -> Reply:
        result: Any = None
        if self.script is not None:
            result = self.script(body)
            if inspect.isawaitable(result):
                result = await result
        if result is None:
            result = self._tool_call_for(body)
        if result is None:
            messages = body.get("messages")
            prompt = (
                _last_user_text(json_list(messages))
                if isinstance(messages, list)
                else str(body.get("prompt"))
            )
            result = f"echo: {prompt}"
        return Reply(content=result) if isinstance(result, str) else result

    def _tool_call_for(self, body: dict[str, Any]) -> Reply | None:
        """The ``call_tools_on`` answer: a call of the first offered tool, or ``None``."""
        tools = body.get("tools")
        messages = body.get("messages")
        if self.call_tools_on is None or not tools or not isinstance(messages, list):
            return None
        text = _last_user_text(cast("list[dict[str, Any]]", messages))
        if not text.startswith(self.call_tools_on):
            return None
        name = str(cast("list[dict[str, Any]]", tools)[0].get("function", {}).get("name"))
        return Reply(tool_calls=[ToolCall(name, {"q": text})])

    def _wants_ids(self, body: dict[str, Any]) -> bool:
        return self.token_ids_supported and (
            self.always_return_token_ids or bool(body.get("return_token_ids"))
        )

    # -- HTTP handlers --------------------------------------------------------------------------

    async def _read(self, request: Request) -> dict[str, Any] | Response:
        try:
            decoded: Any = json.loads(await request.body())
        except ValueError:
            return JSONResponse({"error": {"message": "body is not JSON"}}, status_code=400)
        if not isinstance(decoded, dict):
            return JSONResponse({"error": {"message": "body must be a JSON object"}}, status_code=400)
        body = json_object(decoded)
        if self.record_requests:
            self.requests.append(body)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail_model is not None and body.get("model") == self.fail_model:
            message = f"model {self.fail_model!r} always fails"
            return JSONResponse({"error": {"message": message}}, status_code=400)
        return body

    async def chat_completions(self, request: Request) -> Response:
        body = await self._read(request)
        if isinstance(body, Response):
            return body
        messages = json_list(body.get("messages"))
        if not messages:
            return JSONResponse({"error": {"message": "messages must be a non-empty list"}}, status_code=400)
        reply = await self.reply_for(body)
        prompt_ids = token_ids(chat_prompt_text(messages, json_list(body.get("tools"))))
        if body.get("stream"):
            return StreamingResponse(
                self._chat_stream(body, reply, prompt_ids), media_type="text/event-stream"
            )
        completion_ids = completion_token_ids(reply)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{i}_{call.name}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text()},
                }
                for i, call in enumerate(reply.tool_calls)
            ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"),
            "logprobs": self._chat_logprobs(body, completion_ids, 0),
        }
        return self._answer("chat.completion", body, choice, prompt_ids, completion_ids)

    def _chat_logprobs(self, body: dict[str, Any], ids: list[int], offset: int) -> dict[str, Any] | None:
        if not body.get("logprobs"):
            return None
        top_n = int(body.get("top_logprobs") or 0)
        content: list[dict[str, Any]] = []
        for i, tid in enumerate(ids):
            lp = token_logprob(offset + i)
            entry: dict[str, Any] = {
                "token": chr(tid),
                "logprob": lp,
                "bytes": list(chr(tid).encode()),
                "top_logprobs": [{"token": chr(tid), "logprob": lp, "bytes": list(chr(tid).encode())}][
                    :top_n
                ],
            }
            content.append(entry)
        return {"content": content}

    async def _chat_stream(
        self, body: dict[str, Any], reply: Reply, prompt_ids: list[int]
    ) -> AsyncIterator[bytes]:
        self.streams_started += 1
        cid = self._next_id("chatcmpl")
        created = int(time.time())
        model = body.get("model", "standin")
        want_ids = self._wants_ids(body)
        position = 0

        def chunk(delta: dict[str, Any], ids: list[int], finish: str | None = None) -> bytes:
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "finish_reason": finish,
                "logprobs": self._chat_logprobs(body, ids, position) if ids else None,
            }
            if want_ids:
                choice["token_ids"] = ids
            data: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [choice],
            }
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        first: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        }
        if want_ids:
            first["prompt_token_ids"] = prompt_ids
            first["choices"][0]["token_ids"] = []
        yield b"data: " + json.dumps(first).encode() + b"\n\n"
        text = reply.content or ""
        for start in range(0, len(text), self.chunk_size):
            piece = text[start : start + self.chunk_size]
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            yield chunk({"content": piece}, token_ids(piece))
            position += len(piece)
        for index, call in enumerate(reply.tool_calls):
            head = f"<tool_call>{call.name}:"
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call.id or f"call_{index}_{call.name}",
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                },
                token_ids(head),
            )
            position += len(head)
            args = call.arguments_text()
            for start in range(0, len(args), self.chunk_size * 4):
                piece = args[start : start + self.chunk_size * 4]
                yield chunk(
                    {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, token_ids(piece)
                )
                position += len(piece)
            tail = "</tool_call>"
            yield chunk({}, token_ids(tail))
            position += len(tail)
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        yield chunk({}, [], finish)
        options = json_object(body.get("stream_options"))
        if options.get("include_usage"):
            usage_chunk: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": _usage(prompt_ids, completion_token_ids(reply)),
            }
            yield b"data: " + json.dumps(usage_chunk).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"
        self.streams_finished += 1

    async def completions(self, request: Request) -> Response:
        body = await self._read(request)
        if isinstance(body, Response):
            return body
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            prompt_ids = [int(x) for x in json_list(prompt)]
            prompt = "".join(chr(x) for x in prompt_ids)
            body = {**body, "prompt": prompt}
        elif isinstance(prompt, str):
            prompt_ids = token_ids(prompt)
        else:
            return JSONResponse(
                {"error": {"message": "prompt must be a string or token ids"}}, status_code=400
            )
        reply = await self.reply_for(body)
        text = _reply_text(reply)
        ids = token_ids(text)
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": reply.finish_reason or "stop"}
        if body.get("logprobs") is not None:
            choice["logprobs"] = {
                "tokens": [chr(t) for t in ids],
                "token_logprobs": [token_logprob(i) for i in range(len(ids))],
                "top_logprobs": None,
                "text_offset": list(range(len(prompt), len(prompt) + len(ids))),
            }
        else:
            choice["logprobs"] = None
        if self._wants_ids(body):
            choice["prompt_token_ids"] = prompt_ids
        return self._answer("text_completion", body, choice, prompt_ids, ids)

    def _answer(
        self,
        kind: str,
        body: dict[str, Any],
        choice: dict[str, Any],
        prompt_ids: list[int],
        completion_ids: list[int],
    ) -> Response:
        """A whole (not streamed) answer of ``kind`` with its one ``choice``, and token ids where asked."""
        payload: dict[str, Any] = {
            "id": self._next_id("chatcmpl" if kind == "chat.completion" else "cmpl"),
            "object": kind,
            "created": int(time.time()),
            "model": body.get("model", "standin"),
            "choices": [choice],
            "usage": _usage(prompt_ids, completion_ids),
        }
        if self._wants_ids(body):
            payload["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = completion_ids
        return JSONResponse(payload)

    async def models(self, request: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": "standin", "object": "model", "owned_by": "tests"}]}
        )

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    def app(self) -> Starlette:
        """The ASGI app."""
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
            ]
        )


def _usage(prompt_ids: list[int], completion_ids: list[int]) -> dict[str, int]:
    return {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(completion_ids),
        "total_tokens": len(prompt_ids) + len(completion_ids),
    }


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class StandinServer:
    """A running stand-in: ``url`` is the root, ``base_url`` ends in ``/v1`` (for OpenAI clients)."""

    backend: StandinBackend
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


@contextlib.contextmanager
def serve_standin(
    backend: StandinBackend | None = None, *, port: int | None = None
) -> Generator[StandinServer, None, None]:
    """Serve ``backend`` with uvicorn on 127.0.0.1 in a background thread until the block exits."""
    import uvicorn
    from agl.store.serving import ServerThread, bind_listener, quiet_server

    backend = backend or StandinBackend()
    config = uvicorn.Config(
        backend.app(),
        log_level="warning",
        access_log=False,
        lifespan="off",
    )
    server = quiet_server(config)
    sock = bind_listener("127.0.0.1", port, what="the OpenAI stand-in")
    background = ServerThread.of_uvicorn(server, sock, name="openai-standin")
    background.start(lambda: server.started, timeout=30, what="the OpenAI stand-in server")
    try:
        yield StandinServer(backend=backend, host="127.0.0.1", port=int(sock.getsockname()[1]))
    finally:
        server.should_exit = True
        background.join(timeout=30)


def main() -> None:  # pragma: no cover - command-line entry for benchmarks
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description="Serve the OpenAI-compatible stand-in backend.")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    backend = StandinBackend(record_requests=False)
    uvicorn.run(backend.app(), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":  # pragma: no cover
    main()
