"""Span attribute helpers: flatten nested values into OpenTelemetry attributes and back, tags, links.

OpenTelemetry attributes are flat: a value is a primitive (str, bool, int, float) or a homogeneous list of
primitives. Emitters flatten nested dicts with dotted keys (``a.b.0.c``); readers unflatten them again.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from agl.types import LightningSpanAttributes, LinkPydanticModel, Span
from agl.types.narrow import as_dict, as_list

__all__ = [
    "check_attributes_sanity",
    "extract_links_from_attributes",
    "extract_tags_from_attributes",
    "filter_and_unflatten_attributes",
    "filter_attributes",
    "flatten_attributes",
    "format_exception_attributes",
    "full_qualified_name",
    "make_link_attributes",
    "make_tag_attributes",
    "query_linked_spans",
    "sanitize_attribute_value",
    "sanitize_attributes",
    "unflatten_attributes",
]

logger = logging.getLogger(__name__)

_PRIMITIVES = (str, bool, int, float)


def _is_primitive(value: Any) -> bool:
    return isinstance(value, _PRIMITIVES)


def _primitive_kind(value: object) -> type:
    # bool is a subclass of int: keep it apart so [1, True] counts as mixed.
    return bool if isinstance(value, bool) else type(value)


def _is_homogeneous_primitive_list(value: Sequence[Any]) -> bool:
    if not value or not all(_is_primitive(v) for v in value):
        return False
    kinds = {_primitive_kind(v) for v in value}
    return len(kinds) == 1


def flatten_attributes(nested: Any, *, expand_leaf_lists: bool = False) -> dict[str, Any]:
    """Flatten nested dicts and lists into dotted keys.

    Lists are indexed numerically (``key.0``, ``key.1``); a list made of one primitive type is kept as a
    leaf value unless ``expand_leaf_lists``. A list of mixed primitives is expanded (with a warning). A
    primitive at the root is returned under the key ``""``. Non-string dict keys raise ``ValueError``.
    """
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        items = as_list(value)
        if isinstance(value, Mapping):
            for key, item in cast("Mapping[object, Any]", value).items():  # keys checked: the caller's data
                if not isinstance(key, str):
                    raise ValueError(f"attribute keys must be strings, got {key!r} ({type(key).__name__})")
                walk(f"{prefix}.{key}" if prefix else key, item)
        elif items is not None:
            if not expand_leaf_lists and _is_homogeneous_primitive_list(items):
                out[prefix] = items
                return
            if items and all(_is_primitive(v) for v in items) and not expand_leaf_lists:
                logger.warning(
                    "attribute %r holds a list of mixed types; it is expanded into indexed keys", prefix
                )
            for index, item in enumerate(items):
                walk(f"{prefix}.{index}" if prefix else str(index), item)
        else:
            out[prefix] = value

    walk("", nested)
    return out


def unflatten_attributes(flat: Mapping[str, Any]) -> Any:
    """Inverse of :func:`flatten_attributes`.

    Numeric key segments become list indices only when the keys of that level are exactly ``0..n-1``.
    When a path is both a primitive and a parent of other keys, the nested value wins.
    """
    if not flat:
        return {}
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".") if key else [""]
        node = tree
        for part in parts[:-1]:
            child = as_dict(node.get(part))
            if child is None:
                child = {}
                node[part] = child
            node = child
        leaf = parts[-1]
        if isinstance(node.get(leaf), dict):
            continue  # nested wins over primitive
        node[leaf] = value

    def listify(node: Any) -> Any:
        branch = as_dict(node)
        if branch is None:
            return node
        converted = {k: listify(v) for k, v in branch.items()}
        keys = list(converted)
        if keys and all(k.isdigit() for k in keys) and sorted(int(k) for k in keys) == list(range(len(keys))):
            return [converted[str(i)] for i in range(len(keys))]
        return converted

    result = listify(tree)
    root = as_dict(result)
    if root is not None and list(root) == [""]:
        return root[""]
    return result


def filter_attributes(attributes: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Keys equal to ``prefix`` or starting with ``prefix + "."``."""
    dotted = prefix + "."
    return {k: v for k, v in attributes.items() if k == prefix or k.startswith(dotted)}


def filter_and_unflatten_attributes(attributes: Mapping[str, Any], prefix: str) -> Any:
    """The attributes under ``prefix``, with the prefix stripped, unflattened.

    Raises ``ValueError`` when a key equals the prefix itself (the value is not nested under it).
    """
    dotted = prefix + "."
    stripped: dict[str, Any] = {}
    for key, value in attributes.items():
        if key == prefix:
            raise ValueError(f"attribute {prefix!r} is a plain value; expected keys nested under {dotted!r}")
        if key.startswith(dotted):
            stripped[key[len(dotted) :]] = value
    return unflatten_attributes(stripped)


def sanitize_attribute_value(value: Any, *, force: bool = True) -> Any:
    """A value OpenTelemetry accepts.

    Primitives pass. Homogeneous lists are normalised: ints and bools mixed become ints, numbers mixed
    become floats. Anything else is JSON-encoded; when that fails, ``str(value)`` is used if ``force``,
    else ``ValueError`` is raised.
    """
    if _is_primitive(value):
        return value
    items = as_list(value)
    if items is not None:
        if not items:
            return items
        if _is_homogeneous_primitive_list(items):
            return items
        if all(isinstance(v, (int, float)) for v in items):  # bools are ints
            if all(isinstance(v, (int, bool)) for v in items):
                return [int(v) for v in items]
            return [float(v) for v in items]
    try:
        return json.dumps(value, default=str) if force else json.dumps(value)
    except (TypeError, ValueError) as exc:
        if force:
            return str(value)
        raise ValueError(
            f"value of type {type(value).__name__} cannot be stored as a span attribute"
        ) from exc


