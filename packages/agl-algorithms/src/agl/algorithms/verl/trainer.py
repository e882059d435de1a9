"""verl's V1 PPO trainers wired to the store and the LLM proxy: ``agl_sync`` and ``agl_colocate_async``.

:class:`AglPPOTrainerSync` is registered as ``trainer.v1.trainer_mode=agl_sync`` and runs as verl's ``sync``
mode; :class:`AglPPOTrainerColocateAsync`, registered as ``agl_colocate_async`` (what
``agentlightning.max_staleness`` > 0 selects, :func:`~agl.algorithms.verl.config.compose_config`), runs as
verl's ``colocate_async``: generation goes on across steps, and the replay buffer drops a group submitted
more than ``max_staleness + 1`` steps before the one that trains on it. verl compares ``trainer_mode`` with
those names literally (the replay buffer, the async-only checkpoint paths), so each sets its own back.

What both add to verl's trainer (:class:`AglTrainerMixin`):

- ``on_init_end``: after verl's first weight sync, point the LLM proxy at the inference servers
  (``llm_server_manager.get_addresses()``, served under the model's local path) and publish ``main_llm``
  (a ``ProxyLLM``) with the training sampling parameters;
- ``on_validate_begin`` / ``on_validate_end``: publish the validation, then again the training, resource;
- ``_compute_advantage``: with ``agentlightning.credit.mode`` other than ``final``, GRPO advantages from
  the per-token credited returns (:func:`credit_advantages`); ``final`` is verl's own computation.

In the asynchronous mode vLLM aborts the calls in flight when a step's batch is complete; the LLM proxy sends
such a call again, and vLLM holds it until generation resumes on the new weights
(:func:`agl.proxy._upstream.was_aborted`), so each recorded call was served whole by one version.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from verl.trainer.ppo.v1.trainer_base import PPOTrainer, register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from .._json import is_dict
from .bridge import TOKEN_RETURNS_KEY
from .config import ASYNC_TRAINER_MODE, SYNC_TRAINER_MODE
from .runtime import get_runtime, run_sync

__all__ = [
    "AglPPOTrainerColocateAsync",
    "AglPPOTrainerSync",
    "AglTrainerMixin",
    "conversion_metrics",
    "credit_advantages",
    "session_keys_to_groups",
]


logger = logging.getLogger(__name__)


def session_keys_to_groups(batch_keys: Sequence[str]) -> tuple[list[str], list[str], list[bool]]:
    """For verl's TQ keys ``{uid}_{session}_{index}``: each row's group (uid), session, and whether it is
    its session's final output."""
    uids: list[str] = []
    sessions: list[str] = []
    last_index: dict[str, int] = {}
    indices: list[int] = []
    for key in batch_keys:
        uid, session, index = key.rsplit("_", 2)
        uids.append(uid)
        sessions.append(f"{uid}_{session}")
        indices.append(int(index))
        last_index[f"{uid}_{session}"] = max(last_index.get(f"{uid}_{session}", -1), int(index))
    final = [indices[i] == last_index[s] for i, s in enumerate(sessions)]
    return uids, sessions, final


