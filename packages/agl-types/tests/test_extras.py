"""A missing optional dependency is reported with the extra that installs it."""

from __future__ import annotations

import pytest
from agl.types.errors import AglError
from agl.types.extras import MissingExtraError, extra_providing, requires_extra


def test_the_extra_is_read_from_the_distribution_metadata() -> None:
    assert extra_providing("agl-types", "jinja2") == "jinja"
    assert extra_providing("agl-types", "poml") == "poml"
    # an import name that is a prefix of its distribution's name (opentelemetry -> opentelemetry-sdk)
    assert extra_providing("agl-types", "opentelemetry.sdk.trace") == "otel"
    assert extra_providing("agl-types", "pydantic") is None  # a base dependency, not an extra
    assert extra_providing("no-such-distribution", "torch") is None


def test_a_missing_module_of_an_extra_names_the_pip_command() -> None:
    with (
        pytest.raises(MissingExtraError) as caught,
        requires_extra("agl-types", "PromptTemplate(engine='jinja')"),
    ):
        raise ModuleNotFoundError("No module named 'jinja2'", name="jinja2")
    message = str(caught.value)
    assert "PromptTemplate(engine='jinja')" in message
    assert "pip install 'agl-types[jinja]'" in message
    assert isinstance(caught.value, ImportError) and isinstance(caught.value, AglError)
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_a_module_no_extra_provides_is_still_named() -> None:
    missing = r"needs 'zz_not_a_module'.*pip install zz_not_a_module"
    with pytest.raises(MissingExtraError, match=missing), requires_extra("agl-types", "a feature"):
        import zz_not_a_module  # pyright: ignore[reportMissingImports]  # noqa: F401


def test_a_missing_agl_module_is_a_broken_install_and_passes_through() -> None:
    with pytest.raises(ModuleNotFoundError) as caught, requires_extra("agl-types", "a feature"):
        import agl.zz_not_a_package  # pyright: ignore[reportMissingImports]  # noqa: F401
    assert not isinstance(caught.value, MissingExtraError)
