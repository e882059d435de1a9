"""LoRA for :class:`~agl.algorithms.local.LocalGRPO` (``GRPOConfig.lora``), through PEFT.

The policy is the base model with a LoRA adapter (PEFT's ``get_peft_model``): the optimizer updates only
the adapter (the base weights do not require gradients, so they get none). The model server serves a
plain model: after each update it receives the *merged* weights (each adapted layer's ``W + scale·B·A``)
under the base model's own names, through the ordinary full-weights swap (its guard wants every tensor of
the served model, finite: merged weights are that). Merging costs one small matmul per adapted layer per
update, and generation runs at the base model's speed (no adapter in the decode path).

Checkpoints hold the adapter alone (``PeftModel.save_pretrained``: ``adapter_config.json``, whose
``base_model_name_or_path`` names the base model, and ``adapter_model.safetensors``) plus the tokenizer.
:func:`load_policy` loads such a folder back onto its base model; :func:`served_model_path` gives the
base model for the model server to start from (a resumed run then swaps the merged weights in).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ADAPTER_CONFIG",
    "LoraSettings",
    "is_adapter_dir",
    "load_policy",
    "lora_settings",
    "merged_state_dict",
    "serve_resumed_adapter",
    "served_copy",
    "served_model_path",
]

ADAPTER_CONFIG = "adapter_config.json"
_ADAPTER_NAME = "default"


@dataclass
class LoraSettings:
    """The adapter of ``GRPOConfig.lora``: rank ``r``, ``alpha`` (scale ``alpha / r``), the adapted modules."""

    r: int = 8
    alpha: float = 16.0
    target_modules: Sequence[str] | str = "all-linear"
    """Module names (``["q_proj", "v_proj"]``) or ``"all-linear"`` (every linear layer but the output head)."""
    dropout: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict[str, Any])
    """Further ``peft.LoraConfig`` fields."""


def lora_settings(value: LoraSettings | dict[str, Any] | int | None) -> LoraSettings | None:
    """``GRPOConfig.lora`` as :class:`LoraSettings` (``None``, ``0``, or a rank of 0: no LoRA). A dict may
    use ``rank`` for ``r`` and ``targets`` for ``target_modules``; an int is the rank."""
    if value is None or isinstance(value, LoraSettings):
        return value if value is None or value.r > 0 else None
    if isinstance(value, int):
        return LoraSettings(r=value) if value > 0 else None
    given = dict(value)
    if "rank" in given:
        given["r"] = given.pop("rank")
    if "targets" in given:
        given["target_modules"] = given.pop("targets")
    settings = LoraSettings(**given)
    return settings if settings.r > 0 else None


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding a PEFT adapter (a LoRA checkpoint)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def served_model_path(path: str | Path) -> str:
    """The model a server starts from for ``path``: the base model of an adapter folder, else ``path``."""
    if not is_adapter_dir(path):
        return str(path)
    base = json.loads((Path(path) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"the adapter in {path} does not name its base model (base_model_name_or_path)")
    return str(base)


def _peft() -> Any:
    """``peft``, typed ``Any`` (partly annotated), imported only when LoRA is used."""
    from agl.types.extras import requires_extra

    with requires_extra("agl-algorithms", "LoRA (GRPOConfig.lora)"):
        import peft

    return peft


def load_policy(path: str | Path, settings: Any, *, device: str = "cpu") -> tuple[Any, Any]:
    """The policy and tokenizer for ``path``: for an adapter folder (a LoRA checkpoint), its base model with
    that adapter, trainable (the checkpoint's rank and modules win over ``settings``); else the model, with a
    fresh adapter when ``settings`` asks for LoRA."""
    from .server import _from_pretrained, load_model  # pyright: ignore[reportPrivateUsage]

    if is_adapter_dir(path):
        from transformers import AutoTokenizer

        model, _ = load_model(served_model_path(path), device=device)
        tokenizer = _from_pretrained(AutoTokenizer, str(path))  # the checkpoint's own copy
        policy = _peft().PeftModel.from_pretrained(model, str(path), is_trainable=True)
        return policy.to(device), tokenizer
    lora = lora_settings(settings)
    if lora is None:
        return load_model(path, device=device)
    local = Path(path)  # (an absolute path: the adapter's config names it as its base model)
    model, tokenizer = load_model(local.resolve() if local.is_dir() else path, device=device)
    targets = lora.target_modules
    config = _peft().LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        target_modules=targets if isinstance(targets, str) else list(targets),
        lora_dropout=lora.dropout,
        bias="none",
        task_type="CAUSAL_LM",
        **lora.extra,
    )
    return _peft().get_peft_model(model, config), tokenizer


def _is_peft(policy: Any) -> bool:
    return hasattr(policy, "peft_config") and hasattr(policy, "get_base_model")


def merged_state_dict(policy: Any) -> dict[str, Any]:
    """The weights to serve: ``policy.state_dict()``; for a PEFT model, the base model's tensors under its
    own names with each adapted layer's ``scale·B·A`` added (the training model is left as it is)."""
    if not _is_peft(policy):
        return policy.state_dict()
    import torch
    from peft.tuners.lora import LoraLayer

    base = policy.get_base_model()
    merged: dict[str, Any] = {}
    for name, tensor in base.state_dict().items():
        if ".lora_" not in name:
            merged[name.replace(".base_layer.", ".")] = tensor.detach()
    with torch.no_grad():
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer) and _ADAPTER_NAME in module.lora_A:
                key = f"{name}.weight"
                layer: Any = module  # (PEFT's layers are partly annotated)
                delta: Any = layer.get_delta_weight(_ADAPTER_NAME)
                merged[key] = merged[key] + delta.to(merged[key].dtype)
    return merged


def served_copy(policy: Any) -> Any:
    """A plain copy of the policy to serve in this process (``model_server="thread"``): the policy itself
    copied, or, for a PEFT model, a copy with the adapter merged in and removed."""
    if not _is_peft(policy):
        return copy.deepcopy(policy)
    return copy.deepcopy(policy).merge_and_unload()


def serve_resumed_adapter(server: Any, policy: Any, model_path: str | Path) -> None:
    """After a resume from a LoRA checkpoint (``model_path`` an adapter folder), swap the merged weights into
    the model server, which started from the base model; otherwise nothing."""
    if is_adapter_dir(model_path):
        server.update_weights(merged_state_dict(policy))