def credit_advantages(
    batch_keys: Sequence[str],
    final_scores: torch.Tensor,
    token_returns: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO advantages per token from credited returns (the formula of :mod:`agl.algorithms.credit`).

    ``final_scores`` (rows): each row's session final reward; the group statistics use one value per
    session (its final output's). ``token_returns`` / ``response_mask`` (rows x response length).
    Advantage = ``(return - mean) / (std + eps)`` on masked tokens; 0 for groups of equal rewards.
    """
    uids, _sessions, final = session_keys_to_groups(batch_keys)
    per_group: dict[str, list[float]] = {}
    for i, uid in enumerate(uids):
        if final[i]:
            per_group.setdefault(uid, []).append(float(final_scores[i]))
    advantages = torch.zeros_like(token_returns, dtype=torch.float32)
    for i, uid in enumerate(uids):
        values = torch.tensor(per_group[uid], dtype=torch.float32)
        mean = values.mean()
        std = values.std(unbiased=True) if len(values) > 1 else torch.tensor(0.0)
        if len(values) < 2 or float(values.max() - values.min()) < eps:
            continue  # no learning signal in this group (verl's GRPO gives 0 as well)
        scale = (std + eps) if norm_by_std else torch.tensor(1.0)
        advantages[i] = (token_returns[i].float() - mean) / scale
    return advantages * response_mask.float()


ROLLOUT_COUNTERS = (
    "rollouts",
    "triplets",
    "triplets_without_tokens",
    "dropped_prompt_too_long",
    "prefix_mismatches",
    "samples_without_logprobs",
)


def conversion_metrics(
    extra_fields: Sequence[Any], padding: Sequence[bool] | None = None
) -> dict[str, float]:
    """``agl/*`` metrics of one batch from its outputs' ``extra_fields``: samples, truncated responses, and the
    summed conversion counters of the rollouts (dropped prompts, prefix mismatches, triplets without ids).

    ``padding``: per row, whether verl added it to pad the batch (a copy of a real row, tag ``is_padding``):
    those rows are not counted."""
    metrics: dict[str, float] = {"agl/samples": 0, "agl/truncated_responses": 0}
    for row, fields in enumerate(extra_fields):
        if not is_dict(fields) or (padding is not None and row < len(padding) and padding[row]):
            continue
        metrics["agl/samples"] += 1
        metrics["agl/truncated_responses"] += int(fields.get("agl_truncated", 0))
        stats = fields.get("agl_rollout_stats")
        if is_dict(stats):
            for key in ROLLOUT_COUNTERS:
                metrics[f"agl/{key}"] = metrics.get(f"agl/{key}", 0) + int(stats.get(key, 0))
    return metrics


def probe_replica(base: str, model: str, prompt: str, *, chat: bool = False) -> dict[str, float]:
    """The greedy next-token top-5 logprobs of ``prompt`` from one inference server at ``base``
    (vLLM's ``/v1/completions``, or with ``chat`` the chat endpoint, which agl's model server has)."""
    import httpx

    url = base.rstrip("/")
    if not chat:
        body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": 5}
        answer: Any = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()
        return dict(answer["choices"][0]["logprobs"]["top_logprobs"][0])
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": 5,
    }
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()
    top: Any = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    return {str(t["token"]): float(t["logprob"]) for t in top}


class AglTrainerMixin(PPOTrainer):
    """What the agl trainers add to verl's (see the module docstring); first in their bases, so its hooks
    run, then verl's mode's own."""

    def _agl(self) -> Any:
        return self.config.get("agentlightning", {})

    def _agl_publisher(self) -> Any:
        runtime = get_runtime(self._agl())
        if runtime.publisher is None:
            raise RuntimeError("the agl runtime of this process has no BackendPublisher")
        publisher = runtime.publisher
        rollout = self.config.actor_rollout_ref.rollout
        agl = self._agl()
        max_tokens = agl.get("max_tokens") or self.config.data.max_response_length
        temperature = agl.get("temperature")
        val_temperature = agl.get("val_temperature")
        publisher.sampling = {
            "temperature": float(rollout.temperature if temperature is None else temperature),
            "max_tokens": int(max_tokens),
        }
        publisher.val_sampling = {
            "temperature": float(
                rollout.val_kwargs.temperature if val_temperature is None else val_temperature
            ),
            "max_tokens": int(max_tokens),
        }
        return publisher

    def served_model_name(self) -> str:
        """The name vLLM serves the model under in verl 0.9: the model's local path; with
        ``rollout.prometheus.enable`` and a ``served_model_name``, that name's last path component
        (``vllm_async_server.py``)."""
        rollout = self.config.actor_rollout_ref.rollout
        prometheus: Any = rollout.get("prometheus") or {}
        name = prometheus.get("served_model_name")
        if prometheus.get("enable") and name:
            return str(name).split("/")[-1]
        model = self.config.actor_rollout_ref.model
        return str(model.get("local_path") or model.path)

    def on_init_end(self) -> None:
        super().on_init_end()
        publisher = self._agl_publisher()
        addresses = list(self.llm_server_manager.get_addresses())
        run_sync(publisher.set_backends(addresses, self.served_model_name()))
        run_sync(publisher.publish(validation=False))
        self._agl_probe()

    def on_step_end(self) -> None:
        super().on_step_end()  # pushes the new weights to vLLM
        self._agl_probe()

    def _agl_probe(self) -> None:
        """With ``agentlightning.probe_file`` set (the GPU smoke): ask every vLLM replica for the greedy
        next-token logprobs of a fixed prompt and append them to that file, one JSON line per step, so a
        change after an update shows the new weights reached vLLM."""
        path = self._agl().get("probe_file")
        if not path:
            return
        import json

        replicas: list[Any] = []
        out = {"step": int(getattr(self, "global_steps", 0)), "replicas": replicas}
        prompt = str(self._agl().get("probe_prompt") or "What is 19 + 17?")
        chat = str(self.config.actor_rollout_ref.rollout.name) != "vllm"  # agl's model server: chat only
        for address in self.llm_server_manager.get_addresses():
            base = address if address.startswith("http") else f"http://{address}"
            try:
                replicas.append(probe_replica(base, self.served_model_name(), prompt, chat=chat))
            except Exception as exc:  # a diagnostic must not stop training
                replicas.append({"error": repr(exc)})
        with open(path, "a") as f:
            f.write(json.dumps(out) + "\n")

    def _compute_metrics(
        self, batch: Any, metrics: Any, timing_raw: Any, global_steps: Any, epoch: Any
    ) -> Any:
        result = super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)  # pyright: ignore[reportUnknownMemberType]  # verl leaves its parameters unannotated
        try:
            tq = _transfer_queue()
            data = tq.kv_batch_get(
                keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
            )
            padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
            metrics.update(conversion_metrics(list(data.pop("extra_fields").tolist()), padding))
        except Exception as exc:  # metrics must not stop training
            logger.warning("agl conversion metrics unavailable: %r", exc)
        return result

    def on_validate_begin(self) -> None:
        super().on_validate_begin()
        run_sync(self._agl_publisher().publish(validation=True))

    def on_validate_end(self) -> None:
        super().on_validate_end()
        run_sync(self._agl_publisher().publish(validation=False))

    def _compute_advantage(self, batch: Any, metrics: dict[str, Any]) -> Any:
        mode = str(self._agl().get("credit", {}).get("mode", "final"))
        if mode == "final":
            return super()._compute_advantage(batch, metrics)  # pyright: ignore[reportUnknownMemberType]  # verl leaves metrics' type open
        tq = _transfer_queue()
        tensor_dict = _tensordict_class()
        from verl.workers.utils.padding import response_to_nested

        if str(self.config.algorithm.adv_estimator) not in ("grpo", "AdvantageEstimator.GRPO"):
            raise ValueError(f"agentlightning.credit.mode={mode!r} needs algorithm.adv_estimator=grpo")
        if self.config.algorithm.use_kl_in_reward:
            raise ValueError(
                f"agentlightning.credit.mode={mode!r} does not support algorithm.use_kl_in_reward"
            )
        fields = ["response_mask", "rm_scores", TOKEN_RETURNS_KEY]
        data: Any = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = data["response_mask"]
        mask = data["response_mask"].to_padded_tensor(0)
        returns = data[TOKEN_RETURNS_KEY].to_padded_tensor(0.0)
        scores = data["rm_scores"].to_padded_tensor(0.0).sum(-1)
        advantages = credit_advantages(
            batch.keys,
            scores,
            returns,
            mask,
            norm_by_std=bool(self.config.algorithm.get("norm_adv_by_std_in_grpo", True)),
        )
        output = tensor_dict(
            {
                "advantages": response_to_nested(advantages, nested_mask),
                "returns": response_to_nested(advantages, nested_mask),
            },
            batch_size=len(batch),
        )
        metrics[f"agl/credit_{mode}/advantage_abs_mean"] = float(
            advantages.abs().sum() / mask.sum().clamp(min=1)
        )
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)


@register_trainer(SYNC_TRAINER_MODE)
class AglPPOTrainerSync(AglTrainerMixin, PPOTrainerSync):
    """verl's ``sync`` trainer with the agl hooks (see the module docstring)."""

    def _build_replay_buffer(self) -> Any:
        # verl picks its replay buffer and async-only paths by comparing trainer_mode with "sync"
        self.trainer_mode = "sync"
        return super()._build_replay_buffer()


@register_trainer(ASYNC_TRAINER_MODE)
class AglPPOTrainerColocateAsync(AglTrainerMixin, PPOTrainerColocateAsync):
    """verl's ``colocate_async`` trainer with the agl hooks (see the module docstring)."""

    def _build_replay_buffer(self) -> Any:
        self.trainer_mode = "colocate_async"  # as above: verl's names, compared literally
        return super()._build_replay_buffer()


def _transfer_queue() -> Any:
    """The ``transfer_queue`` module (verl's data plane), typed ``Any``: it ships no type information."""
    import transfer_queue  # pyright: ignore[reportMissingTypeStubs]  # ships no type information

    return transfer_queue


def _tensordict_class() -> Any:
    """``tensordict.TensorDict``, typed ``Any``: tensordict ships no type information."""
    from tensordict import TensorDict  # pyright: ignore[reportMissingTypeStubs]  # ships no type information

    return TensorDict
