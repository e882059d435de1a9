"""What new weights must be before the model server swaps them in: every tensor of the served model, by its
name and shape, and finite. A state dict that matches nothing (a PEFT ``base_model.model.`` or DDP
``module.`` one), a part of one, or one with NaN or infinite values is refused whole, naming what is wrong,
before anything is loaded.

Tied weights (``lm_head.weight`` sharing the input embeddings' storage) may be given under either name:
``save_pretrained`` writes only one of them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from agl.types.errors import InvalidRequestError

__all__ = ["WeightsMismatch", "check_weights", "refuse_non_regular_file"]

SHOWN = 3
"""How many names a refusal lists of each kind of problem (it counts them all)."""


class WeightsMismatch(InvalidRequestError):
    """New weights that do not fully and finitely match the served model; nothing was loaded."""


def refuse_non_regular_file(path: str) -> None:
    """Raise :class:`WeightsMismatch` unless ``path`` is a regular file (checked without opening it: opening a
    FIFO blocks until a writer comes, and safetensors opens holding the interpreter lock)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise WeightsMismatch(f"cannot read weights from {path!r}: {exc}") from exc
    if not stat.S_ISREG(mode):
        raise WeightsMismatch(f"cannot read weights from {path!r}: not a regular file")


def check_weights(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Raise :class:`WeightsMismatch` unless ``state_dict`` gives every tensor of ``model`` (one name of a
    tied group is enough), nothing else, in the model's shapes, with finite values only."""
    expected: dict[str, torch.Tensor] = model.state_dict(keep_vars=True)
    aliases: dict[int, list[str]] = {}
    for name, tensor in expected.items():
        aliases.setdefault(id(tensor), []).append(name)
    missing = [
        name
        for name, tensor in expected.items()
        if name not in state_dict and not any(alias in state_dict for alias in aliases[id(tensor)])
    ]
    unexpected = [name for name in state_dict if name not in expected]
    shapes = [
        f"{name} {tuple(tensor.shape)} (the model's: {tuple(expected[name].shape)})"
        for name, tensor in state_dict.items()
        if name in expected and tensor.shape != expected[name].shape
    ]
    non_finite = [name for name, tensor in state_dict.items() if not _finite(tensor)]
    problems = [
        _listed("missing", missing),
        _listed("unexpected", unexpected),
        _listed("with a shape mismatch", shapes),
        _listed("with non-finite values", non_finite),
    ]
    if any(problems):
        raise WeightsMismatch(
            "the weights do not fit the model (nothing was loaded): " + "; ".join(p for p in problems if p)
        )


def _finite(tensor: torch.Tensor) -> bool:
    if not (tensor.is_floating_point() or tensor.is_complex()):
        return True
    finite: Any = torch.isfinite(tensor).all()
    return bool(finite)


def _listed(what: str, names: Sequence[str]) -> str:
    if not names:
        return ""
    shown = ", ".join(names[:SHOWN])
    more = f", and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"{len(names)} tensor{'s' if len(names) != 1 else ''} {what}: {shown}{more}"
