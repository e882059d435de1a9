"""build_component: every accepted form of spec, and the errors for the rest."""

from __future__ import annotations

from typing import Any

import pytest
from agl.runner import build_component, load_object
from hypothesis import given
from hypothesis import strategies as st


class Base:
    def __init__(self, size: int = 1, name: str = "base") -> None:
        self.size = size
        self.name = name


class Child(Base):
    pass


class NoKwargs(Base):
    def __init__(self) -> None:
        super().__init__()


class Other:
    pass


REGISTRY = {"child": f"{__name__}.Child", "base": Base}
sizes = st.integers(min_value=-1000, max_value=1000)


@given(sizes)
def test_instance_passes_through(size: int) -> None:
    instance = Child(size)
    assert build_component(instance, Base, spec_name="thing") is instance


@given(sizes, st.sampled_from([Base, Child, f"{__name__}.Child", f"{__name__}:Base", "child", "base"]))
def test_class_and_string_specs_get_optional_defaults_only_if_declared(size: int, spec: Any) -> None:
    built = build_component(
        spec, Base, spec_name="thing", optional_defaults={"size": size, "unknown": 1}, registry=REGISTRY
    )
    assert isinstance(built, Base) and built.size == size
    plain = build_component(NoKwargs, Base, spec_name="thing", optional_defaults={"size": size})
    assert isinstance(plain, NoKwargs) and plain.size == 1


@given(sizes, sizes)
def test_dict_spec_kwargs_win_over_optional_defaults(given_size: int, default_size: int) -> None:
    built = build_component(
        {"type": "child", "size": given_size},
        Base,
        spec_name="thing",
        registry=REGISTRY,
        optional_defaults={"size": default_size},
    )
    assert isinstance(built, Child) and built.size == given_size
    by_name = build_component({"name": "child"}, Base, spec_name="thing", registry=REGISTRY)
    assert isinstance(by_name, Child)


def test_callable_optional_default_is_called() -> None:
    built = build_component(Base, Base, spec_name="thing", optional_defaults={"name": lambda: "made"})
    assert built is not None and built.name == "made"


def test_dict_without_type_uses_default_class_or_fails() -> None:
    built = build_component({"size": 3}, Base, spec_name="thing", dict_default_cls=Child)
    assert isinstance(built, Child) and built.size == 3
    with pytest.raises(ValueError, match="'type'"):
        build_component({"size": 3}, Base, spec_name="thing")


def test_none_default_factory_allow_none_or_error() -> None:
    assert isinstance(build_component(None, Base, spec_name="thing", default_factory=Child), Child)
    assert build_component(None, Base, spec_name="thing", allow_none=True) is None
    with pytest.raises(ValueError, match="thing"):
        build_component(None, Base, spec_name="thing")


def test_factory_product_is_type_checked() -> None:
    assert isinstance(build_component(lambda: Child(2), Base, spec_name="thing"), Child)
    with pytest.raises(TypeError, match="thing must be a Base"):
        build_component(Other, Base, spec_name="thing")
    with pytest.raises(TypeError, match="custom thing Base Other"):
        build_component(
            lambda: Other(), Base, spec_name="thing", type_error_fmt="custom {name} {expected} {actual}"
        )


@given(st.one_of(st.integers(), st.floats(allow_nan=False), st.binary(), st.lists(st.integers(), max_size=3)))
def test_unsupported_specs_are_value_errors(spec: Any) -> None:
    with pytest.raises(ValueError, match="Invalid thing"):
        build_component(spec, Base, spec_name="thing")
    with pytest.raises(ValueError, match="bad thing"):
        build_component(spec, Base, spec_name="thing", invalid_spec_error_fmt="bad {name}")


def test_bad_import_paths_say_what_failed() -> None:
    with pytest.raises(ValueError, match="cannot import"):
        build_component("no_such_module_xyz.Thing", Base, spec_name="thing")
    with pytest.raises(ValueError, match="has no attribute"):
        build_component(f"{__name__}.Missing", Base, spec_name="thing")
    with pytest.raises(ValueError, match="known aliases: base, child"):
        build_component("nothing", Base, spec_name="thing", registry=REGISTRY)
    assert load_object("collections:OrderedDict").__name__ == "OrderedDict"
