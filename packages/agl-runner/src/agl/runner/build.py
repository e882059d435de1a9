"""``build_component``: make a component from whatever a user passed for it."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar, cast, overload

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["BuildOptions", "ComponentSpec", "build_component", "load_object", "takes_keyword"]

T = TypeVar("T")

ComponentSpec = T | type[T] | str | Mapping[str, Any] | Callable[[], T] | None
"""What a user may pass for a component of type ``T`` (see :func:`build_component`): an instance, a class, a
registry alias or import path, a dict with ``type`` and keyword arguments, a factory, or ``None`` (the default)."""


_REFERENCE_PACKAGE = "agentlightning"
"""The reference's package: its import paths resolve through :mod:`agl.compat` once that is imported."""


def load_object(path: str) -> Any:
    """Import ``package.module.Name`` or ``package.module:Name``; ``ValueError`` saying what failed.

    A path into the reference's package (``"agentlightning.adapter.TraceToMessages"``), which is not installed
    here, names the same object of :mod:`agl.compat` when a program has imported it (as its migration does).
    """
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{path!r} is not an import path; write it as 'package.module.Name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        reference = module_name.split(".")[0] == _REFERENCE_PACKAGE
        compat = sys.modules.get("agl.compat") if reference else None
        if compat is not None and hasattr(compat, attr.split(".")[0]):
            module, module_name = compat, "agl.compat"
        else:
            hint = " (import agl.compat first: it holds the reference's names)" if reference else ""
            raise ValueError(f"cannot import {module_name!r} (from {path!r}): {exc}{hint}") from exc
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


def takes_keyword(function: Any, name: str) -> bool:
    """Whether ``function`` accepts the keyword argument ``name`` (by name or through ``**kwargs``)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


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


class BuildOptions(TypedDict, total=False):
    """The optional keywords of :func:`build_component` that shape how a spec is built."""

    optional_defaults: Mapping[str, Any] | None
    dict_requires_type: bool
    dict_default_cls: type[Any] | None
    registry: Mapping[str, str | type[Any]] | None
    invalid_spec_error_fmt: str | None
    type_error_fmt: str | None


@overload
def build_component(
    spec: Any,
    expected_type: type[T],
    *,
    spec_name: str,
    default_factory: Callable[[], T] | None = None,
    allow_none: Literal[False] = False,
    **options: Unpack[BuildOptions],
) -> T: ...
@overload
def build_component(
    spec: Any,
    expected_type: type[T],
    *,
    spec_name: str,
    default_factory: Callable[[], T | None] | None = None,
    allow_none: bool,
    **options: Unpack[BuildOptions],
) -> T | None: ...
def build_component(
    spec: Any,
    expected_type: type[T],
    *,
    spec_name: str,
    default_factory: Callable[[], T | None] | None = None,
    allow_none: bool = False,
    **options: Unpack[BuildOptions],
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
    builder = _Builder(expected_type, spec_name, spec, options)
    if isinstance(spec, expected_type) and not isinstance(spec, type):
        return spec
    if spec is None:
        if default_factory is not None:
            product = default_factory()
            return None if product is None and allow_none else builder.checked(product)
        if allow_none:
            return None
        raise builder.invalid(f"a {spec_name} is required")
    if isinstance(spec, type):
        return builder.from_object(spec, {})
    if isinstance(spec, str):
        return builder.from_object(builder.resolve(spec), {})
    if isinstance(spec, Mapping):
        return builder.from_mapping(cast(Mapping[str, Any], spec))
    if callable(spec):
        return builder.checked(spec())
    raise builder.invalid(
        f"expected a {builder.expected} instance, a class, a factory, an import path or a dict with 'type'"
    )


class _Builder(Generic[T]):
    """What :func:`build_component` needs to turn one ``spec`` into a ``T``, and its error messages."""

    def __init__(self, expected_type: type[T], spec_name: str, spec: Any, options: BuildOptions) -> None:
        self.expected_type = expected_type
        self.expected = getattr(expected_type, "__name__", str(expected_type))
        self.spec_name = spec_name
        self.spec = spec
        self.optional_defaults = options.get("optional_defaults")
        self.registry = options.get("registry")
        self.invalid_spec_error_fmt = options.get("invalid_spec_error_fmt")
        self.type_error_fmt = options.get("type_error_fmt")
        self.dict_default_cls = options.get("dict_default_cls")
        self.dict_requires_type = options.get("dict_requires_type", True)

    def _message(self, fmt: str, actual: str) -> str:
        return fmt.format(name=self.spec_name, spec=self.spec, expected=self.expected, actual=actual)

    def invalid(self, reason: str) -> ValueError:
        if self.invalid_spec_error_fmt:
            return ValueError(self._message(self.invalid_spec_error_fmt, reason))
        return ValueError(f"Invalid {self.spec_name} {self.spec!r}: {reason}")

    def checked(self, product: Any) -> T:
        if not isinstance(product, self.expected_type):
            actual = type(product).__name__
            if self.type_error_fmt:
                raise TypeError(self._message(self.type_error_fmt, actual))
            raise TypeError(
                f"{self.spec_name} must be a {self.expected}, but {self.spec!r} produced a {actual}"
            )
        return product

    def resolve(self, name: str) -> Any:
        """A registry alias or an import path, as the object it names."""
        if self.registry is not None and name in self.registry:
            target = self.registry[name]
            return load_object(target) if isinstance(target, str) else target
        try:
            return load_object(name)
        except ValueError as exc:
            known = f"; known aliases: {', '.join(sorted(self.registry))}" if self.registry else ""
            raise self.invalid(f"{exc}{known}") from exc

    def from_object(self, obj: Any, kwargs: Mapping[str, Any]) -> T:
        """A class instantiated, or a factory called, with ``kwargs``."""
        if isinstance(obj, type):
            return self.checked(_instantiate(obj, kwargs, self.optional_defaults))
        if callable(obj):
            return self.checked(obj(**kwargs))
        if not kwargs:
            return self.checked(obj)
        raise self.invalid(f"{obj!r} is neither a class nor a factory, so it cannot take arguments")

    def from_mapping(self, spec: Mapping[str, Any]) -> T:
        """A dict spec: ``type`` (or a registered ``name``) plus keyword arguments."""
        kwargs = dict(spec)
        type_spec = kwargs.pop("type", None)
        registered = self.registry is not None and isinstance(kwargs.get("name"), str)
        if type_spec is None and registered and kwargs["name"] in cast(Mapping[str, Any], self.registry):
            type_spec = kwargs.pop("name")
        if type_spec is None:
            if self.dict_default_cls is not None:
                return self.from_object(self.dict_default_cls, kwargs)
            if self.dict_requires_type:
                raise self.invalid(
                    "a dict spec needs a 'type' key (a class import path or a registered alias)"
                )
            raise self.invalid("a dict spec without 'type' needs a default class")
        target = self.resolve(type_spec) if isinstance(type_spec, str) else type_spec
        return self.from_object(target, kwargs)
