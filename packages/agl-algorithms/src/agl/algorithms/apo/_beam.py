"""Pure pieces of APO's beam search: batching, candidates, parent choice, edit checks, call matching."""

from __future__ import annotations

import logging
import random
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agl.types import PromptTemplate

from .._json import is_mapping, is_sequence

__all__ = [
    "PromptCandidate",
    "clean_edit",
    "conversations",
    "edit_problem",
    "fstring_fields",
    "messages_using_template",
    "select_parents",
    "template_signature",
    "top_candidates",
]

logger = logging.getLogger("agl.algorithms.apo")


@dataclass
class PromptCandidate:
    """One point of the search: a version of every optimised prompt template.

    ``templates`` maps resource names to templates; only the optimised ones are kept here (the
    other initial resources are published unchanged with every candidate).
    """

    version: str
    templates: dict[str, PromptTemplate]
    parent: str | None = None
    """Version this one was edited from (``None`` for the seed)."""
    edited: str | None = None
    """Resource name of the template the edit changed."""
    critique: str | None = None
    """The textual gradient that produced this candidate."""
    round: int = 0
    score: float | None = None
    """Mean reward on the latest validation batch it was scored on."""
    full_val_score: float | None = None
    """Mean reward on the whole validation set, when it has been measured."""
    extra: dict[str, Any] = field(default_factory=dict[str, Any])

    @property
    def prompt_template(self) -> PromptTemplate:
        """The first optimised template (the only one in the single-template case)."""
        return next(iter(self.templates.values()))


def select_parents(
    beam: Sequence[PromptCandidate], beam_width: int, rng: random.Random
) -> list[PromptCandidate]:
    """``beam_width`` parents: the beam repeated cyclically when it is short, else a random sample."""
    if not beam:
        raise ValueError("No beam candidates any more")
    if len(beam) < beam_width:
        logger.warning(
            "beam holds %d prompt(s), fewer than beam_width=%d: replicating parents", len(beam), beam_width
        )
        return [beam[i % len(beam)] for i in range(beam_width)]
    return rng.sample(list(beam), beam_width)


def top_candidates(candidates: Sequence[PromptCandidate], beam_width: int) -> list[PromptCandidate]:
    """The ``beam_width`` best by score (unscored count as lowest); ties keep the earlier candidate."""
    if not candidates:
        raise ValueError("No beam candidates any more")
    ranked = sorted(candidates, key=lambda c: -(c.score if c.score is not None else float("-inf")))
    return ranked[:beam_width]


def fstring_fields(template: str) -> set[str]:
    """Top-level field names of a ``str.format`` template; ``ValueError`` when it does not parse."""
    names: set[str] = set()
    for _, field_name, format_spec, _ in string.Formatter().parse(template):
        if field_name is None:
            continue
        root = re.split(r"[.\[]", field_name, maxsplit=1)[0]
        names.add(root)
        if format_spec:
            names |= fstring_fields(format_spec)
    return names


_FENCE = re.compile(r"^\s*```[\w-]*\s*\n(?P<body>.*?)\n\s*```\s*$", re.DOTALL)


def clean_edit(text: str) -> str:
    """The edited template without surrounding whitespace or one wrapping code fence."""
    text = text.strip()
    match = _FENCE.match(text)
    if match:
        text = match.group("body").strip()
    return text


_ENGINE_TAGS = {
    "f-string": re.compile(r"\{[^{}]*\}"),
    "jinja": re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL),
    "poml": re.compile(r"\{\{.*?\}\}|<[^>]+>", re.DOTALL),
}


def template_signature(template: PromptTemplate, min_chars: int = 12) -> list[str]:
    """Literal pieces of a template (text outside its placeholders), used to spot calls that used it."""
    pattern = _ENGINE_TAGS.get(template.engine, _ENGINE_TAGS["f-string"])
    pieces = [" ".join(piece.split()) for piece in pattern.split(template.template)]
    long_pieces = [piece for piece in pieces if len(piece) >= min_chars]
    if long_pieces:
        return long_pieces
    return [piece for piece in pieces if piece]


def _messages_text(messages: Sequence[Mapping[str, Any]]) -> str:
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif is_sequence(content):
            parts.extend(str(p.get("text", "")) for p in content if is_mapping(p))
    return " ".join(" ".join(parts).split())


def conversations(records: Sequence[object]) -> list[list[dict[str, Any]]]:
    """Message lists of a rollout's LLM calls, without calls that a later call of the same conversation extends.

    ``records`` are what the adapter made of the spans (``{"messages", "tools"}`` mappings; anything else is
    skipped)."""
    lists: list[list[dict[str, Any]]] = [list(r.get("messages") or ()) for r in records if is_mapping(r)]
    kept: list[list[dict[str, Any]]] = []
    for i, messages in enumerate(lists):
        if not messages:
            continue
        extended = any(
            len(later) > len(messages) and later[: len(messages)] == messages for later in lists[i + 1 :]
        )
        if not extended:
            kept.append(messages)
    return kept


def messages_using_template(
    records: Sequence[Mapping[str, Any]], template: PromptTemplate
) -> list[dict[str, Any]]:
    """Messages of the conversations whose text contains every literal piece of ``template``."""
    signature = template_signature(template)
    matched: list[dict[str, Any]] = []
    for messages in conversations(records):
        text = _messages_text(messages)
        if all(piece in text for piece in signature):
            matched.extend(messages)
    return matched


def edit_problem(old: PromptTemplate, new_text: str) -> str | None:
    """Why an edited template is unusable, or ``None`` when it is fine."""
    if not new_text:
        return "the editor returned an empty template"
    if new_text == old.template.strip():
        return "the edit changed nothing"
    if old.engine == "f-string":
        try:
            new_fields = fstring_fields(new_text)
        except ValueError as exc:
            return f"the edited template does not parse as an f-string template ({exc})"
        old_fields = fstring_fields(old.template)
        unknown = sorted(new_fields - old_fields)
        if unknown:
            return f"the edit introduced placeholders the agent does not fill: {', '.join(unknown)}"
    return None
