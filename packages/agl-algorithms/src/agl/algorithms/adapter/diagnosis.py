"""Why a finished rollout gives no training data, in words a user can act on.

"Empty triplets" is the most common puzzle of RL on agents: the rollout ran, yet nothing trains. The causes
are few, and the spans of the attempt tell them apart (checked in this order):

- the rollout failed (its error is in the store and on the dashboard);
- no LLM call was recorded at all: the agent made none;
- LLM calls were recorded by the agent's own client instrumentation but none by the LLM proxy: the agent
  called its model directly instead of through the ``llm`` resource's endpoint;
- the proxy recorded calls but without token ids: the backend does not return them;
- no reward was emitted (the last response cut at ``max_tokens`` is then named, as a likely cause).

:func:`diagnose` names the cause for one rollout; :class:`NoDataTally` counts them over a step or a run and
writes the line the algorithms log, e.g. ``12 of 128 rollouts gave no training data: 9 no reward emitted,
3 calls bypassed the LLM proxy``; :func:`mark_no_data` notes the cause and its fix in the rollout's metadata
(under :data:`NO_TRAINING_DATA`), where the dashboard's rollout page shows it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from agl.store import annotate_rollout
from agl.tracer import find_final_reward, get_reward_value
from agl.types import Rollout, Span

from ._llm_call import extract_llm_call
from .triplet import DEFAULT_LLM_CALL_MATCH, PROXY_CALL_NAMES

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["NO_TRAINING_DATA", "NoDataReason", "NoDataTally", "diagnose", "mark_no_data", "no_data_note"]

NO_TRAINING_DATA = "no_training_data"
"""The key of a rollout's metadata that says why it gave no training data: ``{"reason": ..., "fix": ...}``."""


class NoDataReason(str, Enum):
    """Why a finished rollout gives no training data. The value is the short text of the log line."""

    FAILED = "failed"
    NO_LLM_CALL = "made no LLM call"
    BYPASSED_PROXY = "calls bypassed the LLM proxy"
    NO_TOKEN_IDS = "calls without token ids"
    NO_REWARD = "no reward emitted"
    TRUNCATED_NO_REWARD = "no reward emitted after a response cut at max_tokens"

    @property
    def fix(self) -> str:
        """What to change so that such a rollout trains."""
        return _FIXES[self]


_FIXES = {
    NoDataReason.FAILED: "see the attempt's error in the store or on the dashboard's rollout page",
    NoDataReason.NO_LLM_CALL: "the agent must call its model (the `llm` resource) at least once per rollout",
    NoDataReason.BYPASSED_PROXY: (
        "create the agent's client from the `llm` resource (base_url=llm.endpoint, model=llm.model): calls "
        "made elsewhere are not recorded with token ids"
    ),
    NoDataReason.NO_TOKEN_IDS: (
        "serve the model with a backend that returns token ids (vLLM: return_token_ids; agl's local model "
        "server does)"
    ),
    NoDataReason.NO_REWARD: "emit one with agl.tracer.emit_reward(value), or return a float from the agent",
    NoDataReason.TRUNCATED_NO_REWARD: (
        "raise max_tokens in the sampling parameters, or reward a cut answer explicitly (emit_reward(0.0))"
    ),
}

_CLIENT_CALL = re.compile(DEFAULT_LLM_CALL_MATCH)


def diagnose(status: str, spans: Sequence[Span]) -> NoDataReason | None:
    """Why a rollout that ended with ``status`` and recorded ``spans`` gives no training data (``None``: it
    gives some: calls with token ids and a reward)."""
    if status != "succeeded":
        return NoDataReason.FAILED
    proxy_calls = [s for s in spans if s.name in PROXY_CALL_NAMES]
    if not proxy_calls:
        if any(_CLIENT_CALL.search(s.name) for s in spans):
            return NoDataReason.BYPASSED_PROXY
        return NoDataReason.NO_LLM_CALL
    calls = [extract_llm_call(s.attributes) for s in proxy_calls]
    if not any(c.prompt_token_ids and c.response_token_ids for c in calls):
        return NoDataReason.NO_TOKEN_IDS
    if find_final_reward(spans) is None and all(get_reward_value(s) is None for s in spans):
        truncated = _finish_reason(calls[-1].response) == "length"
        return NoDataReason.TRUNCATED_NO_REWARD if truncated else NoDataReason.NO_REWARD
    return None


def _finish_reason(response: dict[str, Any]) -> str | None:
    """The last finish reason of a call's response (``finish_reasons``, as the GenAI conventions write it)."""
    reasons = response.get("finish_reasons")
    if isinstance(reasons, list) and reasons:
        last: object = reasons[-1]  # pyright: ignore[reportUnknownVariableType]
        return last if isinstance(last, str) else None
    return None


class NoDataTally:
    """Counts the rollouts without training data by reason, over a step or a whole run."""

    def __init__(self) -> None:
        self.rollouts = 0
        self.reasons: Counter[NoDataReason] = Counter()

    def add(self, reason: NoDataReason | None) -> None:
        """Count one finished rollout and its reason (``None``: it gave training data)."""
        self.rollouts += 1
        if reason is not None:
            self.reasons[reason] += 1

    @property
    def without_data(self) -> int:
        return sum(self.reasons.values())

    def as_metrics(self) -> dict[str, int]:
        """``no_data`` and ``no_data_<reason>`` for every reason (zeros included: series stay continuous)."""
        figures = {"no_data": self.without_data}
        figures.update({f"no_data_{reason.name.lower()}": self.reasons[reason] for reason in NoDataReason})
        return figures

    def message(self, with_fixes: bool = False) -> str | None:
        """``"12 of 128 rollouts gave no training data: 9 no reward emitted, 3 ..."`` (``None``: all gave some)."""
        if not self.without_data:
            return None
        parts = [f"{count} {reason.value}" for reason, count in self.reasons.most_common()]
        text = f"{self.without_data} of {self.rollouts} rollouts gave no training data: {', '.join(parts)}"
        if with_fixes:
            text += "".join(f"\n  - {reason.value}: {reason.fix}" for reason, _ in self.reasons.most_common())
        return text


def no_data_note(reason: NoDataReason) -> dict[str, Any]:
    """The note :func:`mark_no_data` adds to a rollout's metadata: ``reason`` and its fix under
    :data:`NO_TRAINING_DATA`."""
    return {NO_TRAINING_DATA: {"reason": reason.value, "fix": reason.fix}}


async def mark_no_data(store: LightningStore, rollout: Rollout, reason: NoDataReason) -> None:
    """Note in the store why ``rollout`` gave no training data (its other metadata kept)."""
    await annotate_rollout(store, rollout.rollout_id, no_data_note(reason))
