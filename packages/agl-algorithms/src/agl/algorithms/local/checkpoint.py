"""Checkpoints of a :class:`~agl.algorithms.local.LocalGRPO` run, written so that a killed run can resume.

A checkpoint is a folder ``step-<N>`` in the run's checkpoint folder: the policy and tokenizer
(``save_pretrained``), the optimizer's state and torch's random state (``optimizer.pt``), and
``state.json`` (the step, the task sampler's random state, the history of step and validation metrics).
It is written under a temporary name and renamed into place, then the file ``latest`` (itself replaced
atomically) names it: a kill at any moment, a save included, leaves the previous checkpoint whole and
named. Only the newest ``keep_last`` are kept.

Between two checkpoints the run notes the rollouts it enqueued for a step (``pending.json``): a resumed
run that redoes that step (the same tasks: the sampler's state is restored) takes their finished results
instead of rerunning them, and replaces only those that had not finished.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agl.types import EnqueueRolloutRequest

if TYPE_CHECKING:
    from agl.store import LightningStore

logger = logging.getLogger("agl.algorithms.local.grpo")  # (resume messages read as the run's)

__all__ = [
    "Checkpoint",
    "PendingStep",
    "latest_checkpoint",
    "read_pending",
    "restore_optimizer",
    "resume_point",
    "take_pending",
    "write_checkpoint",
    "write_pending",
]

_LATEST = "latest"
_PENDING = "pending.json"
_STATE = "state.json"
_OPTIMIZER = "optimizer.pt"


@dataclass
class Checkpoint:
    """What a run needs, beyond the weights, to continue after ``step``."""

    step: int
    sampler_state: Any
    """``random.Random.getstate()`` of the task sampler after ``step``."""
    history: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    validations: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    path: Path | None = None
    """The checkpoint's folder (a model directory: ``save_pretrained`` format)."""

    def sampler(self) -> random.Random:
        """A task sampler in the state it had after ``step``."""
        rng = random.Random()
        version, internal, gauss = self.sampler_state
        rng.setstate((version, tuple(internal), gauss))
        return rng


@dataclass
class PendingStep:
    """The rollouts enqueued for ``step`` (the step after the newest checkpoint)."""

    step: int
    rollout_ids: list[str]


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    with open(partial, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)


