"""Reading LLM-call span attributes back: JSON payloads decoded within a depth limit, and typed access that
reports (strict) or skips (lenient) a malformed value. Shared by both attribute layouts."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, cast

from ..narrow import as_int_list, as_list

__all__ = ["MAX_JSON_DEPTH", "AttributeReader", "parse_json_text"]

logger = logging.getLogger(__name__)

MAX_JSON_DEPTH = 128
"""JSON payloads nested deeper than this are not decoded: deeper values break recursive consumers (pydantic
serialises at most about 250 levels, Python's ``json`` about 1000)."""


def parse_json_text(value: Any) -> Any:
    """``value`` decoded as JSON when it is a string that holds JSON; otherwise ``value`` unchanged.

    JSON nested deeper than :data:`MAX_JSON_DEPTH` counts as text (never a ``RecursionError``).
    """
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            return value
        return value if too_deep(decoded) else decoded
    return value


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests lists/dicts more than ``limit`` levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth >= limit:
                return True
            children: list[Any] | Any = (
                cast("dict[Any, Any]", item).values() if isinstance(item, dict) else cast("list[Any]", item)
            )
            stack.extend((child, depth + 1) for child in children)
    return False


def dumps(value: Any) -> str:
    """``value`` as compact JSON text (non-ASCII kept, unknown objects as ``str``)."""
    return json.dumps(value, ensure_ascii=False, default=str)


def text(content: Any) -> str:
    """``content`` itself when it is a string, else its JSON text."""
    return content if isinstance(content, str) else json.dumps(content, default=str)


def is_number(value: Any) -> bool:
    """An ``int`` or ``float`` (not a ``bool``)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def floats(value: Any) -> list[float] | None:
    """``value`` as a list of floats, or ``None`` when it is not a list of numbers."""
    items = as_list(value)
    if items is not None and all(is_number(x) for x in items):
        return [float(x) for x in items]
    return None


def indexed(flat: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """``{"0.role": r, "1.content": c}`` → ``[(0, {"role": r}), (1, {"content": c})]`` by index."""
    groups: dict[int, dict[str, Any]] = {}
    for key, value in flat.items():
        head, _, rest = key.partition(".")
        if head.isdigit() and rest:
            groups.setdefault(int(head), {})[rest] = value
    return sorted(groups.items())


class AttributeReader:
    """Typed access to one span's attributes; malformed values are reported (strict) or skipped."""

    def __init__(self, attributes: Mapping[str, Any], strict: bool) -> None:
        self.attributes = attributes
        self.strict = strict

    def problem(self, key: str, what: str) -> None:
        message = f"span attribute {key!r} {what}"
        if self.strict:
            raise ValueError(message)
        logger.warning("%s; ignoring it", message)

    def get(self, key: str, kind: type | tuple[type, ...], what: str) -> Any:
        value = self.attributes.get(key)
        if value is None:
            return None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.problem(key, f"must be {what}, got {type(value).__name__}")
            return None
        return value

    def text(self, key: str) -> str | None:
        return self.get(key, str, "a string")

    def integer(self, key: str) -> int | None:
        return self.get(key, int, "an integer")

    def number(self, key: str) -> float | None:
        value = self.get(key, (int, float), "a number")
        return None if value is None or isinstance(value, bool) else float(value)

    def flag(self, key: str) -> bool | None:
        return self.get(key, bool, "a boolean")

    def items(self, key: str, what: str) -> list[Any]:
        """The list or tuple at ``key`` as a list (empty when missing or malformed)."""
        return as_list(self.get(key, (list, tuple), what)) or []

    def ints(self, key: str) -> list[int] | None:
        value = self.attributes.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            value = self.json(key, list, "a JSON list of integers")
            if value is None:
                return None
        ids = as_int_list(value)
        if ids is None:
            self.problem(key, "must be a list of integers")
        return ids

    def json(self, key: str, kind: type | None = None, what: str = "") -> Any:
        raw = self.attributes.get(key)
        if raw is None:
            return None
        value = raw
        if isinstance(raw, str):
            try:
                value = json.loads(raw)
            except RecursionError:
                self.problem(key, "holds JSON nested too deeply to decode")
                return None
            except ValueError as exc:
                self.problem(key, f"is not valid JSON ({exc})")
                return None
            if too_deep(value):
                self.problem(key, f"holds JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)")
                return None
        if kind is not None and not isinstance(value, kind):
            self.problem(key, f"must be {what}, got {type(value).__name__}")
            return None
        return value

    def json_list(self, key: str, what: str) -> list[Any] | None:
        """The JSON list at ``key`` (``None`` when missing or malformed)."""
        return as_list(self.json(key, list, what))

    def under(self, prefix: str) -> dict[str, Any]:
        """``{rest: value}`` of the attributes ``<prefix>.<rest>``."""
        dotted = prefix + "."
        return {
            k[len(dotted) :]: v
            for k, v in self.attributes.items()
            if isinstance(k, str) and k.startswith(dotted)  # pyright: ignore[reportUnnecessaryIsInstance]  # span attributes from outside may hold non-string keys
        }
