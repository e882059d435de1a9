"""The OpenAI stand-in answers a real OpenAI client, over a real socket, with predictable token ids."""

from __future__ import annotations

import openai
import pytest
from agl.testing.openai_standin import StandinBackend, serve_standin, token_ids


@pytest.mark.parametrize("text", ["hello", "héllo wörld ✓", ""])
def test_the_default_answer_echoes_with_token_ids_and_logprobs(text: str) -> None:
    backend = StandinBackend()
    with serve_standin(backend) as server, openai.OpenAI(base_url=server.base_url, api_key="x") as client:
        response = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": text}],
            logprobs=True,
            extra_body={"return_token_ids": True},
        )
    choice = response.choices[0]
    answer = f"echo: {text}"
    assert choice.message.content == answer
    assert getattr(choice, "token_ids", None) == [ord(c) for c in answer] == token_ids(answer)
    assert choice.logprobs is not None and len(choice.logprobs.content or []) == len(answer)
    assert [r["messages"][-1]["content"] for r in backend.requests] == [text]


def test_a_failing_model_gets_a_400() -> None:
    with (
        serve_standin(StandinBackend(fail_model="bad")) as server,
        openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client,
    ):
        try:
            client.chat.completions.create(model="bad", messages=[{"role": "user", "content": "x"}])
        except openai.BadRequestError:
            return
    raise AssertionError("the stand-in answered a request for its failing model")
