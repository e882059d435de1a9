"""Attribute helpers: flatten/unflatten, sanitising, tags and links."""

from __future__ import annotations

from typing import Any

import pytest
from agl.tracer import attributes
from agl.types import Span
from hypothesis import given
from hypothesis import strategies as st

keys = st.text(alphabet="abcxyz_", min_size=1, max_size=4)
leaves = st.one_of(
    st.text(max_size=5),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.lists(st.integers(), min_size=1, max_size=3),
)
nested = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.dictionaries(keys, children, min_size=1, max_size=3),
        st.lists(st.dictionaries(keys, children, min_size=1, max_size=2), min_size=1, max_size=3),
    ),
    max_leaves=10,
)


@given(st.dictionaries(keys, nested, min_size=1, max_size=3))
def test_unflatten_inverts_flatten(value: dict[str, Any]) -> None:
    assert attributes.unflatten_attributes(attributes.flatten_attributes(value)) == value


def test_flatten_rules() -> None:
    assert attributes.flatten_attributes({"a": [1, 2]}) == {"a": [1, 2]}
    assert attributes.flatten_attributes({"a": [1, 2]}, expand_leaf_lists=True) == {"a.0": 1, "a.1": 2}
    assert attributes.flatten_attributes({"a": [1, "x"]}) == {"a.0": 1, "a.1": "x"}
    with pytest.raises(ValueError, match="strings"):
        attributes.flatten_attributes({1: "x"})
    assert attributes.unflatten_attributes({"a.0": 1, "a.2": 2}) == {"a": {"0": 1, "2": 2}}
    with pytest.raises(ValueError):
        attributes.filter_and_unflatten_attributes({"p": 1, "p.x": 2}, "p")


def test_sanitize_coerces_lists_and_encodes_the_rest() -> None:
    assert attributes.sanitize_attributes({"a": [1, True], "b": [1, 2.5], "c": {"k": 1}}) == {
        "a": [1, 1],
        "b": [1.0, 2.5],
        "c": '{"k": 1}',
    }
    with pytest.raises(ValueError, match="'x'"):
        attributes.sanitize_attributes({"x": object()}, force=False)


def test_tags_and_links_round_trip_and_select_spans() -> None:
    assert attributes.extract_tags_from_attributes(attributes.make_tag_attributes(["a", "b"])) == ["a", "b"]
    target = Span.from_attributes(attributes={"gen_ai.response.id": "r1"})
    other = Span.from_attributes(attributes={"gen_ai.response.id": "r2"})
    links = attributes.extract_links_from_attributes(
        attributes.make_link_attributes({"gen_ai.response.id": "r1"})
    )
    assert attributes.query_linked_spans([target, other], links) == [target]
    by_id = attributes.extract_links_from_attributes(
        attributes.make_link_attributes({"span_id": other.span_id})
    )
    assert attributes.query_linked_spans([target, other], by_id) == [other]
    with pytest.raises(ValueError):
        attributes.make_link_attributes({"k": 1})  # pyright: ignore[reportArgumentType]
