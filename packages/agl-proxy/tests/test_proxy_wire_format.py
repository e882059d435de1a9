"""The proxy's wire and span formats as the reference's clients read them (issue 28): answers carry token ids
where vLLM puts them (``choices[i].token_ids``) and where the reference's proxy (LiteLLM) put them
(``choices[i].provider_specific_fields.token_ids``); call spans name their rollout and attempt in the resource."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from agl.store import InMemoryLightningStore
from agl.testing.openai_standin import StandinServer, chat_prompt_text, token_ids
from agl.testing.proxy import llm_spans, running_proxy
from agl.types.semconv import LightningResourceAttributes as R


def _events(text: str) -> list[dict[str, Any]]:
    payloads = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    return [json.loads(p) for p in payloads if p != "[DONE]"]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "litellm"])
async def test_token_ids_in_both_places(
    store: InMemoryLightningStore, standin: StandinServer, direct: bool
) -> None:
    rollout = await store.start_rollout(input=None)
    messages = [{"role": "user", "content": "hi"}]
    async with running_proxy(store, standin, direct_forwarding=direct) as proxy:
        url = proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id).endpoint + "/chat/completions"
        async with httpx.AsyncClient(timeout=30) as http:
            reply = await http.post(url, json={"model": "m", "messages": messages})
        [span] = await llm_spans(store, rollout, 1)
    body = reply.json()
    choice = body["choices"][0]
    assert choice["token_ids"] == token_ids("echo: hi")
    assert choice["provider_specific_fields"]["token_ids"] == token_ids("echo: hi")
    assert body["prompt_token_ids"] == token_ids(chat_prompt_text(messages))
    resource = span.resource.attributes
    assert resource[R.ROLLOUT_ID.value] == rollout.rollout_id
    assert resource[R.ATTEMPT_ID.value] == rollout.attempt.attempt_id


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "litellm"])
async def test_streamed_chunks_carry_token_ids_in_both_places(
    store: InMemoryLightningStore, standin: StandinServer, direct: bool
) -> None:
    rollout = await store.start_rollout(input=None)
    async with running_proxy(store, standin, direct_forwarding=direct) as proxy:
        url = proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id).endpoint + "/chat/completions"
        async with httpx.AsyncClient(timeout=30) as http:
            reply = await http.post(
                url, json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            )
    assert reply.text.rstrip().endswith("data: [DONE]")
    ids: list[int] = []
    for event in _events(reply.text):
        for choice in event.get("choices") or ():
            if "token_ids" in choice:
                assert choice["provider_specific_fields"]["token_ids"] == choice["token_ids"]
                ids.extend(choice["token_ids"])
    assert ids == token_ids("echo: hi")
    [span] = await llm_spans(store, rollout, 1)
    assert span.attributes  # the call is recorded as well
