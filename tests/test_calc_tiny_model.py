"""The embedded calculator model: a standard Llama checkpoint whose chat template tokenises turn by turn
exactly as it tokenises whole conversations (so token ids recorded per LLM call line up for training)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "apps" / "calc_tiny" / "model"

from calc_x.tasks import CALCULATOR_TOOL  # noqa: E402

pytestmark = pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="apps/calc_tiny/model not built")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(MODEL)


def test_config_is_a_standard_llama_that_servers_can_load(tokenizer: Any) -> None:
    config = json.loads((MODEL / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["vocab_size"] == len(tokenizer)  # exact, no padding rows
    assert config["head_dim"] == 64
    assert config["hidden_size"] // config["num_attention_heads"] == 64
    assert config["rope_theta"] == 10000.0
    assert config["tie_word_embeddings"] is True
    tok_config = json.loads((MODEL / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert sum(f.stat().st_size for f in MODEL.iterdir()) < 8 * 1024 * 1024


_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)
_number = st.integers(-9999, 99999).map(str)
_content = st.lists(
    st.one_of(_text, _number, st.sampled_from(["What is ", " + ", " * ", "\n", "The answer is "])), max_size=6
).map("".join)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(_content)}]
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            arguments = json.dumps({"expression": draw(_content)})
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "calculator", "arguments": arguments},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": "c", "content": draw(_content)})
        else:
            messages.append({"role": "assistant", "content": draw(_content)})
            messages.append({"role": "user", "content": draw(_content)})
    return messages


@settings(max_examples=150, deadline=None)
@given(conversations(), st.booleans())
def test_turn_by_turn_tokenisation_equals_whole_conversation(
    tokenizer: Any, messages: list[dict[str, Any]], tools: bool
) -> None:
    """Encoding the prompt of each assistant turn, then the turn itself, gives the same ids as encoding the
    conversation at once: what the server returned per call is a prefix of what the next call sees."""
    tool_list = [CALCULATOR_TOOL] if tools else None
    whole = tokenizer.apply_chat_template(messages, tools=tool_list, tokenize=False)
    pieces: list[int] = []
    done = ""
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(
            messages[:i], tools=tool_list, tokenize=False, add_generation_prompt=True
        )
        turn = tokenizer.apply_chat_template(messages[: i + 1], tools=tool_list, tokenize=False)
        assert prompt.startswith(done) and turn.startswith(prompt)
        pieces += tokenizer.encode(prompt[len(done) :], add_special_tokens=False)
        pieces += tokenizer.encode(turn[len(prompt) :], add_special_tokens=False)
        done = turn
    pieces += tokenizer.encode(whole[len(done) :], add_special_tokens=False)
    assert pieces == tokenizer.encode(whole, add_special_tokens=False)


def test_numbers_and_newlines_are_their_own_tokens(tokenizer: Any) -> None:
    ids = tokenizer.encode("What is 19 + 17?\n2356", add_special_tokens=False)
    pieces = [tokenizer.decode([i]) for i in ids]
    assert "19" in pieces and "17" in pieces and "\n" in pieces
    assert "235" in pieces and "6" in pieces  # 1-3 digit chunks
    for marker in ("<tool_call>", "</tool_call>", "<|im_end|>"):
        assert len(tokenizer.encode(marker, add_special_tokens=False)) == 1


def test_tool_call_rendering_round_trips_through_the_server_parser(tokenizer: Any) -> None:
    from agl.algorithms.local._chat import parse_tool_calls

    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "calculator", "arguments": json.dumps({"expression": "19 + 17"})},
    }
    messages = [
        {"role": "user", "content": "What is 19 + 17?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    prompt = tokenizer.apply_chat_template(
        messages[:1], tools=[CALCULATOR_TOOL], tokenize=False, add_generation_prompt=True
    )
    full = tokenizer.apply_chat_template(messages, tools=[CALCULATOR_TOOL], tokenize=False)
    generated = full[len(prompt) :].removesuffix("<|im_end|>\n")
    content, calls = parse_tool_calls(generated)
    assert content is None
    assert calls[0]["function"]["name"] == "calculator"
    assert json.loads(calls[0]["function"]["arguments"]) == {"expression": "19 + 17"}


@pytest.fixture(scope="module")
def model() -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)


def test_the_warm_start_copies_tool_results_but_mostly_guesses(model: Any, tokenizer: Any) -> None:
    """What apps/calc_tiny/build.py promises: given a correct tool call and its result, the model answers
    with the result nearly always (99.5% greedy, 97% at temperature 1 on these 200 questions); left to
    itself at temperature 1 it mostly answers without the tool (31.5% right, 28% tool use here; greedily
    it never calls the tool), so RL has the tool to discover. The bounds are the issue's (copies >= 95%,
    starting accuracy <= 35%), with room for other torch builds' rounding."""
    from calc_tiny.build import copy_rate, evaluate

    assert copy_rate(model, tokenizer, 200, seed=4242, temperature=0.0) >= 0.95
    assert copy_rate(model, tokenizer, 200, seed=4242, temperature=1.0) >= 0.95
    sampled = evaluate(model, tokenizer, 200, seed=777, temperature=1.0)
    assert sampled["accuracy"] <= 0.35
    assert sampled["tool_use"] <= 0.35
    assert sampled["accuracy_with_tool"] >= 0.9  # writing the call right, then copying
    greedy = evaluate(model, tokenizer, 200, seed=777, temperature=0.0)
    assert greedy["tool_use"] <= 0.05 and greedy["accuracy"] <= 0.10
