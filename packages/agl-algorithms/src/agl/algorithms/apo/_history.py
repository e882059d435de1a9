"""What APO remembers of a run: per-round summaries and counters, and candidates as JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._beam import PromptCandidate
from ._llm import LLMCallStats

__all__ = ["APORoundSummary", "RoundCounters", "templates_json"]


@dataclass
class APORoundSummary:
    """What one round did and cost. Round 0 is the initial validation of the seed."""

    round: int
    candidates: list[dict[str, Any]]
    """``{version, parent, edited, score}`` for every candidate scored on this round's validation batch."""
    beam: list[str]
    leader: str | None
    leader_val_score: float | None
    """The beam leader's mean reward on the whole validation set."""
    best_version: str
    best_score: float
    train_rollouts: int = 0
    val_rollouts: int = 0
    llm_requests: int = 0
    """Chat-completion requests sent to the critic and editor models, retries included."""
    llm_calls_ok: int = 0
    children_skipped: int = 0
    seconds: float = 0.0


@dataclass
class RoundCounters:
    train_rollouts: int = 0
    val_rollouts: int = 0
    skipped: int = 0
    succeeded_rollouts: int = 0
    stats: LLMCallStats = field(default_factory=LLMCallStats)


def templates_json(candidate: PromptCandidate) -> dict[str, dict[str, str]]:
    return {name: {"template": t.template, "engine": t.engine} for name, t in candidate.templates.items()}
