"""``build_component``: make a component from whatever a user passed for it."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, cast, overload

__all__ = ["build_component", "load_object"]

T = TypeVar("T")


def load_object(path: str) -> Any:
    """Import ``package.module.Name`` or ``package.module:Name``; ``ValueError`` saying what failed."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{path!r} is not an import path; write it as 'package.module.Name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} (from {path!r}): {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no attribute {attr!r} (from {path!r})") from None
    return obj


def _accepted_parameters(cls: type[Any]) -> set[str]:
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return set()
    return {
        name
        for name, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }


def _instantiate(
    cls: type[Any], kwargs: Mapping[str, Any], optional_defaults: Mapping[str, Any] | None
) -> Any:
    final = dict(kwargs)
    if optional_defaults:
        accepted = _accepted_parameters(cls)
        for name, value in optional_defaults.items():
            if name in accepted and name not in final:
                final[name] = value() if callable(value) and not isinstance(value, type) else value
    return cls(**final)


@overload
def build_component(
    spec: Any,
    expected_type: type[T],
    *,
    spec_name: str,
    default_factory: Callable[[], T] | None = None,
    allow_none: Literal[False] = False,
    optional_defaults: Mapping[str, Any] | None = None,
    dict_requires_type: bool = True,
    dict_default_cls: type[T] | None = None,
    registry: Mapping[str, str | type[Any]] | None = None,
    invalid_spec_error_fmt: str | None = None,
    type_error_fmt: str | None = None,
) -> T: ...
@overload
def build_component(
    spec: Any,
    expected_type: type[T],
    *,
    spec_name: str,
    default_factory: Callable[[], T | None] | None = None,
    allow_none: bool,
    optional_defaults: Mapping[str, Any] | None = None,
    dict_requires_type: bool = True,
    dict_default_cls: type[T] | None = None,
    registry: Mapping[str, str | type[Any]] | None = None,
    invalid_spec_error_fmt: str | None = None,
    type_error_fmt: str | None = None,
) -> T | None: ...
def build_component(
    spec: Any,
    expected_type: type[T],
    *,
    spec_name: str,
    default_factory: Callable[[], T | None] | None = None,
    allow_none: bool = False,
    optional_defaults: Mapping[str, Any] | None = None,
    dict_requires_type: bool = True,
    dict_default_cls: type[T] | None = None,
    registry: Mapping[str, str | type[Any]] | None = None,
    invalid_spec_error_fmt: str | None = None,
    type_error_fmt: str | None = None,
) -> T | None:
    """Build a ``expected_type`` from ``spec``. Accepted, in this order:

    - an instance of ``expected_type``: returned as is;
    - ``None``: ``default_factory()``, else ``None`` if ``allow_none``, else ``ValueError``;
    - a class: instantiated (with the ``optional_defaults`` its constructor declares);
    - a string: a ``registry`` alias or an import path, then treated as the object it names;
    - a dict: ``type`` (alias or import path; without it ``dict_default_cls``) plus keyword arguments;
    - any other callable: called without arguments (a factory).

    ``optional_defaults`` values that are callables are called to produce the value; they are passed only when
    the constructor declares that parameter and the spec did not set it. A product of the wrong type is a
    ``TypeError``, an unsupported spec a ``ValueError``. The ``*_fmt`` arguments customise both messages with
    ``{name}``, ``{spec}``, ``{expected}`` and ``{actual}``.
    """
    expected = getattr(expected_type, "__name__", str(expected_type))

    def invalid(reason: str) -> ValueError:
        if invalid_spec_error_fmt:
            return ValueError(
                invalid_spec_error_fmt.format(name=spec_name, spec=spec, expected=expected, actual=reason)
            )
        return ValueError(f"Invalid {spec_name} {spec!r}: {reason}")

    def checked(product: Any) -> T:
        if not isinstance(product, expected_type):
            actual = type(product).__name__
            if type_error_fmt:
                raise TypeError(
                    type_error_fmt.format(name=spec_name, spec=spec, expected=expected, actual=actual)
                )
            raise TypeError(f"{spec_name} must be a {expected}, but {spec!r} produced a {actual}")
        return product

    def resolve(name: str) -> Any:
        if registry is not None and name in registry:
            target = registry[name]
            return load_object(target) if isinstance(target, str) else target
        try:
            return load_object(name)
        except ValueError as exc:
            known = f"; known aliases: {', '.join(sorted(registry))}" if registry else ""
            raise invalid(f"{exc}{known}") from exc

    def from_object(obj: Any, kwargs: Mapping[str, Any]) -> T:
        if isinstance(obj, type):
            return checked(_instantiate(obj, kwargs, optional_defaults))
        if callable(obj):
            return checked(obj(**kwargs))
        if not kwargs:
            return checked(obj)
        raise invalid(f"{obj!r} is neither a class nor a factory, so it cannot take arguments")

    if isinstance(spec, expected_type) and not isinstance(spec, type):
        return spec
    if spec is None:
        if default_factory is not None:
            product = default_factory()
            return None if product is None and allow_none else checked(product)
        if allow_none:
            return None
        raise invalid(f"a {spec_name} is required")
    if isinstance(spec, type):
        return from_object(spec, {})
    if isinstance(spec, str):
        return from_object(resolve(spec), {})
    if isinstance(spec, Mapping):
        kwargs = dict(cast(Mapping[str, Any], spec))
        type_spec = kwargs.pop("type", None)
        if (
            type_spec is None
            and registry is not None
            and isinstance(kwargs.get("name"), str)
            and kwargs["name"] in registry
        ):
            type_spec = kwargs.pop("name")
        if type_spec is None:
            if dict_default_cls is not None:
                return from_object(dict_default_cls, kwargs)
            if dict_requires_type:
                raise invalid("a dict spec needs a 'type' key (a class import path or a registered alias)")
            raise invalid("a dict spec without 'type' needs a default class")
        target = resolve(type_spec) if isinstance(type_spec, str) else type_spec
        return from_object(target, kwargs)
    if callable(spec):
        return checked(spec())
    raise invalid(f"expected a {expected} instance, a class, a factory, an import path or a dict with 'type'")
