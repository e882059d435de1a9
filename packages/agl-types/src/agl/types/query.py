"""Filter, sort and pagination types shared by every store query."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Generic, Literal, TypeVar, overload

from pydantic import BaseModel
from typing_extensions import TypedDict

__all__ = ["FilterField", "FilterLogic", "FilterOptions", "PaginatedResult", "SortOptions", "SortOrder"]

T = TypeVar("T")

FilterLogic = Literal["and", "or"]
SortOrder = Literal["asc", "desc"]


class FilterField(TypedDict, total=False):
    """Conditions on one field: equality, membership, substring."""

    exact: Any
    within: Sequence[Any]
    contains: str


FilterOptions = dict[str, Any]
"""Field name → :class:`FilterField`, plus ``_aggregate`` (``"and"``/``"or"``) and ``_must`` (conditions that always hold)."""


class SortOptions(TypedDict):
    name: str
    order: SortOrder


class PaginatedResult(BaseModel, Generic[T]):
    """One page of a query; behaves as a sequence of its items. ``total`` counts all matches."""

    items: list[T]
    limit: int = -1
    """-1 means unlimited."""
    offset: int = 0
    total: int = 0

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[T]:  # type: ignore[override]
        return iter(self.items)

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        return self.items[index]

    def __repr__(self) -> str:
        end = "end" if self.limit < 0 else str(self.offset + self.limit)
        return f"<PaginatedResult {self.offset}:{end} of {self.total} {self.items!r}>"
