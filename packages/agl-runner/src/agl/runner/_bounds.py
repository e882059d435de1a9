"""One check for a setting's lower bound, with the one error message every runner setting uses."""

from __future__ import annotations

__all__ = ["check_at_least"]


def check_at_least(
    name: str, value: float | None, minimum: float, *, exclusive: bool = False, optional: bool = False
) -> None:
    """``ValueError`` ("``<name> must be >= <minimum>, got <value>``") unless ``value`` is at least
    ``minimum`` (above it when ``exclusive``); ``None`` passes when ``optional``."""
    if value is None and optional:
        return
    if value is None or value < minimum or (exclusive and value == minimum):
        bound = f"{'>' if exclusive else '>='} {minimum}{' or None' if optional else ''}"
        raise ValueError(f"{name} must be {bound}, got {value}")