def sanitize_attributes(attributes: Mapping[str, Any], *, force: bool = True) -> dict[str, Any]:
    """:func:`sanitize_attribute_value` on every value; errors name the key."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        try:
            out[key] = sanitize_attribute_value(value, force=force)
        except ValueError as exc:
            raise ValueError(f"attribute {key!r}: {exc}") from exc
    return out


def check_attributes_sanity(attributes: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` unless every key is a string and every value a primitive or homogeneous list."""
    for key, value in attributes.items():
        if not isinstance(key, str):  # pyright: ignore[reportUnnecessaryIsInstance]  # untyped callers' data
            raise ValueError(f"attribute keys must be strings, got {key!r}")
        if _is_primitive(value):
            continue
        items = as_list(value)
        if items is not None and (not items or _is_homogeneous_primitive_list(items)):
            continue
        raise ValueError(
            f"attribute {key!r} has a value of type {type(value).__name__}; "
            "expected str, bool, int, float or a list of one of them"
        )


def make_tag_attributes(tags: Iterable[str]) -> dict[str, Any]:
    """Attributes that tag a span (``agentlightning.tag.<i>``)."""
    tag_list = list(tags)
    for tag in tag_list:
        if not isinstance(tag, str):  # pyright: ignore[reportUnnecessaryIsInstance]  # untyped callers' data
            raise ValueError(f"tags must be strings, got {tag!r}")
    return flatten_attributes({LightningSpanAttributes.TAG.value: tag_list}, expand_leaf_lists=True)


def extract_tags_from_attributes(attributes: Mapping[str, Any]) -> list[str]:
    """Tags written by :func:`make_tag_attributes` (also accepts a plain list value)."""
    prefix = LightningSpanAttributes.TAG.value
    value = attributes.get(prefix)
    listed = as_list(value)
    if listed is not None:
        return [str(v) for v in listed]
    if value is not None:
        return []
    tags = filter_and_unflatten_attributes(filter_attributes(attributes, prefix), prefix)
    return [str(t) for t in cast("list[Any]", tags)] if isinstance(tags, list) else []


def make_link_attributes(links: Mapping[str, str]) -> dict[str, Any]:
    """Attributes linking a span to the spans whose attribute ``key`` equals ``value``.

    ``trace_id`` and ``span_id`` are reserved keys matching the target span's own ids.
    """
    items: list[dict[str, str]] = []
    for key, value in links.items():
        if not isinstance(value, str):  # pyright: ignore[reportUnnecessaryIsInstance]  # untyped callers' data
            raise ValueError(f"link value for {key!r} must be a string, got {type(value).__name__}")
        items.append({"key_match": key, "value_match": value})
    return flatten_attributes({LightningSpanAttributes.LINK.value: items}, expand_leaf_lists=True)


def extract_links_from_attributes(attributes: Mapping[str, Any]) -> list[LinkPydanticModel]:
    """Links written by :func:`make_link_attributes`."""
    prefix = LightningSpanAttributes.LINK.value
    raw = filter_and_unflatten_attributes(filter_attributes(attributes, prefix), prefix)
    if not isinstance(raw, list):
        return []
    items = cast("list[Any]", raw)  # unflattened attribute values
    return [LinkPydanticModel.model_validate(link) for item in items if (link := as_dict(item)) is not None]


def _span_ids_and_attributes(span: Any) -> tuple[str, str, Mapping[str, Any]]:
    if isinstance(span, Span):
        return span.trace_id, span.span_id, span.attributes
    ctx = span.get_span_context()  # an OpenTelemetry ReadableSpan
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"), span.attributes or {}


def query_linked_spans(spans: Iterable[Any], links: Sequence[LinkPydanticModel]) -> list[Any]:
    """The spans matching every link (``Span`` or OpenTelemetry ``ReadableSpan``)."""
    matched: list[Any] = []
    for span in spans:
        trace_id, span_id, attributes = _span_ids_and_attributes(span)
        ok = True
        for link in links:
            if link.key_match == "trace_id":
                ok = trace_id == link.value_match
            elif link.key_match == "span_id":
                ok = span_id == link.value_match
            else:
                ok = link.key_match in attributes and str(attributes[link.key_match]) == link.value_match
            if not ok:
                break
        if ok:
            matched.append(span)
    return matched


def full_qualified_name(cls: type) -> str:
    """``module.QualName``; builtins are unqualified."""
    module = cls.__module__
    if module in (None, "builtins"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def format_exception_attributes(exception: BaseException) -> dict[str, Any]:
    """OpenTelemetry exception attributes: ``exception.type/message/escaped/stacktrace``."""
    attributes: dict[str, Any] = {
        "exception.type": type(exception).__name__,
        "exception.message": str(exception),
        "exception.escaped": True,
    }
    stacktrace = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    if stacktrace.strip():
        attributes["exception.stacktrace"] = stacktrace
    return attributes
