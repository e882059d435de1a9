"""Warnings that point at the user's line: the first caller outside the agl packages."""

from __future__ import annotations

import inspect
import warnings

__all__ = ["warn_at_caller"]


def _inside_agl(module: object) -> bool:
    return isinstance(module, str) and (module == "agl" or module.startswith("agl."))


def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` at the line that called into agl (a reference-style option, a deprecated name).

    The stack is walked past every frame of an ``agl.*`` module, however many helpers lie between (the
    compatibility facade, a constructor, an option parser), so no caller counts ``stacklevel`` by hand.
    """
    frame = inspect.currentframe()
    level = 1
    caller = frame.f_back if frame is not None else None
    while caller is not None and _inside_agl(caller.f_globals.get("__name__")):
        caller = caller.f_back
        level += 1
    del frame, caller  # frames hold their locals: do not keep them alive
    warnings.warn(message, category, stacklevel=level + 1)
