"""Where the data model lives: one module per concept, every public name importable from ``agl.types``, and
the old ``agl.types.core`` path still working."""

from __future__ import annotations

import importlib

import agl.types
import agl.types.core
import agl.types.semconv
import pytest


def test_every_public_name_resolves() -> None:
    for package in (agl.types, agl.types.semconv):
        missing = [name for name in package.__all__ if not hasattr(package, name)]
        assert missing == [], f"{package.__name__} lists names it does not have: {missing}"


def test_the_core_path_re_exports_the_same_objects() -> None:
    for name in agl.types.core.__all__:
        assert getattr(agl.types.core, name) is getattr(agl.types, name), name
    # everything core offered before the split is still there
    for name in ("Rollout", "Attempt", "AttemptedRollout", "RolloutConfig", "Triplet", "Worker", "Dataset"):
        assert name in agl.types.core.__all__


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("Triplet", "agl.types.triplets"),
        ("Rollout", "agl.types.rollouts"),
        ("Attempt", "agl.types.rollouts"),
        ("RolloutConfig", "agl.types.rollouts"),
        ("Worker", "agl.types.workers"),
        ("Dataset", "agl.types.datasets"),
        ("StatusCounts", "agl.types.statuses"),
        ("is_finished", "agl.types.statuses"),
        ("Span", "agl.types.spans"),
    ],
)
def test_a_concept_is_defined_in_the_module_named_after_it(name: str, module: str) -> None:
    obj = getattr(agl.types, name)
    assert obj.__module__ == module
    assert getattr(importlib.import_module(module), name) is obj
