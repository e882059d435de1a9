"""Lazy exports: names a package offers at its top but imports only on first use, keeping its import cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from .extras import requires_extra

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, where: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` (whose globals are ``namespace``).

    Each name of ``where`` is imported from its module (relative to ``package``, e.g. ``".otel"``) when first
    asked for, then kept in ``namespace``; an unknown name raises ``AttributeError``, and one whose module needs an
    extra that is not installed raises :class:`~agl.types.extras.MissingExtraError` naming that extra. Usage::

        __getattr__, __dir__ = lazy_exports(__name__, {"OtelTracer": ".otel"}, globals())
    """

    distribution = "-".join(package.split(".")[:2])  # agl.algorithms.local -> agl-algorithms

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        with requires_extra(distribution, f"{package}.{name}"):
            value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
