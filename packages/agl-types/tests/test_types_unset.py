"""``UNSET`` is one object, whatever happens to it."""

from __future__ import annotations

import copy
import pickle

import pytest
from agl.types import UNSET, Unset, is_set
from pydantic import BaseModel


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickling_keeps_the_singleton(protocol: int) -> None:
    assert pickle.loads(pickle.dumps(UNSET, protocol=protocol)) is UNSET
    assert pickle.loads(pickle.dumps({"x": [UNSET]}, protocol=protocol))["x"][0] is UNSET


def test_copies_and_construction_keep_the_singleton() -> None:
    assert copy.copy(UNSET) is UNSET
    assert copy.deepcopy({"v": UNSET})["v"] is UNSET
    assert Unset() is UNSET


def test_behaviour() -> None:
    assert repr(UNSET) == "UNSET"
    assert not UNSET
    assert not is_set(UNSET)
    assert is_set(None) and is_set(0) and is_set("")


def test_usable_as_a_pydantic_default() -> None:
    class Patch(BaseModel):
        value: int | Unset | None = UNSET

    assert Patch().value is UNSET
    assert Patch(value=None).value is None
    assert Patch(value=3).value == 3
