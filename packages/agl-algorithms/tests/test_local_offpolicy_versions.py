"""Reading the weights version of a call from its recorded span (the local model server's
``system_fingerprint``), on spans shaped as the proxy records them."""

from __future__ import annotations

from typing import Any

import pytest
from agl.algorithms.adapter import Turn
from agl.algorithms.adapter.triplet import span_to_triplet
from agl.algorithms.local.versions import (
    SYSTEM_FINGERPRINT_ATTRIBUTE,
    SYSTEM_FINGERPRINT_KEYS,
    call_weights_version,
    parse_weights_version,
    rollout_weights_version,
    span_weights_versions,
    weights_fingerprint,
)
from agl.types import Span, TraceStatus
from agl.types.semconv import AGL_LLM_CALL, AGL_REWARD, LLMCall, LLMCallFormat, LLMChoice, LLMUsage
from hypothesis import given
from hypothesis import strategies as st


@given(st.integers(0, 10**12))
def test_fingerprint_round_trips(version: int) -> None:
    assert parse_weights_version(weights_fingerprint(version)) == version


@pytest.mark.parametrize(
    "value",
    [None, 3, "", "agl-local-v", "agl-local-vx", "agl-local-v-1", "fp_44709d6fcb", "agl-local-v3x", "v3"],
)
def test_other_fingerprints_have_no_version(value: Any) -> None:
    assert parse_weights_version(value) is None


def test_negative_versions_have_no_fingerprint() -> None:
    with pytest.raises(ValueError):
        weights_fingerprint(-1)


def _recorded_call(version: int | None, logprobs: list[float]) -> dict[str, Any]:
    """The attributes the proxy records for one chat call to the local model server (``PROXY`` layout),
    plus the response's ``system_fingerprint`` as the proxy keeps it."""
    call = LLMCall(
        endpoint="chat.completions",
        system="openai",
        model="policy",
        stream=False,
        params={"temperature": 1.0, "max_tokens": 16, "logprobs": True, "return_token_ids": True},
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        api_base="http://127.0.0.1:8000/v1",
        route="direct",
        http_status=200,
        latency_ms=12.5,
        response_id="chatcmpl-1",
        response_model="policy",
        choices=[
            LLMChoice(
                message={"role": "assistant", "content": "5"},
                finish_reason="stop",
                token_ids=[53, 2],
                logprobs=logprobs,
            )
        ],
        prompt_token_ids=[1, 40, 41, 42],
        response_token_ids=[53, 2],
        usage=LLMUsage(input_tokens=4, output_tokens=2),
    )
    attributes = call.to_attributes(LLMCallFormat.PROXY)
    if version is not None:
        attributes[SYSTEM_FINGERPRINT_ATTRIBUTE] = weights_fingerprint(version)
    return attributes


def _span(attributes: dict[str, Any], sequence_id: int, name: str = AGL_LLM_CALL) -> Span:
    span = Span.from_attributes(
        attributes=attributes,
        rollout_id="ro-1",
        attempt_id="at-1",
        sequence_id=sequence_id,
        name=name,
        start_time=1.0,
        end_time=2.0,
        status=TraceStatus(status_code="OK"),
    )
    return Span.model_validate_json(span.model_dump_json())  # as the store gives it back


def test_version_of_a_recorded_proxy_call() -> None:
    span = _span(_recorded_call(3, [-0.25, -0.5]), 1)
    assert LLMCall.detect_format(span.attributes) is LLMCallFormat.PROXY
    assert call_weights_version(span) == 3
    assert call_weights_version(span.attributes) == 3
    # the triplet names its span, so its turn gets the version; its logprobs become the behaviour policy's
    triplet = span_to_triplet(span)
    assert span_weights_versions([span])[triplet.metadata["span_id"]] == 3
    turn = Turn(triplet.prompt["token_ids"], triplet.response["token_ids"], triplet.response["logprobs"])
    assert turn.logprobs == [-0.25, -0.5]


def test_calls_without_a_local_fingerprint_have_no_version() -> None:
    assert call_weights_version(_span(_recorded_call(None, [-0.1, -0.2]), 1)) is None
    other = _recorded_call(None, [-0.1, -0.2])
    other[SYSTEM_FINGERPRINT_ATTRIBUTE] = "fp_44709d6fcb"  # a hosted model's fingerprint
    assert call_weights_version(other) is None
    assert call_weights_version({}) is None


@pytest.mark.parametrize("key", SYSTEM_FINGERPRINT_KEYS)
def test_every_known_attribute_name_is_read(key: str) -> None:
    assert call_weights_version({key: weights_fingerprint(7)}) == 7


def test_rollout_version_is_its_oldest_call() -> None:
    spans = [
        _span(_recorded_call(5, [-0.1, -0.2]), 1),
        _span(_recorded_call(4, [-0.3, -0.4]), 2),  # a later turn may run on other weights
        _span(
            {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 1.0}, 3, AGL_REWARD
        ),
        _span(_recorded_call(None, [-0.1, -0.2]), 4),
    ]
    assert rollout_weights_version(spans) == 4
    assert span_weights_versions(spans) == {spans[0].span_id: 5, spans[1].span_id: 4}
    assert rollout_weights_version(spans[2:]) is None
    assert rollout_weights_version([]) is None


async def test_the_proxy_records_which_weights_answered_each_call(tmp_path: Any) -> None:
    """A real model server behind a real LLM proxy: each call's span names the weights version that answered,
    before and after a weight swap (issue 30: every sample knows its weights)."""
    pytest.importorskip("torch")
    import asyncio

    import openai
    import torch
    from agl.algorithms.local import ModelServer
    from agl.proxy import LLMProxy
    from agl.store import InMemoryLightningStore
    from agl.testing.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    store = InMemoryLightningStore()
    with ModelServer(build_tiny_model(tmp_path / "tiny"), served_model_name="tiny") as server:
        route = {
            "model_name": "tiny",
            "litellm_params": {"model": "hosted_vllm/tiny", "api_base": server.url},
        }
        proxy = LLMProxy([route], store=store)
        await proxy.start()
        try:
            seen: list[int | None] = []
            for swap in (False, True):
                if swap:
                    state = {k: v.clone() for k, v in server.engine.model.state_dict().items()}
                    await asyncio.to_thread(server.update_weights, state)
                attempted = await store.start_rollout(input=None)
                llm = proxy.as_resource(attempted.rollout_id, attempted.attempt.attempt_id, model="tiny")
                async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="x") as client:
                    await client.chat.completions.create(
                        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3
                    )
                await proxy.flush()
                spans = list(await store.query_spans(attempted.rollout_id))
                seen.append(rollout_weights_version([s for s in spans if s.name == AGL_LLM_CALL]))
        finally:
            await proxy.stop()
    assert seen == [0, 1]
