"""An OpenAI-compatible HTTP server for a Hugging Face causal LM, with vLLM's token-id extensions.

``POST /v1/chat/completions`` renders the messages (and ``tools``) with the model's chat template,
generates with continuous batching (:class:`~agl.algorithms.local.engine.GenerationEngine`), and parses
hermes ``<tool_call>`` blocks into OpenAI ``tool_calls``. Like vLLM it returns ``prompt_token_ids`` and
each choice's ``token_ids`` when the request sets ``return_token_ids``, and per-token ``logprobs`` when
it sets ``logprobs``. Weights are swapped in place with :meth:`ModelServer.update_weights`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from agl.store.serving import ServerThread, bind_listener, quiet_server
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from .._json import is_dict, is_list
from ._chat import parse_tool_calls, render_prompt, visible_prefix
from ._serving import ServedModel
from ._weights import WeightsMismatch, refuse_non_regular_file
from .engine import GenerationEngine, GenerationResult, SamplingParams
from .versions import weights_fingerprint

__all__ = ["ModelServer", "load_model"]

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 * 1024 * 1024


def load_model(path: str | Path, *, device: str = "cpu", dtype: torch.dtype | None = None) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer from a local directory (or a hub id when the network allows)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = _from_pretrained(AutoTokenizer, str(path))
    model = _from_pretrained(AutoModelForCausalLM, str(path), dtype=dtype or torch.float32)
    return model.to(device), tokenizer


def _from_pretrained(auto_class: Any, path: str, **kwargs: Any) -> Any:
    """``auto_class.from_pretrained(path, **kwargs)``, typed ``Any``: transformers' auto classes are only
    partly annotated, and what they load depends on the checkpoint."""
    return auto_class.from_pretrained(path, **kwargs)


def safetensors_torch() -> Any:
    """``safetensors.torch``, typed ``Any`` (its signatures leave ``os.PathLike`` unparameterised)."""
    import safetensors.torch

    return safetensors.torch


class _BadRequest(ValueError):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _error(message: str, status: int = 400) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


class ModelServer(ServedModel):
    """Serve a model over OpenAI's chat API on 127.0.0.1 (in a background thread).

    Args:
        model: a model directory / hub id, or an already loaded ``PreTrainedModel`` (then pass ``tokenizer``).
        tokenizer: the tokenizer when ``model`` is an object.
        served_model_name: the name clients ask for (default: the directory name).
        host, port: where to listen; port 0 picks a free one.
        max_batch_size, batch_wait_s, max_cache_tokens: continuous batching limits (see
            ``GenerationEngine``).
        admin_token: enables ``POST /agl/weights`` (load new weights from a safetensors file, as
            :meth:`update_weights`) and ``GET /agl/stats`` (the engine's counters) for requests bearing
            this token: how :class:`~agl.algorithms.local.server_process.ModelServerProcess` drives a
            server in another process.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        model: str | Path | Any,
        tokenizer: Any | None = None,
        *,
        served_model_name: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_batch_size: int = 256,
        batch_wait_s: float = 0.005,
        device: str = "cpu",
        max_cache_tokens: int | None = None,
        admin_token: str | None = None,
    ) -> None:
        if isinstance(model, (str, Path)):
            loaded, loaded_tokenizer = load_model(model, device=device)
            self.served_model_name = served_model_name or Path(str(model)).name
            model, tokenizer = loaded, tokenizer or loaded_tokenizer
        else:
            if tokenizer is None:
                raise ValueError("pass the tokenizer together with a model object")
            self.served_model_name = served_model_name or str(
                getattr(model.config, "_name_or_path", "") or "model"
            )
        self.tokenizer: Any = tokenizer
        self.engine = GenerationEngine(
            model,
            tokenizer,
            max_batch_size=max_batch_size,
            batch_wait_s=batch_wait_s,
            max_cache_tokens=max_cache_tokens,
        )
        self.host = host
        self._requested_port = port
        self.port: int | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._admin_token = admin_token
        self.app = self._build_app()

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """How many weight updates have been applied."""
        return self.engine.version

    def start(self, timeout: float = 30.0) -> ModelServer:
        """Start the engine and the HTTP server; returns when it accepts connections."""
        import uvicorn

        if self._thread is not None:
            return self
        self.engine.start()
        sock = bind_listener(self.host, self._requested_port, what="the model server")
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=30
        )
        server = self._server = quiet_server(config)
        background = ServerThread.of_uvicorn(server, sock, name="agl-model-server")
        self._thread = background.thread
        try:
            background.start(lambda: server.started, timeout=timeout, what="the model server")
        except (RuntimeError, TimeoutError) as exc:
            self.stop()
            raise RuntimeError(f"the model server did not start on {self.host}:{self.port}: {exc}") from exc
        return self

    def stop(self) -> None:
        """Stop the HTTP server and the engine."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.engine.stop()
        self._server = None
        self._thread = None

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int | None = None) -> int:
        """Swap in new weights without restarting (between two generation batches); returns the new version
        (``version`` when given, else the next; see :meth:`GenerationEngine.update_weights`)."""
        return self.engine.update_weights(state_dict, version)

    @property
    def stats(self) -> dict[str, Any]:
        """The engine's counters (see :attr:`GenerationEngine.stats`), as of now."""
        return dict(self.engine.stats)

    # -- HTTP ----------------------------------------------------------------------------------

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="agl local model server")

        @app.get("/health")
        async def health() -> dict[str, Any]:
            return {"status": "ok", "model": self.served_model_name, "version": self.engine.version}

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {
                "object": "list",
                "data": [{"id": self.served_model_name, "object": "model", "created": 0, "owned_by": "agl"}],
            }

        if self._admin_token is not None:
            self._add_admin_routes(app, self._admin_token)

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> Any:
            try:
                body = await _read_json(request)
                return await self._chat(body)
            except _BadRequest as exc:
                return _error(str(exc), exc.status)
            except ValueError as exc:
                return _error(str(exc))

        return app

    def _add_admin_routes(self, app: FastAPI, token: str) -> None:
        expected = f"Bearer {token}".encode()

        def refused(request: Request) -> JSONResponse | None:
            given = request.headers.get("authorization", "").encode("utf-8", "replace")
            if not hmac.compare_digest(given, expected):
                return _error("the admin routes need the server's admin token", 401)
            return None

        @app.get("/agl/stats")
        async def stats(request: Request) -> Any:
            return refused(request) or {"version": self.engine.version, "stats": self.stats}

        @app.post("/agl/weights")
        async def weights(request: Request) -> Any:
            if (answer := refused(request)) is not None:
                return answer
            try:
                body = await _read_json(request)
                path = body.get("path")
                if not isinstance(path, str):
                    raise _BadRequest("give the safetensors file to load as {'path': ...}")
                version = await asyncio.to_thread(self._update_from_file, path)
            except _BadRequest as exc:
                return _error(str(exc), exc.status)
            return {"version": version}

    def _update_from_file(self, path: str) -> int:
        """Load the safetensors file at ``path`` and swap it in (in a worker thread: the load holds the
        interpreter lock for a while); ``_BadRequest`` for a file that is not weights of this model."""
        try:
            refuse_non_regular_file(path)
            try:
                state = safetensors_torch().load_file(path)
            except Exception as exc:  # unreadable, or not safetensors
                raise _BadRequest(f"cannot read weights from {path!r}: {exc}") from exc
            return self.update_weights(state)
        except WeightsMismatch as exc:
            raise _BadRequest(f"{path!r}: {exc}") from exc

    def _sampling(self, body: dict[str, Any]) -> SamplingParams:
        stop: Any = body.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        if not is_list(stop) or not all(isinstance(s, str) for s in stop):
            raise _BadRequest("stop must be a string or a list of strings")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        top_logprobs = body.get("top_logprobs") or 0
        try:
            params = SamplingParams(
                max_tokens=None if max_tokens is None else int(max_tokens),
                temperature=1.0 if body.get("temperature") is None else float(body["temperature"]),
                top_p=1.0 if body.get("top_p") is None else float(body["top_p"]),
                seed=None if body.get("seed") is None else int(body["seed"]),
                stop=stop,
                top_logprobs=int(top_logprobs),
            )
        except (TypeError, ValueError) as exc:
            raise _BadRequest(f"bad sampling parameter: {exc}") from exc
        params.validate()
        return params

    async def _chat(self, body: dict[str, Any]) -> Any:
        model = body.get("model")
        if model is not None and model != self.served_model_name:
            raise _BadRequest(
                f"model {model!r} is not served here; this server serves {self.served_model_name!r}", 404
            )
        messages = body.get("messages")
        if not is_list(messages):
            raise _BadRequest("messages must be a list of chat messages")
        tools = body.get("tools")
        if tools is not None and not is_list(tools):
            raise _BadRequest("tools must be a list")
        if body.get("tool_choice") == "none":
            tools = None
        params = self._sampling(body)
        n = int(body.get("n") or 1)
        if not 1 <= n <= 64:
            raise _BadRequest("n must be within [1, 64]")
        prompt = render_prompt(self.tokenizer, messages, tools)
        prompt_ids: list[int] = self.tokenizer.encode(prompt, add_special_tokens=False)
        want_ids = bool(body.get("return_token_ids"))
        want_logprobs = bool(body.get("logprobs"))
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        if body.get("stream"):
            if n != 1:
                raise _BadRequest("streaming supports n=1 only")
            stream_options: Any = body.get("stream_options") or {}
            include_usage = bool(stream_options.get("include_usage"))
            stream = self._stream(completion_id, prompt_ids, params, want_ids, want_logprobs, include_usage)
            return StreamingResponse(stream, media_type="text/event-stream")
        futures: list[asyncio.Future[GenerationResult]] = []
        for i in range(n):
            choice_params = params
            if params.seed is not None and i:
                choice_params = dataclasses.replace(params, seed=params.seed + i)
            futures.append(asyncio.wrap_future(self.engine.submit(prompt_ids, choice_params)))
        results: list[GenerationResult] = await asyncio.gather(*futures)
        choices = [self._choice(i, r, want_ids, want_logprobs) for i, r in enumerate(results)]
        completion_tokens = sum(len(r.token_ids) for r in results)
        response: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.served_model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt_ids) + completion_tokens,
            },
            "system_fingerprint": weights_fingerprint(results[0].model_version),
        }
        if want_ids:
            response["prompt_token_ids"] = prompt_ids
        return JSONResponse(response)

    def _logprob_entry(
        self, token: int, logprob: float, top: list[tuple[int, float]] | None
    ) -> dict[str, Any]:
        text = self.tokenizer.decode([token])
        return {
            "token": text,
            "logprob": logprob,
            "bytes": list(text.encode("utf-8")),
            "top_logprobs": [
                {"token": (t := self.tokenizer.decode([i])), "logprob": v, "bytes": list(t.encode("utf-8"))}
                for i, v in (top or [])
            ],
        }

    def _choice(
        self, index: int, result: GenerationResult, want_ids: bool, want_logprobs: bool
    ) -> dict[str, Any]:
        content, calls = parse_tool_calls(result.text)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        choice: dict[str, Any] = {
            "index": index,
            "message": message,
            "finish_reason": "tool_calls"
            if calls and result.finish_reason == "stop"
            else result.finish_reason,
            "logprobs": None,
        }
        if want_logprobs:
            tops = result.top_logprobs or [None] * len(result.token_ids)
            choice["logprobs"] = {
                "content": [
                    self._logprob_entry(t, lp, top)
                    for t, lp, top in zip(result.token_ids, result.logprobs, tops, strict=False)
                ]
            }
        if want_ids:
            choice["token_ids"] = result.token_ids
        return choice

    def _streamed_text(self, generated: list[int], stops: Sequence[str]) -> str:
        """What a stream may show of ``generated`` so far: decoded, cut at a stop string, without a trailing
        incomplete multi-byte character (it waits for its next byte)."""
        text = visible_prefix(self.tokenizer.decode(generated, skip_special_tokens=True))
        for stop in stops:
            cut = text.find(stop)
            if cut >= 0:
                text = text[:cut]
        return text[:-1] if text.endswith("\ufffd") else text

    async def _stream(
        self,
        completion_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        want_ids: bool,
        want_logprobs: bool,
        include_usage: bool,
    ) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        # The worker thread posts each token, then None once the request is answered (its future is done:
        # finished, failed or cancelled): the stream awaits this one queue, and no task of its own that a
        # client going away could leave pending.
        events: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()

        def post(event: tuple[int, float] | None) -> None:
            # RuntimeError: the server's loop is closed (the stream is gone; nobody reads the queue).
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(events.put_nowait, event)

        def on_token(token: int, logprob: float) -> None:
            post((token, logprob))

        future = self.engine.submit(prompt_ids, params, on_token=on_token)
        future.add_done_callback(lambda _: post(None))
        created = int(time.time())

        def sse(choices: list[dict[str, Any]], **fields: Any) -> str:
            payload: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.served_model_name,
                "choices": choices,
                **fields,
            }
            return f"data: {json.dumps(payload)}\n\n"

        def choice(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
            return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None, **extra}

        try:
            first = choice({"role": "assistant", "content": ""})
            yield sse([first], **({"prompt_token_ids": prompt_ids} if want_ids else {}))
            generated: list[int] = []
            sent = ""
            while (event := await events.get()) is not None:
                token, logprob = event
                generated.append(token)
                text = self._streamed_text(generated, params.stop)
                delta_text, sent = text[len(sent) :], max(text, sent, key=len)
                extra: dict[str, Any] = {}
                if want_ids:
                    extra["token_ids"] = [token]
                if want_logprobs:
                    extra["logprobs"] = {"content": [self._logprob_entry(token, logprob, None)]}
                if delta_text or extra:
                    yield sse([choice({"content": delta_text} if delta_text else {}, **extra)])
            try:
                result = future.result()
            except Exception as exc:  # report the failure in-band; the status line was already sent
                yield f"data: {json.dumps({'error': {'message': str(exc), 'type': 'server_error'}})}\n\n"
                yield "data: [DONE]\n\n"
                return
            # the weights that made the answer, known once it is done: on the last chunks (a reader keeps the last)
            fingerprint = weights_fingerprint(result.model_version)
            delta, finish = _final_delta(result.text, result.finish_reason, sent)
            yield sse([choice(delta, finish)], system_fingerprint=fingerprint)
            if include_usage:
                usage = {
                    "prompt_tokens": len(prompt_ids),
                    "completion_tokens": len(result.token_ids),
                    "total_tokens": len(prompt_ids) + len(result.token_ids),
                }
                yield sse([], usage=usage, system_fingerprint=fingerprint)
            yield "data: [DONE]\n\n"
        finally:
            future.cancel()  # when the client went away: free its row in the batch (a no-op once answered)


async def _read_json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise _BadRequest(f"request body over {MAX_BODY_BYTES} bytes", 413)
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not is_dict(body):
        raise _BadRequest("request body must be a JSON object")
    return body


def _final_delta(text: str, finish_reason: str, sent: str) -> tuple[dict[str, Any], str]:
    """The last chunk's delta and finish reason: the tool calls parsed from the whole ``text``, or the content
    not yet ``sent``."""
    content, calls = parse_tool_calls(text)
    delta: dict[str, Any] = {}
    if calls:
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(calls)]
    elif content and len(content) > len(sent):
        delta["content"] = content[len(sent) :]
    return delta, "tool_calls" if calls and finish_reason == "stop" else finish_reason
