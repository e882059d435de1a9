"""The ``UNSET`` sentinel: "not provided", as opposed to an explicit ``None``."""

from __future__ import annotations

from typing import Any, Final, TypeVar

from pydantic_core import core_schema

__all__ = ["UNSET", "Unset", "is_set"]

T = TypeVar("T")


class Unset:
    """Type of :data:`UNSET`. There is exactly one instance, also after pickling."""

    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "UNSET"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.is_instance_schema(cls)


UNSET: Final = Unset()


def is_set(value: object) -> bool:
    """True unless ``value`` is :data:`UNSET`."""
    return value is not UNSET
