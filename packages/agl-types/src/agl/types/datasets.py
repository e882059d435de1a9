"""Datasets: what an algorithm draws its task inputs from."""

from __future__ import annotations

from typing import Protocol, TypeVar

__all__ = ["Dataset"]

T_co = TypeVar("T_co", covariant=True)


class Dataset(Protocol[T_co]):
    """Anything indexable with a length; plain lists qualify."""

    def __getitem__(self, index: int, /) -> T_co: ...

    def __len__(self) -> int: ...