def write_checkpoint(
    root: Path,
    checkpoint: Checkpoint,
    save_model: Any,
    optimizer: Any,
    keep_last: int,
) -> Path:
    """Write ``checkpoint`` as ``root/step-<N>`` (``save_model(folder)`` writes the weights into it), name it
    in ``root/latest``, and remove all but the newest ``keep_last`` checkpoints."""
    import torch

    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{checkpoint.step}"
    partial = root / f".step-{checkpoint.step}.{uuid.uuid4().hex}"
    partial.mkdir()
    try:
        save_model(partial)
        torch.save(
            {"optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state()}, partial / _OPTIMIZER
        )
        state = {
            "step": checkpoint.step,
            "sampler_state": checkpoint.sampler_state,
            "history": checkpoint.history,
            "validations": checkpoint.validations,
        }
        _write_atomically(partial / _STATE, json.dumps(state))
        if final.exists():  # a step redone after a resume: the new one replaces it
            shutil.rmtree(final)
        os.replace(partial, final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    _write_atomically(root / _LATEST, final.name)
    _prune(root, keep_last, keep=final)
    return final


def _prune(root: Path, keep_last: int, keep: Path) -> None:
    """Keep ``keep`` and the newest checkpoints before it, ``keep_last`` in all; remove the rest, and those of
    later steps (left by a run that was resumed from an earlier checkpoint), and partial folders."""
    newest = int(keep.name[5:])
    steps = sorted(int(p.name[5:]) for p in root.glob("step-*") if p.is_dir() and p.name[5:].isdigit())
    kept = [s for s in steps if s <= newest][-max(keep_last, 1) :]
    for step in steps:
        if step not in kept:
            shutil.rmtree(root / f"step-{step}", ignore_errors=True)
    for stale in root.glob(".step-*"):  # the partial folders of saves that were killed
        shutil.rmtree(stale, ignore_errors=True)


def latest_checkpoint(root: Path) -> Checkpoint | None:
    """The newest whole checkpoint in ``root`` (``None``: there is none)."""
    named = root / _LATEST
    if not named.is_file():
        return None
    path = root / named.read_text().strip()
    state = json.loads((path / _STATE).read_text())
    return Checkpoint(
        step=int(state["step"]),
        sampler_state=state["sampler_state"],
        history=list(state["history"]),
        validations=list(state["validations"]),
        path=path,
    )


def resume_point(checkpoint_dir: str | None, steps: int) -> Checkpoint | None:
    """The checkpoint a resumed run of ``steps`` steps continues from (``None``: none yet, start afresh)."""
    if not checkpoint_dir:
        raise ValueError("resume=True needs the checkpoint_dir of the run to continue")
    resumed = latest_checkpoint(Path(checkpoint_dir))
    if resumed is None:
        logger.warning("resume: no checkpoint in %s yet; starting from step 1", checkpoint_dir)
        return None
    if resumed.step >= steps:
        raise ValueError(
            f"the checkpoint in {checkpoint_dir} is at step {resumed.step} of {steps}: nothing to resume"
        )
    logger.warning("resume: continuing after step %d from %s", resumed.step, resumed.path)
    return resumed


def restore_optimizer(checkpoint: Checkpoint, optimizer: Any) -> None:
    """Load the optimizer's state and torch's random state saved with ``checkpoint``."""
    import torch

    assert checkpoint.path is not None
    saved = torch.load(checkpoint.path / _OPTIMIZER, weights_only=True)
    optimizer.load_state_dict(saved["optimizer"])
    torch.set_rng_state(saved["torch_rng"])


def write_pending(root: Path, step: int, rollout_ids: Sequence[str]) -> None:
    """Note the rollouts enqueued for ``step``."""
    root.mkdir(parents=True, exist_ok=True)
    _write_atomically(root / _PENDING, json.dumps({"step": step, "rollout_ids": list(rollout_ids)}))


def read_pending(root: Path, step: int) -> PendingStep | None:
    """The rollouts noted for ``step``, if those are the ones noted."""
    path = root / _PENDING
    if not path.is_file():
        return None
    noted = json.loads(path.read_text())
    if noted.get("step") != step:
        return None
    return PendingStep(step=step, rollout_ids=[str(i) for i in noted["rollout_ids"]])


async def take_pending(
    store: LightningStore, root: Path, step: int, tasks: Sequence[Any], resources_id: str
) -> list[str] | None:
    """The rollouts for ``tasks`` noted for ``step`` before a kill: the finished ones as they are, the others
    cancelled and enqueued anew (with ``resources_id``); ``None`` when none were noted for these tasks."""
    pending = read_pending(root, step)
    if pending is None or len(pending.rollout_ids) != len(tasks):
        return None
    found = {r.rollout_id: r for r in await store.query_rollouts(rollout_id_in=pending.rollout_ids)}
    if any(
        found.get(i) is None or found[i].input != task
        for i, task in zip(pending.rollout_ids, tasks, strict=True)
    ):
        return None  # another store, or other tasks: nothing to take
    ids = list(pending.rollout_ids)
    redo = [n for n, i in enumerate(ids) if found[i].status not in ("succeeded", "failed")]
    for n in redo:  # their runners died with the run: nothing will finish them
        await store.update_rollout(ids[n], status="cancelled")
    requests = [EnqueueRolloutRequest(input=tasks[n], mode="train", resources_id=resources_id) for n in redo]
    for n, rollout in zip(redo, await store.enqueue_many_rollouts(requests), strict=True):
        ids[n] = rollout.rollout_id
    return ids
