"""The local model server against the real ``openai`` client, on a tiny random model built here."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import httpx
import torch
from agl.algorithms.local import ModelServer, SamplingParams
from agl.algorithms.local._chat import normalize_messages, parse_tool_calls, visible_prefix
from openai import APIStatusError, AsyncOpenAI, OpenAI

MODEL = "tiny"
TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "math",
        "parameters": {"type": "object", "properties": {}},
    },
}


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[ModelServer]:
    torch.set_num_threads(1)
    with ModelServer(model_dir, served_model_name=MODEL) as s:
        yield s


@pytest.fixture
def client(server: ModelServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def ask(client: OpenAI, **kwargs: Any) -> Any:
    params: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "What is 12 + 30?"}]}
    params.update(kwargs)
    return client.chat.completions.create(**params)


def test_chat_returns_token_ids_and_logprobs(client: OpenAI, server: ModelServer) -> None:
    r = ask(
        client, max_tokens=12, seed=3, logprobs=True, top_logprobs=2, extra_body={"return_token_ids": True}
    )
    choice = r.choices[0]
    token_ids = choice.model_extra["token_ids"]
    prompt_ids = r.model_extra["prompt_token_ids"]
    assert 1 <= len(token_ids) <= 12
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens == len(token_ids)
    assert r.usage.prompt_tokens == len(prompt_ids)
    # the prompt ids are the chat template's rendering, tokenised
    text = server.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 12 + 30?"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt_ids == server.tokenizer.encode(text, add_special_tokens=False)
    assert choice.logprobs is not None and len(choice.logprobs.content) == len(token_ids)
    for entry, token in zip(choice.logprobs.content, token_ids, strict=False):
        assert entry.logprob <= 0.0
        assert entry.token == server.tokenizer.decode([token])
        assert len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob >= entry.logprob - 1e-5  # the top one is at least as likely


def test_logprobs_match_the_model(client: OpenAI, server: ModelServer) -> None:
    r = ask(client, max_tokens=6, seed=5, logprobs=True, extra_body={"return_token_ids": True})
    ids = r.model_extra["prompt_token_ids"] + r.choices[0].model_extra["token_ids"]
    n_prompt = len(r.model_extra["prompt_token_ids"])
    with torch.no_grad():
        logits = server.engine.model(input_ids=torch.tensor([ids])).logits[0]
    expected = torch.log_softmax(logits.float(), -1)[n_prompt - 1 : -1].gather(
        1, torch.tensor(ids[n_prompt:]).unsqueeze(1)
    )
    got = torch.tensor([e.logprob for e in r.choices[0].logprobs.content])
    assert torch.allclose(got, expected.squeeze(1), atol=1e-4)


def test_seed_makes_sampling_reproducible_and_greedy_is_deterministic(client: OpenAI) -> None:
    a = ask(client, max_tokens=10, seed=11, extra_body={"return_token_ids": True})
    b = ask(client, max_tokens=10, seed=11, extra_body={"return_token_ids": True})
    assert a.choices[0].model_extra["token_ids"] == b.choices[0].model_extra["token_ids"]
    g1 = ask(client, max_tokens=10, temperature=0, extra_body={"return_token_ids": True})
    g2 = ask(client, max_tokens=10, temperature=0, extra_body={"return_token_ids": True})
    assert g1.choices[0].model_extra["token_ids"] == g2.choices[0].model_extra["token_ids"]


def test_max_tokens_gives_length_and_n_gives_choices(client: OpenAI) -> None:
    r = ask(client, max_tokens=1, n=3, seed=1, extra_body={"return_token_ids": True})
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        assert len(c.model_extra["token_ids"]) == 1
        assert c.finish_reason in ("length", "stop")


def test_streaming_matches_the_whole_response(client: OpenAI) -> None:
    whole = ask(client, max_tokens=16, seed=7, extra_body={"return_token_ids": True})
    stream = ask(
        client,
        max_tokens=16,
        seed=7,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"return_token_ids": True},
    )
    content, ids, finish, usage = "", [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            ids += (choice.model_extra or {}).get("token_ids") or []
            finish = choice.finish_reason or finish
    assert ids == whole.choices[0].model_extra["token_ids"]
    assert content == (whole.choices[0].message.content or "")
    assert finish == whole.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == len(ids)


def test_tool_history_is_rendered_and_tools_accepted(client: OpenAI, server: ModelServer) -> None:
    messages = [
        {"role": "user", "content": "What is 12 + 30?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "12 + 30"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    r = ask(client, messages=messages, tools=[TOOL], max_tokens=4, extra_body={"return_token_ids": True})
    prompt = server.tokenizer.decode(r.model_extra["prompt_token_ids"])
    assert (
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 + 30"}}\n</tool_call>' in prompt
    )
    assert "<tool_response>\n42\n</tool_response>" in prompt
    assert '"name": "calculator"' in prompt.split("</tools>")[0]


def test_concurrent_requests_are_batched(server: ModelServer) -> None:
    async def run() -> list[Any]:
        async with AsyncOpenAI(base_url=server.url, api_key="unused", max_retries=0) as c:
            return await asyncio.gather(
                *[
                    c.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": f"Hi {i}"}], max_tokens=8, seed=i
                    )
                    for i in range(24)
                ]
            )

    before = dict(server.engine.stats)
    results = asyncio.run(run())
    assert len(results) == 24
    batches = server.engine.stats["batches"] - before["batches"]
    assert server.engine.stats["requests"] - before["requests"] == 24
    assert batches < 24  # at least some requests shared a forward pass


def test_bad_requests_are_4xx_and_the_server_survives(client: OpenAI, server: ModelServer) -> None:
    with pytest.raises(APIStatusError) as info:
        ask(client, model="other")
    assert info.value.status_code == 404 and "tiny" in str(info.value)
    with pytest.raises(APIStatusError) as info:
        ask(client, temperature=-1)
    assert info.value.status_code == 400
    with pytest.raises(APIStatusError) as info:
        ask(client, messages=[{"role": "wizard", "content": "x"}])
    assert info.value.status_code == 400
    too_long = "12 " * 400
    with pytest.raises(APIStatusError) as info:
        ask(client, messages=[{"role": "user", "content": too_long}])
    assert info.value.status_code == 400 and "context" in str(info.value)
    raw = httpx.post(server.url + "/chat/completions", content=b"{not json", timeout=10)
    assert raw.status_code == 400
    assert ask(client, max_tokens=2).choices  # still serving


def test_update_weights_changes_outputs_without_restart(model_dir: Path) -> None:
    with (
        ModelServer(model_dir, served_model_name=MODEL) as s,
        OpenAI(base_url=s.url, api_key="x", max_retries=0) as c,
    ):
        first = ask(c, max_tokens=5, logprobs=True, temperature=0)
        state = {k: v + 0.05 * torch.randn_like(v) for k, v in s.engine.model.state_dict().items()}
        assert s.update_weights(state) == 1
        second = ask(c, max_tokens=5, logprobs=True, temperature=0)
        assert second.system_fingerprint == "agl-local-v1"
        streamed = ask(c, max_tokens=5, temperature=0, stream=True, stream_options={"include_usage": True})
        fingerprints = [chunk.system_fingerprint for chunk in streamed]
        assert fingerprints[-1] == "agl-local-v1"  # the stream's last word names the weights that made it
        assert set(fingerprints) <= {None, "agl-local-v1"}
        assert [e.logprob for e in first.choices[0].logprobs.content] != [
            e.logprob for e in second.choices[0].logprobs.content
        ]


def test_engine_generate_respects_stop_strings(server: ModelServer) -> None:
    prompt = server.tokenizer.encode("What is", add_special_tokens=False)
    results = server.engine.generate(
        [prompt] * 4, SamplingParams(max_tokens=30, temperature=1.0, seed=2, stop=["e"])
    )
    for r in results:
        assert "e" not in r.text
        assert r.finish_reason in ("stop", "length")


def test_parse_tool_calls_hermes() -> None:
    content, calls = parse_tool_calls(
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 + 2"}}\n</tool_call>'
    )
    assert content is None
    assert calls[0]["function"]["name"] == "calculator"
    assert json.loads(calls[0]["function"]["arguments"]) == {"expression": "1 + 2"}
    text = "I think <tool_call>{not json}</tool_call>"
    assert parse_tool_calls(text) == (text, [])
    content, calls = parse_tool_calls('Let me see.\n<tool_call>{"name": "a", "arguments": "{}"}</tool_call>')
    assert content == "Let me see." and calls[0]["function"]["arguments"] == "{}"


def test_visible_prefix_holds_back_a_partial_tool_tag() -> None:
    assert visible_prefix("The answer") == "The answer"
    assert visible_prefix("ok <tool_") == "ok "
    assert visible_prefix("ok <tool_call>{") == "ok "


def test_normalize_messages_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="empty"):
        normalize_messages([])
    with pytest.raises(ValueError, match="text"):
        normalize_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    out = normalize_messages(
        [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    )
    assert out == [{"role": "user", "content": "ab"}]
