"""Optional dependencies: a missing one is reported with the extra that installs it.

Every agl package keeps heavy dependencies (torch, verl, agentops, poml...) in extras. Code that needs one imports
it inside :func:`requires_extra`, so a user without it reads which ``pip install`` fixes the problem instead of a
bare ``No module named 'torch'``. The extra is looked up in the distribution's own metadata, so the message follows
``pyproject.toml`` without a second list to keep in step.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from contextlib import contextmanager
from functools import cache
from importlib import metadata

from .errors import AglError

__all__ = ["MissingExtraError", "extra_providing", "requires_extra"]

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


class MissingExtraError(AglError, ImportError):
    """An optional dependency is not installed; the message names the extra (``pip install 'pkg[extra]'``)."""


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def _extras_of(distribution: str) -> tuple[tuple[str, str], ...]:
    """(requirement name, extra) for each requirement of ``distribution`` that only an extra installs."""
    try:
        requirements = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return ()
    found: list[tuple[str, str]] = []
    for requirement in requirements:
        name, extra = _REQUIREMENT.match(requirement), _EXTRA_MARKER.search(requirement)
        if name and extra:
            found.append((_normalise(name.group(1)), extra.group(1)))
    return tuple(found)


def extra_providing(distribution: str, module: str) -> str | None:
    """The extra of ``distribution`` whose requirements provide the importable ``module`` (e.g. ``"torch"``)."""
    top = _normalise(module.split(".")[0])
    extras = _extras_of(distribution)
    for name, extra in extras:
        if name == top:
            return extra
    for name, extra in extras:  # import names that are a prefix of their distribution: opentelemetry -> -sdk
        if name.startswith(top + "-"):
            return extra
    return None


def _message(error: ModuleNotFoundError, distribution: str, feature: str) -> str:
    module = error.name or "an optional module"
    extra = extra_providing(distribution, module)
    if extra is None:
        return f"{feature} needs {module!r}, which is not installed: install it (pip install {module.split('.')[0]})"
    return f"{feature} needs {module!r}, which comes with the {extra!r} extra: pip install '{distribution}[{extra}]'"


@contextmanager
def requires_extra(distribution: str, feature: str) -> Generator[None, None, None]:
    """Turn a ``ModuleNotFoundError`` for a third-party module inside the block into a :class:`MissingExtraError`.

    ``feature`` names what needed it, for the message: ``with requires_extra("agl-algorithms", "LocalGRPO"):``.
    A missing agl module is a broken install, not a missing extra, and is re-raised unchanged.
    """
    try:
        yield
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] == "agl":
            raise
        raise MissingExtraError(_message(error, distribution, feature)) from error
