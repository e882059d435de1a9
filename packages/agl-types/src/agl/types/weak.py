"""Weak back-references (an algorithm to its trainer, an agent to its runner) and their clear errors."""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["deref"]


def deref(ref: weakref.ReferenceType[Any] | None, *, unset: str, gone: str) -> Any:
    """The object ``ref`` points to; ``ValueError(unset)`` when there is no reference, ``ValueError(gone)`` when
    the object was garbage-collected."""
    if ref is None:
        raise ValueError(unset)
    value = ref()
    if value is None:
        raise ValueError(gone)
    return value
