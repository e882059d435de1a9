"""APO's prompt editing: the critic's textual gradient and the editor's rewrite, both LLM calls, and a child prompt."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agl.types import PromptTemplate
from agl.types.extras import requires_extra

from ._beam import PromptCandidate, clean_edit, edit_problem, messages_using_template
from ._llm import LLMCallFailed, RetryPolicy, chat_text
from ._prompts import (
    EDIT_VARIANTS,
    GRADIENT_VARIANTS,
    RolloutResultForAPO,
    edit_context,
    gradient_context,
    render_poml,
)
from ._scoring import RolloutScoring

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["PromptEditing"]

logger = logging.getLogger("agl.algorithms.apo")


class PromptEditing(RolloutScoring):
    """APO's part that makes child prompts: run the parent, critique one template, let the editor rewrite it."""

    _client: AsyncOpenAI | None
    _owns_client: bool
    llm_timeout: float
    diversity_temperature: float
    retry_policy: RetryPolicy
    gradient_batch_size: int
    gradient_model: str
    apply_edit_model: str
    _llm_slots: asyncio.Semaphore | None
    _names: list[str]

    def _openai(self) -> Any:
        if self._client is None:
            with requires_extra("agl-algorithms", "APO"):
                from openai import AsyncOpenAI

            self._client = AsyncOpenAI()
            self._owns_client = True
        # Retries are ours (counted, logged, with reasons), so the client makes none of its own.
        return self._client.with_options(max_retries=0, timeout=self.llm_timeout)

    async def _chat(
        self, variant: str, context: dict[str, Any], model: str, purpose: str, rng: random.Random
    ) -> str:
        try:
            messages = await asyncio.to_thread(render_poml, variant, context)
        except (RuntimeError, OSError, TypeError, ValueError) as exc:
            raise LLMCallFailed(f"rendering {variant} failed: {exc}") from exc
        assert self._llm_slots is not None
        async with self._llm_slots:
            return await chat_text(
                self._openai(),
                model=model,
                messages=messages,
                temperature=self.diversity_temperature,
                purpose=f"{purpose} ({variant})",
                policy=self.retry_policy,
                stats=self._counters.stats,
                rng=rng,
            )

    async def compute_textual_gradient(
        self, template: PromptTemplate, results: Sequence[RolloutResultForAPO], rng: random.Random
    ) -> str:
        """The critic's critique of ``template`` given some rollout results; :class:`LLMCallFailed` if none."""
        if len(results) > self.gradient_batch_size:
            shown = rng.sample(list(results), self.gradient_batch_size)
        else:
            if len(results) < self.gradient_batch_size:
                logger.warning(
                    "only %d rollout result(s) for the critique (gradient_batch_size=%d)",
                    len(results),
                    self.gradient_batch_size,
                )
            shown = list(results)
        variant = rng.choice(GRADIENT_VARIANTS)
        return await self._chat(
            variant, gradient_context(template.template, shown), self.gradient_model, "critique", rng
        )

    async def apply_edit(self, template: PromptTemplate, critique: str, rng: random.Random) -> str:
        """The editor's rewrite of ``template`` following ``critique`` (fences stripped)."""
        variant = rng.choice(EDIT_VARIANTS)
        text = await self._chat(
            variant, edit_context(template.template, critique), self.apply_edit_model, "edit", rng
        )
        return clean_edit(text)

    def _results_for(
        self, template: PromptTemplate, results: Sequence[RolloutResultForAPO]
    ) -> list[RolloutResultForAPO]:
        """Results restricted to the LLM calls that used ``template`` (all calls when one template is optimised)."""
        if len(self._names) == 1:
            return list(results)
        narrowed = [
            RolloutResultForAPO(
                rollout_id=r.rollout_id,
                status=r.status,
                final_reward=r.final_reward,
                messages=messages_using_template(r.records, template),
                records=r.records,
            )
            for r in results
        ]
        if not any(r.messages for r in narrowed):
            logger.warning("no LLM call in the batch visibly used this template; the critic sees every call")
            return list(results)
        return narrowed

    async def _make_child(
        self, parent: PromptCandidate, name: str, batch: list[Any], round_no: int, rng: random.Random
    ) -> PromptCandidate | tuple[str, str | None]:
        """One child of ``parent`` (not yet versioned): run the parent on ``batch``, critique template
        ``name``, edit it. When the child is skipped: why, and the critique if there was one."""
        _, results = await self.evaluate_prompt_on_batch(parent, batch, "train")
        template = parent.templates[name]
        critique: str | None = None
        if not results:
            return "no training rollout finished within rollout_batch_timeout", None
        try:
            critique = await self.compute_textual_gradient(
                template, self._results_for(template, results), rng
            )
            new_text = await self.apply_edit(template, critique, rng)
        except LLMCallFailed as exc:
            return exc.reason, critique
        reason = edit_problem(template, new_text)
        if reason is not None:
            return reason, critique
        return PromptCandidate(
            version="",
            templates={**parent.templates, name: PromptTemplate(template=new_text, engine=template.engine)},
            parent=parent.version,
            edited=name,
            critique=critique,
            round=round_no,
        )
