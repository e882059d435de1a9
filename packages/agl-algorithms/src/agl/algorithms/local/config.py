"""The settings of :class:`~agl.algorithms.local.LocalGRPO` (defaults: the calculator recipe of
``apps/train_calc_x.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .lora import LoraSettings

if TYPE_CHECKING:
    from .grpo_core import Correction

__all__ = ["GRPOConfig"]


@dataclass
class GRPOConfig:
    """Settings of :class:`LocalGRPO` (defaults: the calculator recipe of ``apps/train_calc_x.py``)."""

    steps: int = 60
    prompts_per_step: int = 16
    n: int = 8
    lr: float = 3e-4
    weight_decay: float = 0.0
    clip_eps: float = 0.2
    max_grad_norm: float = 1.0
    epochs: int = 1
    mini_batches: int = 1
    temperature: float = 1.0
    max_tokens: int = 64
    val_temperature: float = 0.0
    val_every: int = 10
    """Evaluate on the validation set every this many steps (and always before and after); 0: only then.
    Each validation overlaps the following step (see the module docstring)."""
    success_threshold: float = 1.0
    """An episode counts as correct when its reward is at least this."""
    credit: str = "final"
    """Credit assignment over turns (:mod:`agl.algorithms.credit`): ``final`` (every turn gets the final
    reward, the reference's behaviour), ``per-turn`` (rewards emitted after each turn) or ``turn-discount``."""
    turn_discount: float = 0.9
    """gamma of ``credit="turn-discount"``."""
    tool_marker: str = "<tool_call>"
    """Text whose presence in a response counts as tool use (hermes format)."""
    seed: int = 0
    torch_threads: int | None = 1
    """``torch.set_num_threads`` (1 suits cores shared with runners); ``None`` leaves torch's default."""
    update_threads: int | None = None
    """torch threads of the update. ``None``: measured (one thread or every core, whichever is faster per
    token; see :class:`~agl.algorithms.local._threads.ThreadChoice`)."""
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    """Also save every this many steps (0: only at the end); needs ``checkpoint_dir``."""
    keep_last: int = 2
    """How many of the newest step checkpoints to keep (older ones are removed; ``final`` always stays)."""
    resume: bool = False
    """Continue from the newest checkpoint in ``checkpoint_dir`` (weights, optimizer, task sampler, step,
    metrics history; see :mod:`agl.algorithms.local.checkpoint`); starts afresh when there is none yet."""
    max_staleness: int = 0
    """Above 0: asynchronous training (:mod:`agl.algorithms.local.async_loop`) on samples from weights at
    most this many versions behind. 0: each step waits for its whole batch."""
    correction: Correction = "decoupled"
    """The off-policy correction of asynchronous training: ``decoupled`` (PPO), ``tis`` or ``none``."""
    is_cap: float = 2.0
    """The truncation of the importance weights of ``correction``."""
    rollout_timeout_s: float = 600.0
    served_model_name: str = "local-model"
    device: str = "cpu"
    max_batch_size: int = 512
    model_server: Literal["process", "thread"] = "process"
    """Where the model server runs: a process of its own (:class:`ModelServerProcess`: its decoding does
    not wait for the interpreter lock the runners, the LLM proxy and the store share), or threads of
    this process (:class:`ModelServer`)."""
    lora: LoraSettings | dict[str, Any] | int | None = None
    """LoRA via PEFT (:mod:`~agl.algorithms.local.lora`): a rank, a dict (``rank``, ``alpha``, ``targets``) or
    :class:`LoraSettings`; ``None`` or 0: full fine-tuning. The server gets merged weights; checkpoints the adapter."""
    extra: dict[str, Any] = field(default_factory=dict[str, Any])
