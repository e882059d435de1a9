"""A tiny randomly initialised Llama (or Qwen2) model with a real BPE tokenizer and a hermes chat template, for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, cast

HERMES_TEMPLATE = (
    "{%- if tools -%}{{- '<|im_start|>system\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool['function'] | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools><|im_end|>\\n' -}}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') -}}"
    "{%- for call in (message['tool_calls'] or []) -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' + call['function']['arguments'] + '}\\n</tool_call>' -}}"
    "{%- endfor -%}{{- '<|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def build_tiny_model(
    directory: Path, seed: int = 0, architecture: Literal["llama", "qwen2"] = "llama"
) -> Path:
    """Save a ~50k-parameter LlamaForCausalLM and its tokenizer into ``directory``; returns it.

    ``architecture="qwen2"``: a Qwen2ForCausalLM of the same size instead (biased q/k/v projections, one
    key/value head), with the same tokenizer."""
    import torch
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\d{1,3}|\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    corpus = ["What is 12 + 30? The answer is 42.", "Hello there, how are you?"] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=cast("list[str]", pre_tokenizers.ByteLevel.alphabet()),  # pyright: ignore[reportUnknownMemberType]  # partially typed third-party API
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)  # pyright: ignore[reportUnknownMemberType]  # partially typed third-party API
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<tool_call>", "</tool_call>")])  # pyright: ignore[reportUnknownMemberType]  # partially typed third-party API
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=HERMES_TEMPLATE
    )
    torch.manual_seed(seed)  # pyright: ignore[reportUnknownMemberType]  # partially typed third-party API
    sizes: dict[str, Any] = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=cast("int", tokenizer.eos_token_id),  # an int: the tokenizer has that token
        pad_token_id=cast("int", tokenizer.pad_token_id),
    )
    if architecture == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(num_key_value_heads=1, **sizes))
    else:
        model = LlamaForCausalLM(LlamaConfig(num_key_value_heads=2, head_dim=16, **sizes))
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)  # pyright: ignore[reportUnknownMemberType]  # partially typed third-party API
    tokenizer.save_pretrained(directory)  # pyright: ignore[reportUnknownMemberType]  # partially typed third-party API
    return directory
