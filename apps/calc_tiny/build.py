"""Build the embedded calculator model from scratch: tokenizer, model, supervised warm start, save.

    uv run apps/calc_tiny/build.py            # ~25 minutes on one idle CPU core, deterministic
    uv run apps/calc_tiny/build.py --resume   # continue from runs/calc_tiny_build/ckpt.pt (saved every 500 steps)

The result (``apps/calc_tiny/model/``, ~5 MB) is a standard ``LlamaForCausalLM`` with a byte-level BPE
tokenizer and a hermes-style chat template with tools. The warm start is deliberately imperfect in one
way only: 22% of its training conversations call the ``calculator`` tool and copy its result, 78% answer
at once with a plausible but wrong number, so the model guesses most of the time (about 31% tool use and
32% right at temperature 1, never the tool greedily) and reinforcement learning has a behaviour to
discover (call the tool) that it can be seen learning in minutes on a CPU. What it does after deciding
to call the tool is taught well: each batch also has as many extra tool episodes whose decision token
carries no loss (they teach writing the call and copying the result without changing how often it
decides to call), so it copies a given tool result right 98.6% of the time greedily, 96% at temperature 1.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

from calc_tiny.chat import CHAT_TEMPLATE, SPECIAL_TOKENS, TOOL_TOKENS  # noqa: E402
from calc_x.tasks import CALCULATOR_TOOL, format_number, make_task  # noqa: E402

TOOL_FRACTION = 0.22
#: Extra tool episodes per batch whose decision token (the first generated one: ``<tool_call>`` or not) is
#: left out of the loss: they teach writing the call and copying its result without changing how often the
#: model decides to call the tool (that stays TOOL_FRACTION, so RL still has the tool to discover).
COPY_EXTRA_FRACTION = 1.0
VOCAB_TARGET = 1536
#: Tool episodes in the tokenizer's training corpus (as when the tokenizer was first built: another mix
#: would merge other pieces, and the committed model would no longer be what the build makes).
TOKENIZER_TOOL_FRACTION = 0.30
ANSWER = "The answer is {}."


def wrong_number(result: int, rng: random.Random) -> int:
    """A plausible but wrong answer: close to the true result, never equal to it."""
    while True:
        if abs(result) < 100 or rng.random() < 0.5:
            guess = result + rng.choice([-1, 1]) * rng.randint(1, 10)
        else:
            guess = round(result * (1 + rng.choice([-1, 1]) * rng.uniform(0.02, 0.15)))
        if guess != result:
            return guess


def make_conversation(
    rng: random.Random, tool: bool | None = None, tool_fraction: float = TOOL_FRACTION
) -> list[dict[str, Any]]:
    """One warm-start conversation in OpenAI message format (``tool``: force a tool episode or not;
    otherwise it is one with probability ``tool_fraction``)."""
    task = make_task(rng)
    messages: list[dict[str, Any]] = [{"role": "user", "content": task["question"]}]
    if tool is None:
        tool = rng.random() < tool_fraction
    if tool:
        call = {
            "id": "call_0",
            "type": "function",
            "function": {"name": "calculator", "arguments": json.dumps({"expression": task["expression"]})},
        }
        result = format_number(task["result"])
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": result},
            {"role": "assistant", "content": ANSWER.format(result)},
        ]
    else:
        messages.append(
            {"role": "assistant", "content": ANSWER.format(wrong_number(int(task["result"]), rng))}
        )
    return messages


def build_tokenizer(seed: int) -> Any:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    bootstrap = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    corpus: list[str] = []
    for _ in range(20000):
        convo = make_conversation(rng, tool_fraction=TOKENIZER_TOOL_FRACTION)
        corpus.append(
            bootstrap.apply_chat_template(
                convo, tools=[CALCULATOR_TOOL], chat_template=CHAT_TEMPLATE, tokenize=False
            )
        )
    corpus += [str(n) for n in range(1000)] * 3  # every 1-3 digit number becomes one token
    tok = Tokenizer(models.BPE())
    # Newlines and 1-3 digit numbers are pieces of their own; everything else may merge freely
    # (no GPT-2 word regex), so the fixed tool schema costs only a few tokens per prompt.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\d{1,3}|\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )


def encode_conversation(tokenizer: Any, messages: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """Token ids of a whole conversation and a 0/1 mask of the tokens the assistant generated
    (its turns including ``<|im_end|>``, excluding the template's trailing newline)."""
    ids: list[int] = []
    mask: list[int] = []
    done = ""
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(
            messages[:i], tools=[CALCULATOR_TOOL], tokenize=False, add_generation_prompt=True
        )
        turn = tokenizer.apply_chat_template(messages[: i + 1], tools=[CALCULATOR_TOOL], tokenize=False)
        context = tokenizer.encode(prompt[len(done) :], add_special_tokens=False)
        generated = tokenizer.encode(turn[len(prompt) : -1], add_special_tokens=False)  # drop the "\n"
        ids += context + generated
        mask += [0] * len(context) + [1] * len(generated)
        done = turn[:-1]
    return ids, mask


def build_model(vocab_size: int, tokenizer: Any, seed: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=512,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config)


def copy_example(tokenizer: Any, rng: random.Random) -> tuple[list[int], list[int]]:
    """A tool episode whose first generated token (the decision to call the tool) carries no loss."""
    ids, mask = encode_conversation(tokenizer, make_conversation(rng, tool=True))
    mask = list(mask)
    mask[mask.index(1)] = 0
    return ids, mask


def batch_tensors(examples: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[Any, Any, Any]:
    import torch

    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for row, (ids, mask) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        labels[row, : len(ids)] = torch.tensor([t if m else -100 for t, m in zip(ids, mask, strict=False)])
    return input_ids, attention, labels


def evaluate(model: Any, tokenizer: Any, n: int, seed: int, temperature: float) -> dict[str, float]:
    """Accuracy and tool-use rate on fresh questions, running the real two-turn tool protocol."""
    import torch
    from calc_x.tasks import evaluate as calc
    from calc_x.tasks import reward

    rng = random.Random(seed)
    tasks = [make_task(rng) for _ in range(n)]
    convos: list[list[dict[str, Any]]] = [[{"role": "user", "content": t["question"]}] for t in tasks]
    finished = [False] * n
    used_tool = [False] * n
    answers = [""] * n
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    for _turn in range(3):
        todo = [i for i in range(n) if not finished[i]]
        if not todo:
            break
        prompts = [
            tokenizer.apply_chat_template(
                convos[i], tools=[CALCULATOR_TOOL], tokenize=False, add_generation_prompt=True
            )
            for i in todo
        ]
        texts = _generate(model, tokenizer, prompts, temperature, gen)
        for i, text in zip(todo, texts, strict=False):
            if "<tool_call>" in text:
                used_tool[i] = True
                expression = ""
                try:
                    body = text.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0]
                    expression = str(json.loads(body)["arguments"]["expression"])
                    result = format_number(calc(expression))
                except (ValueError, KeyError, TypeError, IndexError):
                    result = "error"
                arguments = json.dumps({"expression": expression})
                call = {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": arguments},
                }
                convos[i] += [
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "content": result},
                ]
            else:
                answers[i] = text
                finished[i] = True
    model.train()
    correct = [reward(a, t["result"]) for a, t in zip(answers, tasks, strict=False)]
    tool_correct = sum(c for c, u in zip(correct, used_tool, strict=False) if u)
    return {
        "accuracy": sum(correct) / n,
        "tool_use": sum(used_tool) / n,
        "accuracy_with_tool": tool_correct / max(1, sum(used_tool)),
    }


