"""The reference's ``LLMProxy`` arguments (agentlightning 0.3) are accepted: each keeps its meaning, or warns that it
has none here."""

from __future__ import annotations

import asyncio
import sys
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
from agl.proxy import LLMProxy
from agl.store import InMemoryLightningStore
from agl.testing.openai_standin import StandinBackend, serve_standin
from agl.testing.proxy import OpenAIClients, llm_spans, model_list
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

MODELS = [
    {"model_name": "m", "litellm_params": {"model": "hosted_vllm/m", "api_base": "http://127.0.0.1:9/v1"}}
]


def test_the_references_positional_order_is_recognised(store: InMemoryLightningStore) -> None:
    with pytest.warns(DeprecationWarning, match="reference's order"):
        proxy = LLMProxy(4000, MODELS, store)  # pyright: ignore[reportArgumentType]  # the reference's (port, model_list, store)
    assert (proxy.port, proxy.model_list, proxy.store, proxy.host) == (4000, MODELS, store, "127.0.0.1")
    with pytest.warns(DeprecationWarning, match="reference's order"):
        proxy = LLMProxy(None, MODELS, store, "0.0.0.0")  # pyright: ignore[reportArgumentType]
    assert (proxy.port, proxy.model_list, proxy.store, proxy.host) == (None, MODELS, store, "0.0.0.0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # this LLMProxy's own order stays silent
        proxy = LLMProxy(MODELS, store, "127.0.0.1", 4000)
    assert (proxy.port, proxy.model_list, proxy.store) == (4000, MODELS, store)


def test_launch_options_without_meaning_here_warn() -> None:
    with pytest.warns(UserWarning, match="serves in a thread"):
        assert LLMProxy(MODELS, launch_mode="mp").launch_mode == "thread"  # the reference's default
    with pytest.warns(UserWarning, match="num_workers=4"):
        LLMProxy(MODELS, num_workers=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LLMProxy(MODELS, num_workers=1)
    args = SimpleNamespace(host="0.0.0.0", port=4001, launch_mode="asyncio", n_workers=1)
    with pytest.warns(DeprecationWarning, match="launcher_args"):
        proxy = LLMProxy(MODELS, launcher_args=args)
    assert (proxy.host, proxy.port, proxy.launch_mode) == ("0.0.0.0", 4001, "asyncio")
    with pytest.raises(ValueError, match="launch_mode"):
        LLMProxy(MODELS, launch_mode="bogus")  # pyright: ignore[reportArgumentType]


def test_litellm_options_are_mapped() -> None:
    config = {
        "litellm_settings": {"drop_params": True, "num_retries": 1},
        "router_settings": {"routing_strategy": "simple-shuffle", "timeout": 30},
    }
    proxy = LLMProxy(MODELS, num_retries=3, litellm_config=config, router_kwargs={"timeout": 5})
    assert proxy.router_kwargs == {"num_retries": 3, "routing_strategy": "simple-shuffle", "timeout": 5}
    assert proxy.litellm_settings == {"drop_params": True}
    assert not proxy.settings.direct_forwarding  # they act inside LiteLLM: calls go through it
    assert LLMProxy(
        MODELS, num_retries=0
    ).settings.direct_forwarding  # the reference's default changes nothing
    with pytest.warns(UserWarning, match="act only on the backends LiteLLM serves"):
        assert LLMProxy(MODELS, num_retries=2, direct_forwarding=True).settings.direct_forwarding
    with pytest.warns(UserWarning, match="general_settings ignored"):
        LLMProxy(MODELS, litellm_config={"general_settings": {"master_key": "k"}})
    assert LLMProxy(litellm_config={"model_list": MODELS}).model_list == MODELS
    with pytest.raises(ValueError, match="num_retries"):
        LLMProxy(MODELS, num_retries=-1)


def test_callback_and_middleware_aliases() -> None:
    proxy = LLMProxy(MODELS, callbacks=["return_token_ids", "opentelemetry"])
    assert proxy.settings.return_token_ids and not proxy.settings.request_logprobs
    assert proxy.settings.direct_forwarding and proxy.callbacks == []
    assert not LLMProxy(
        MODELS, callbacks=["opentelemetry"]
    ).settings.return_token_ids  # as the reference: not asked
    assert LLMProxy(MODELS, callbacks=["opentelemetry"], return_token_ids=True).settings.return_token_ids
    with pytest.warns(UserWarning, match="without 'opentelemetry'"):
        assert LLMProxy(MODELS, callbacks=["logprobs"]).settings.request_logprobs
    with pytest.raises(ValueError, match="unknown callback alias 'bogus'"):
        LLMProxy(MODELS, callbacks=["bogus"])
    with pytest.raises(ValueError, match="unknown middleware alias 'bogus'"):
        LLMProxy(MODELS, middlewares=["bogus"])
    with pytest.warns(UserWarning, match="message_inspection"):
        LLMProxy(MODELS, middlewares=["rollout_attempt", "stream_conversion", "message_inspection"])


class FlakyBackend(StandinBackend):
    """Answers its first chat request with a 503."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def chat_completions(self, request: Request) -> Response:
        self.calls += 1
        if self.calls == 1:
            return JSONResponse({"error": {"message": "busy, try again"}}, status_code=503)
        return await super().chat_completions(request)


class TagResponses(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        response.headers["x-tagged"] = request.url.path
        return response


def _recorder_class() -> tuple[type, list[str]]:
    from litellm.integrations.custom_logger import CustomLogger

    seen: list[str] = []

    class Recorder(CustomLogger):
        async def async_log_success_event(
            self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
        ) -> None:
            seen.append(str(kwargs.get("model")))

    return Recorder, seen


async def test_retries_callbacks_and_middlewares_act_on_calls(
    store: InMemoryLightningStore, attempt_client: OpenAIClients
) -> None:
    recorder, seen = _recorder_class()
    backend = FlakyBackend()
    with serve_standin(backend) as server:
        proxy = LLMProxy(
            model_list=model_list(server),
            store=store,
            num_retries=2,
            callbacks=["return_token_ids", "opentelemetry", recorder],
            middlewares=["rollout_attempt", TagResponses],
        )
        await proxy.start()
        try:
            rollout = await store.start_rollout(input=None)
            client = attempt_client(proxy, rollout, max_retries=0)
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            assert raw.headers["x-tagged"].endswith("/chat/completions")  # the middleware wrapped the app
            assert raw.parse().choices[0].message.content == "echo: hi"
            assert backend.calls == 2  # the 503 was retried by LiteLLM
            [span] = await llm_spans(store, rollout, 1)
            assert span.attributes
            for _ in range(200):  # LiteLLM runs success callbacks from its logging worker
                if seen:
                    break
                await asyncio.sleep(0.01)
            assert seen, "the LiteLLM callback class was not called"
        finally:
            await proxy.stop()
    litellm: Any = sys.modules["litellm"]
    assert not any(isinstance(c, recorder) for c in litellm.callbacks)  # removed when the proxy stopped
