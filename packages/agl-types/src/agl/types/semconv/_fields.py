"""The fields of an LLM call that a layout stores one to one, each as one span attribute: a table per layout
drives both writing them (:func:`write_fields`) and reading them back (:func:`read_fields`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ._attribute_reader import AttributeReader

__all__ = ["Field", "read_fields", "write_fields"]


@dataclass(frozen=True)
class Field:
    """One field stored as one span attribute."""

    name: str
    """The attribute of the record (:class:`~agl.types.semconv._llm_record.LLMCallFields`, :class:`LLMUsage`)."""
    key: str
    """The span attribute."""
    read: Callable[[AttributeReader, str], Any]
    """How the attribute is read back (e.g. :meth:`AttributeReader.text`)."""
    skip_empty: bool = False
    """Written only when truthy; otherwise whenever it is not ``None``."""
    encode: Callable[[Any], Any] | None = None
    """How the value is written (as itself when ``None``)."""


def write_fields(record: Any, fields: Iterable[Field], attrs: dict[str, Any]) -> None:
    """Add the attributes of ``record``'s ``fields`` to ``attrs``, leaving out those with no value."""
    for f in fields:
        value = getattr(record, f.name)
        if value if f.skip_empty else value is not None:
            attrs[f.key] = value if f.encode is None else f.encode(value)


def read_fields(r: AttributeReader, fields: Iterable[Field]) -> dict[str, Any]:
    """``{name: value}`` of ``fields`` as read from the span's attributes (keyword arguments of the record)."""
    return {f.name: f.read(r, f.key) for f in fields}
