"""The faces of agl.runner: every exported name has a public home (or a deliberate re-export) and a docstring."""

from __future__ import annotations

import importlib
import inspect

import pytest

FACES = ["agl.runner", "agl.runner.strategies"]

DELIBERATE_REEXPORTS = {
    "LostRunner": "agl.runner.strategies.client_server",
}
"""Names defined in a private module and made public through the module named here."""


def _exported() -> list[tuple[str, str]]:
    return [(face, name) for face in FACES for name in importlib.import_module(face).__all__]


@pytest.mark.parametrize(("face", "name"), _exported(), ids=[f"{f}.{n}" for f, n in _exported()])
def test_an_exported_name_has_a_public_home_and_a_docstring(face: str, name: str) -> None:
    obj = getattr(importlib.import_module(face), name)
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return
    home = obj.__module__
    if any(part.startswith("_") for part in home.split(".")):
        public = DELIBERATE_REEXPORTS.get(name)
        assert public is not None, f"{face}.{name} is defined in the private module {home}"
        assert getattr(importlib.import_module(public), name) is obj
        assert name in importlib.import_module(public).__all__
    assert inspect.getdoc(obj), f"{face}.{name} has no docstring"


def test_the_runner_exceptions_live_in_agl_runner_errors() -> None:
    from agl.runner import AgentCancelled, AttemptEnded, errors

    assert AgentCancelled is errors.AgentCancelled and AttemptEnded is errors.AttemptEnded
