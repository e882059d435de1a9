"""``AGL_*`` environment variables that configure how a training run is laid out.

- ``AGL_CURRENT_ROLE``: ``algorithm``, ``runner`` or ``both`` (default) — which side this process runs
  under the client-server strategy.
- ``AGL_MANAGED_STORE``: whether the strategy serves/wraps the store itself (default true). With false, the
  store is used as given; a Trainer without a store then connects to ``AGL_SERVER_HOST:AGL_SERVER_PORT``
  (e.g. an ``agl store`` started separately).
- ``AGL_SERVER_HOST`` / ``AGL_SERVER_PORT``: where the store server listens or is reached (default
  ``127.0.0.1:4747``).
- ``AGL_STORE_TOKEN``: bearer token of the store server (read by the store's server and client).

Explicit arguments always win over the environment.
"""

from __future__ import annotations

import os
from enum import Enum
from typing import TypeVar, overload

__all__ = [
    "LightningEnvVar",
    "resolve_bool_env_var",
    "resolve_int_env_var",
    "resolve_str_env_var",
]

T = TypeVar("T")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class LightningEnvVar(str, Enum):
    AGL_CURRENT_ROLE = "AGL_CURRENT_ROLE"
    AGL_MANAGED_STORE = "AGL_MANAGED_STORE"
    AGL_SERVER_HOST = "AGL_SERVER_HOST"
    AGL_SERVER_PORT = "AGL_SERVER_PORT"
    AGL_EMITTER_DEBUG = "AGL_EMITTER_DEBUG"


def _raw(name: str | LightningEnvVar) -> str | None:
    key = name.value if isinstance(name, LightningEnvVar) else name
    value = os.environ.get(key)
    return None if value is None or not value.strip() else value.strip()


@overload
def resolve_bool_env_var(
    name: str | LightningEnvVar, override: bool | None = None, *, fallback: bool
) -> bool: ...
@overload
def resolve_bool_env_var(
    name: str | LightningEnvVar, override: bool | None = None, *, fallback: None = None
) -> bool | None: ...
def resolve_bool_env_var(
    name: str | LightningEnvVar, override: bool | None = None, *, fallback: bool | None = None
) -> bool | None:
    """``override`` if given, else the variable (1/true/yes/on or 0/false/no/off, any case), else ``fallback``."""
    if override is not None:
        return override
    value = _raw(name)
    if value is None:
        return fallback
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"{_key(name)}={value!r} is not a boolean; use one of 1/true/yes/on or 0/false/no/off")


@overload
def resolve_int_env_var(
    name: str | LightningEnvVar, override: int | None = None, *, fallback: int
) -> int: ...
@overload
def resolve_int_env_var(
    name: str | LightningEnvVar, override: int | None = None, *, fallback: None = None
) -> int | None: ...
def resolve_int_env_var(
    name: str | LightningEnvVar, override: int | None = None, *, fallback: int | None = None
) -> int | None:
    """``override`` if given, else the variable parsed as an integer, else ``fallback``."""
    if override is not None:
        return override
    value = _raw(name)
    if value is None:
        return fallback
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{_key(name)}={value!r} must be an integer") from None


@overload
def resolve_str_env_var(
    name: str | LightningEnvVar, override: str | None = None, *, fallback: str
) -> str: ...
@overload
def resolve_str_env_var(
    name: str | LightningEnvVar, override: str | None = None, *, fallback: None = None
) -> str | None: ...
def resolve_str_env_var(
    name: str | LightningEnvVar, override: str | None = None, *, fallback: str | None = None
) -> str | None:
    """``override`` if given, else the variable, else ``fallback``."""
    if override is not None:
        return override
    value = _raw(name)
    return fallback if value is None else value


def _key(name: str | LightningEnvVar) -> str:
    return name.value if isinstance(name, LightningEnvVar) else name
