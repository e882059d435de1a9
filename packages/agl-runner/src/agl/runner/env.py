"""``AGL_*`` environment variables (moved to :mod:`agl.types.env`; these names stay importable from here)."""

from __future__ import annotations

from agl.types.env import (
    LightningEnvVar,
    resolve_bool_env_var,
    resolve_int_env_var,
    resolve_str_env_var,
)

__all__ = [
    "LightningEnvVar",
    "resolve_bool_env_var",
    "resolve_int_env_var",
    "resolve_str_env_var",
]
