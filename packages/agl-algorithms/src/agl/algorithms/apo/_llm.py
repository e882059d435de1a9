"""APO's calls to the critic and editor models: retries with backoff, and reasons when a call gives up."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agl.types import AglError

__all__ = ["LLMCallFailed", "LLMCallStats", "RetryPolicy", "chat_text"]

logger = logging.getLogger("agl.algorithms.apo")


class AllRolloutsFailed(AglError, RuntimeError):
    """No rollout of a whole batch succeeded before any ever did: the agent cannot work (a dead model endpoint,
    wrong credentials, a crashing agent), so the search stops instead of scoring every prompt 0."""


class LLMCallFailed(AglError):
    """A critique or edit call gave no usable text; ``reason`` says why (for the log and the history)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class RetryPolicy:
    """How often and how patiently a call is retried.

    Transient failures (rate limits, timeouts, connection errors, 5xx answers) are retried with
    exponential backoff and jitter; empty answers and refusals are retried at once (the models
    sample at ``diversity_temperature``, so another try may differ). Other errors are not retried.
    """

    max_attempts: int = 3
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def backoff(self, attempt: int, rng: random.Random) -> float:
        base = min(self.max_backoff_s, self.initial_backoff_s * (2 ** (attempt - 1)))
        return base * (0.5 + rng.random() / 2)


@dataclass
class LLMCallStats:
    """Counts of requests sent (retries included) and of calls that gave usable text."""

    requests: int = 0
    succeeded: int = 0
    failed: int = 0


def _classify(exc: BaseException) -> tuple[str, bool]:
    """(reason, retry?) for an exception from the ``openai`` client; re-raises configuration errors."""
    import openai

    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)):
        raise exc  # wrong key, no access or unknown model: every later call would fail the same way
    if isinstance(exc, openai.RateLimitError):
        return "rate limited (HTTP 429)", True
    if isinstance(exc, openai.APITimeoutError):
        return "timed out", True
    if isinstance(exc, openai.APIConnectionError):
        return f"connection error: {exc}", True
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}", exc.status_code >= 500 or exc.status_code == 408
    if isinstance(exc, (openai.APIError, ValueError, TypeError, KeyError, IndexError, AttributeError)):
        return f"malformed answer: {type(exc).__name__}: {exc}", False
    raise exc


async def chat_text(
    client: Any,
    *,
    model: str,
    messages: Sequence[dict[str, Any]],
    temperature: float,
    purpose: str,
    policy: RetryPolicy,
    stats: LLMCallStats,
    rng: random.Random,
) -> str:
    """The text of one chat completion, retried per ``policy``; :class:`LLMCallFailed` when none came."""
    reason = "no attempt made"
    attempt = 0
    for attempt in range(1, max(1, policy.max_attempts) + 1):
        stats.requests += 1
        try:
            response = await client.chat.completions.create(
                model=model, messages=list(messages), temperature=temperature
            )
            choice = response.choices[0]
            message = choice.message
        except Exception as exc:  # classified below: configuration errors re-raise, others retry or give up
            reason, retry = _classify(exc)
            if not retry or attempt >= policy.max_attempts:
                break
            delay = policy.backoff(attempt, rng)
            logger.info("%s call %s; retrying in %.2fs (attempt %d)", purpose, reason, delay, attempt + 1)
            await asyncio.sleep(delay)
            continue
        refusal = getattr(message, "refusal", None)
        text = message.content if isinstance(message.content, str) else None
        if refusal:
            reason = f"model refused: {refusal}"
        elif not text or not text.strip():
            reason = f"empty answer (finish_reason={getattr(choice, 'finish_reason', None)})"
        else:
            stats.succeeded += 1
            return text
        logger.info("%s call gave %s (attempt %d)", purpose, reason, attempt)
    stats.failed += 1
    raise LLMCallFailed(f"{purpose} call failed after {attempt} attempt(s): {reason}")
