"""Type guards for JSON-like data (span attributes, request bodies, chat messages) read at run time.

``isinstance(value, Mapping)`` on an ``Any`` tells the type checker nothing about keys and values; these say what
such data holds: JSON objects have string keys, and their values are anything JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

__all__ = ["is_dict", "is_list", "is_mapping", "is_sequence"]


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``value`` is a mapping (read as a JSON object)."""
    return isinstance(value, Mapping)


def is_dict(value: object) -> TypeGuard[dict[str, Any]]:
    """``value`` is a ``dict`` (read as a JSON object)."""
    return isinstance(value, dict)


def is_list(value: object) -> TypeGuard[list[Any]]:
    """``value`` is a ``list`` (read as a JSON array)."""
    return isinstance(value, list)


def is_sequence(value: object) -> TypeGuard[Sequence[Any]]:
    """``value`` is a sequence (a list, a tuple; note that a ``str`` is one too)."""
    return isinstance(value, Sequence)
