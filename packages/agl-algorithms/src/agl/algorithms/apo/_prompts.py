"""APO's own prompts: POML files for the critique (textual gradient) and the edit, and their rendering."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agl.types.extras import requires_extra

from .._json import is_dict, is_list, is_mapping, is_sequence

__all__ = [
    "EDIT_VARIANTS",
    "GRADIENT_VARIANTS",
    "PROMPTS_DIR",
    "RolloutResultForAPO",
    "edit_context",
    "gradient_context",
    "message_text",
    "render_poml",
]

PROMPTS_DIR = Path(__file__).with_name("prompts")

GRADIENT_VARIANTS: tuple[str, ...] = (
    "critique_diagnose.poml",
    "critique_failures.poml",
    "critique_checklist.poml",
)
"""Critique prompts, one chosen at random per textual-gradient step."""

EDIT_VARIANTS: tuple[str, ...] = (
    "edit_rewrite.poml",
    "edit_minimal.poml",
    "edit_add_rules.poml",
)
"""Edit prompts, one chosen at random per edit."""

MAX_MESSAGE_CHARS = 4000
"""Longer message texts are cut in the middle so that one verbose run cannot crowd out the others."""


@dataclass
class RolloutResultForAPO:
    """What APO learned from one finished rollout."""

    rollout_id: str
    status: str
    final_reward: float | None
    messages: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    """OpenAI-style messages of the rollout's LLM calls (one conversation after another)."""
    records: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]], repr=False)
    """What the adapter made of the spans: one ``{"messages", "tools"}`` record per LLM call."""


def _shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} [... {len(text) - limit} characters cut ...] {text[-half:]}"


def message_text(message: Mapping[str, Any]) -> str:
    """A message as one line of readable text: its content, then any tool calls it makes."""
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif content is None:
        text = ""
    elif is_sequence(content) and all(is_mapping(p) and "type" in p for p in content):
        # OpenAI content parts: keep the text, name anything else (images, audio) by its type
        text = " ".join(
            str(p.get("text", "")) if p.get("type") == "text" else f"[{p.get('type')}]" for p in content
        )
    else:
        # structured content (e.g. a tool's JSON result that the adapter parsed): show it as JSON
        text = json.dumps(content, default=str)
    calls: list[str] = []
    for call in message.get("tool_calls") or ():
        if is_mapping(call):
            function: Any = call.get("function") or {}
            calls.append(f"calls {function.get('name')}({function.get('arguments')})")
    return _shorten(" ".join(part for part in [text.strip(), *calls] if part))


def _experiment(result: RolloutResultForAPO) -> dict[str, Any]:
    reward = "none" if result.final_reward is None else f"{result.final_reward:g}"
    return {
        "status": result.status,
        "reward": reward,
        "messages": [
            {"role": str(m.get("role", "?")), "text": message_text(m)}
            for m in result.messages
            if is_mapping(m)  # what an adapter gave: skip anything that is not a message
        ],
    }


def gradient_context(prompt_template: str, results: Sequence[RolloutResultForAPO]) -> dict[str, Any]:
    """Context of a critique prompt: the template text and the runs to learn from."""
    return {"prompt_template": prompt_template, "experiments": [_experiment(r) for r in results]}


def edit_context(prompt_template: str, critique: str) -> dict[str, Any]:
    """Context of an edit prompt: the template text and the critique to apply."""
    return {"prompt_template": prompt_template, "critique": critique}


def poml_module(feature: str) -> Any:
    """The ``poml`` module (the ``apo`` extra), imported on first use; ``feature`` names what needs it, for the
    :class:`~agl.types.extras.MissingExtraError` when it is not installed. Typed ``Any``: poml ships no types."""
    with requires_extra("agl-algorithms", feature):
        import poml  # pyright: ignore[reportMissingTypeStubs]  # poml ships no type information

    return poml


def render_poml(
    variant: str | Path, context: Mapping[str, Any], *, prompts_dir: Path = PROMPTS_DIR
) -> list[dict[str, Any]]:
    """Render one POML prompt file with ``context`` into OpenAI chat messages.

    ``variant`` is a file name in ``prompts_dir`` or a path. Blocking (POML renders in a Node.js
    subprocess): call it from a worker thread inside an event loop.
    """
    poml = poml_module("APO's POML prompts")
    path = Path(variant)
    if not path.is_absolute() and not path.exists():
        path = prompts_dir / path
    if not path.is_file():
        raise FileNotFoundError(f"POML prompt file not found: {path}")
    # JSON round trip: POML receives the context as a JSON file, so fail here, with a clear message.
    try:
        plain = json.loads(json.dumps(dict(context)))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"POML context for {path.name} must be JSON-serialisable: {exc}") from exc
    rendered: Any = poml.poml(path, context=plain, format="openai_chat")
    messages = rendered.get("messages") if is_dict(rendered) else None
    if not is_list(messages) or not messages:
        raise RuntimeError(f"POML rendered no messages from {path.name}")
    return messages