def copy_rate(model: Any, tokenizer: Any, n: int, seed: int, temperature: float) -> float:
    """How often the model answers with the tool's result after a correct tool call (the call given)."""
    import torch
    from calc_x.tasks import reward

    rng = random.Random(seed)
    convos = [make_conversation(rng, tool=True) for _ in range(n)]
    prompts = [
        tokenizer.apply_chat_template(
            c[:3], tools=[CALCULATOR_TOOL], tokenize=False, add_generation_prompt=True
        )
        for c in convos
    ]
    model.eval()
    texts = _generate(model, tokenizer, prompts, temperature, torch.Generator().manual_seed(seed))
    model.train()
    return sum(reward(t, c[2]["content"]) for t, c in zip(texts, convos, strict=False)) / n


def _generate(model: Any, tokenizer: Any, prompts: list[str], temperature: float, gen: Any) -> list[str]:
    import torch

    tokenizer.padding_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    ids, attn = enc["input_ids"], enc["attention_mask"]
    past = None
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    out: list[list[int]] = [[] for _ in prompts]
    done = torch.zeros(len(prompts), dtype=torch.bool)
    step_ids, step_pos = ids, positions
    with torch.no_grad():
        for _ in range(40):
            res = model(
                input_ids=step_ids,
                attention_mask=attn,
                position_ids=step_pos,
                past_key_values=past,
                use_cache=True,
            )
            past = res.past_key_values
            logits = res.logits[:, -1, :].float()
            if temperature <= 0:
                nxt = logits.argmax(-1)
            else:
                nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=gen).squeeze(-1)
            for row in range(len(prompts)):
                if not done[row]:
                    out[row].append(int(nxt[row]))
            done |= nxt == tokenizer.eos_token_id
            if bool(done.all()):
                break
            step_ids = nxt.unsqueeze(-1)
            step_pos = step_pos[:, -1:] + 1
            attn = torch.cat([attn, torch.ones((len(prompts), 1), dtype=attn.dtype)], dim=1)
    return [tokenizer.decode(o, skip_special_tokens=True) for o in out]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=HERE / "model")
    parser.add_argument("--steps", type=int, default=1200, help="training steps")
    parser.add_argument(
        "--schedule-steps",
        type=int,
        default=2000,
        help="length of the cosine learning-rate schedule (truncated at --steps)",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--tool-fraction",
        type=float,
        default=TOOL_FRACTION,
        help="fraction of training conversations that call the tool (the rest guess)",
    )
    parser.add_argument(
        "--copy-extra",
        type=float,
        default=COPY_EXTRA_FRACTION,
        help="extra tool episodes per batch (a fraction of --batch-size) without loss on the decision token",
    )
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument(
        "--ckpt", type=Path, default=HERE.parent.parent / "runs" / "calc_tiny_build" / "ckpt.pt"
    )
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    t0 = time.time()
    tokenizer = build_tokenizer(args.seed)
    vocab_size = len(tokenizer)
    print(f"tokenizer: {vocab_size} tokens ({time.time() - t0:.0f}s)", flush=True)
    model = build_model(vocab_size, tokenizer, args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters", flush=True)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = 100

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, args.schedule_steps - warmup))
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))

    rng = random.Random(args.seed + 1)
    start = 0
    if args.resume and args.ckpt.exists():
        state = torch.load(args.ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        start = state["step"]
        print(f"resumed at step {start}", flush=True)

    model.train()
    t_train = time.time()
    running = 0.0
    for step in range(start, args.steps):
        examples = [
            encode_conversation(tokenizer, make_conversation(rng, tool_fraction=args.tool_fraction))
            for _ in range(args.batch_size)
        ]
        examples += [copy_example(tokenizer, rng) for _ in range(round(args.batch_size * args.copy_extra))]
        input_ids, attention, labels = batch_tensors(examples, tokenizer.pad_token_id)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        value = loss.item()
        running = 0.98 * running + 0.02 * value if step > start else value
        if (step + 1) % 50 == 0:
            rate = (step + 1 - start) / (time.time() - t_train)
            print(
                f"step {step + 1}/{args.steps} loss {running:.4f} lr {lr_at(step):.2e} ({rate:.2f} steps/s)",
                flush=True,
            )
        if (step + 1) % 500 == 0 or step + 1 == args.steps:
            args.ckpt.parent.mkdir(parents=True, exist_ok=True)
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": rng.getstate(),
                "torch_rng": torch.get_rng_state(),
                "step": step + 1,
            }
            torch.save(state, args.ckpt)
            metrics = evaluate(model, tokenizer, 200, seed=12345, temperature=1.0)
            copied = copy_rate(model, tokenizer, 200, seed=54321, temperature=1.0)
            print(
                f"  eval@T=1: accuracy {metrics['accuracy']:.1%} tool use {metrics['tool_use']:.1%} "
                f"right with the tool {metrics['accuracy_with_tool']:.1%}; copies a given result {copied:.1%}",
                flush=True,
            )

    greedy = evaluate(model, tokenizer, 500, seed=777, temperature=0.0)
    sampled = evaluate(model, tokenizer, 500, seed=777, temperature=1.0)
    for name, m in (("greedy", greedy), ("T=1   ", sampled)):
        print(
            f"final {name}: accuracy {m['accuracy']:.1%} tool use {m['tool_use']:.1%} "
            f"right with the tool {m['accuracy_with_tool']:.1%}",
            flush=True,
        )
    for temperature in (0.0, 1.0):
        copied = copy_rate(model, tokenizer, 500, seed=4242, temperature=temperature)
        print(f"final T={temperature:g}: copies a given tool result right {copied:.1%}", flush=True)
    save(model, tokenizer, args.out)
    print(f"saved to {args.out} in {time.time() - t0:.0f}s", flush=True)


def save(model: Any, tokenizer: Any, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.bos_token_id = None
    model.save_pretrained(out)
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(out)
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    # transformers 5 nests this under rope_parameters; other servers (vLLM, older transformers) read it here.
    config["rope_theta"] = config.get("rope_parameters", {}).get("rope_theta", 10000.0)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tok_config_path = out / "tokenizer_config.json"
    tok_config = json.loads(tok_config_path.read_text())
    tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    tok_config_path.write_text(json.dumps(tok_config, indent=2) + "\n")


if __name__ == "__main__":
    main()
