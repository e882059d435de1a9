"""Typed views of untyped values (decoded JSON, span attributes, third-party results).

``isinstance(value, list)`` on an ``Any`` leaves the item type unknown to a type checker; these helpers do the
check and say what the items are (``Any``), so callers stay typed without a ``cast`` at every use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

__all__ = ["as_dict", "as_int_list", "as_list", "as_mapping", "list_of_any"]


def as_list(value: Any) -> list[Any] | None:
    """``value`` as a new list when it is a list or tuple, else ``None``."""
    if isinstance(value, (list, tuple)):
        return list(cast("list[Any] | tuple[Any, ...]", value))
    return None


def as_dict(value: Any) -> dict[str, Any] | None:
    """``value`` itself when it is a dict (a decoded JSON object), else ``None``."""
    return cast("dict[str, Any]", value) if isinstance(value, dict) else None


def as_mapping(value: Any) -> Mapping[str, Any] | None:
    """``value`` itself when it is a mapping, else ``None``."""
    return cast("Mapping[str, Any]", value) if isinstance(value, Mapping) else None


def as_int_list(value: Any) -> list[int] | None:
    """``value`` as a new list of integers (bools excluded) when it is a list or tuple of them, else ``None``."""
    items = as_list(value)
    if items is not None and all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        return cast("list[int]", items)
    return None


def list_of_any(value: Any) -> list[Any] | None:
    """``value`` itself when it is a list (a decoded JSON array), else ``None`` (a tuple too)."""
    return cast("list[Any]", value) if isinstance(value, list) else None
