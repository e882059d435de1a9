"""``@algo``: turn a plain function into an :class:`Algorithm`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from agl.types import Dataset

from .base import Algorithm

__all__ = ["FunctionalAlgorithm", "algo"]

_INJECTABLE = ("store", "adapter", "llm_proxy", "initial_resources", "train_dataset", "val_dataset")


class FunctionalAlgorithm(Algorithm):
    """An algorithm whose ``run`` is a user function.

    ``run`` passes, by keyword, only the parameters the function declares among ``store``, ``adapter``,
    ``llm_proxy``, ``initial_resources``, ``train_dataset`` and ``val_dataset``. A dataset given to a function
    that does not declare it is a ``TypeError`` (it would silently be ignored otherwise).
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        if not callable(func):
            raise TypeError(f"@algo needs a function, got {type(func).__name__}")
        self._func = func
        self._is_async = inspect.iscoroutinefunction(func)
        params = inspect.signature(func).parameters
        self._declared = frozenset(
            name
            for name, p in params.items()
            if name in _INJECTABLE
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        )
        functools.update_wrapper(self, func)

    def is_async(self) -> bool:
        return self._is_async

    def _kwargs(self, train_dataset: Dataset[Any] | None, val_dataset: Dataset[Any] | None) -> dict[str, Any]:
        name = getattr(self._func, "__name__", repr(self._func))
        for dataset_name, dataset in (("train_dataset", train_dataset), ("val_dataset", val_dataset)):
            if dataset is not None and dataset_name not in self._declared:
                raise TypeError(
                    f"{dataset_name} was given but the algorithm function {name}() has no "
                    f"{dataset_name!r} parameter; add one or do not pass it"
                )
        kwargs: dict[str, Any] = {}
        if "store" in self._declared:
            kwargs["store"] = self.get_store()
        if "adapter" in self._declared:
            kwargs["adapter"] = self.get_adapter()
        if "llm_proxy" in self._declared:
            kwargs["llm_proxy"] = self.get_llm_proxy()
        if "initial_resources" in self._declared:
            kwargs["initial_resources"] = self.get_initial_resources()
        if "train_dataset" in self._declared:
            kwargs["train_dataset"] = train_dataset
        if "val_dataset" in self._declared:
            kwargs["val_dataset"] = val_dataset
        return kwargs

    def run(
        self, train_dataset: Dataset[Any] | None = None, val_dataset: Dataset[Any] | None = None
    ) -> Awaitable[None] | None:
        """Call the function with what it declares; returns an awaitable only for an async function."""
        return self._func(**self._kwargs(train_dataset, val_dataset))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly, as if undecorated."""
        return self._func(*args, **kwargs)


def algo(func: Callable[..., Any], /) -> FunctionalAlgorithm:
    """Make ``func`` an algorithm. It declares what it needs by parameter name::

    @algo
    async def evaluate(store, train_dataset):
        ...
    """
    return FunctionalAlgorithm(func)
