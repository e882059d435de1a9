"""The ``Algorithm`` contract: what a trainer hands an algorithm before calling ``run``."""

from __future__ import annotations

import inspect
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agl.types import Dataset, NamedResources
from agl.types.weak import deref

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["Algorithm", "SupportsAdapt", "SupportsLLMProxy"]


@runtime_checkable
class SupportsAdapt(Protocol):
    """An adapter: turns what the store holds (usually a list of spans) into training data."""

    def adapt(self, source: Any, /) -> Any: ...


@runtime_checkable
class SupportsLLMProxy(Protocol):
    """What an algorithm needs of the LLM proxy (``agl.proxy.LLMProxy`` implements it).

    ``start`` and ``stop`` are coroutines. :func:`agl.algorithms.running_proxy` keeps a proxy running for a
    block (starting and stopping it only when it was not running already).
    """

    def set_store(self, store: LightningStore, /) -> None: ...

    def is_running(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def _deref(ref: weakref.ReferenceType[Any] | None, what: str, setter: str) -> Any:
    return deref(
        ref,
        unset=f"{what} is not set; call {setter}() first (the Trainer does this before run())",
        gone=f"{what} was garbage-collected; keep a reference to it while the algorithm runs",
    )


class Algorithm(ABC):
    """Base class of every algorithm.

    A :class:`~agl.runner.Trainer` injects the store, the adapter, the initial resources, the LLM proxy and
    itself before calling :meth:`run`. Trainer, adapter and proxy are held by weak reference (the trainer owns
    them); the store by strong reference. ``run`` may be a plain method or a coroutine.
    """

    _trainer_ref: weakref.ReferenceType[Any] | None = None
    _adapter_ref: weakref.ReferenceType[Any] | None = None
    _llm_proxy_ref: weakref.ReferenceType[Any] | None = None
    _store: LightningStore | None = None
    _initial_resources: NamedResources | None = None

    # -- references ----------------------------------------------------------------------------

    def set_trainer(self, trainer: Any) -> None:
        """Remember the trainer that runs this algorithm (weak reference)."""
        self._trainer_ref = weakref.ref(trainer)

    def get_trainer(self) -> Any:
        """The trainer. ``ValueError`` when unset or garbage-collected."""
        return _deref(self._trainer_ref, "The trainer", "set_trainer")

    def set_store(self, store: LightningStore) -> None:
        """The store to enqueue rollouts into and read results from (strong reference)."""
        self._store = store

    def get_store(self) -> LightningStore:
        """The store. ``ValueError`` when unset."""
        if self._store is None:
            raise ValueError(
                "The store is not set; call set_store() first (the Trainer does this before run())"
            )
        return self._store

    def set_adapter(self, adapter: SupportsAdapt) -> None:
        """The adapter that turns spans into training data (weak reference)."""
        self._adapter_ref = weakref.ref(adapter)

    def get_adapter(self) -> SupportsAdapt:
        """The adapter. ``ValueError`` when unset or garbage-collected."""
        return _deref(self._adapter_ref, "The adapter", "set_adapter")

    def has_adapter(self) -> bool:
        """Whether an adapter is set and still alive."""
        return self._adapter_ref is not None and self._adapter_ref() is not None

    def set_llm_proxy(self, llm_proxy: SupportsLLMProxy | None) -> None:
        """The LLM proxy agents call through (weak reference); ``None`` for none."""
        self._llm_proxy_ref = None if llm_proxy is None else weakref.ref(llm_proxy)

    def get_llm_proxy(self) -> SupportsLLMProxy | None:
        """The LLM proxy, or ``None`` when none was set. ``ValueError`` when it was garbage-collected."""
        if self._llm_proxy_ref is None:
            return None
        return _deref(self._llm_proxy_ref, "The LLM proxy", "set_llm_proxy")

    def set_initial_resources(self, resources: NamedResources | None) -> None:
        """Resources to publish before the first rollout (e.g. the LLM endpoint, the first prompt)."""
        self._initial_resources = resources

    def get_initial_resources(self) -> NamedResources | None:
        return self._initial_resources

    # -- running -------------------------------------------------------------------------------

    def is_async(self) -> bool:
        """Whether :meth:`run` is a coroutine function."""
        return inspect.iscoroutinefunction(self.run)

    @abstractmethod
    def run(
        self, train_dataset: Dataset[Any] | None = None, val_dataset: Dataset[Any] | None = None
    ) -> Awaitable[None] | None:
        """Train (or evaluate) on the datasets, using the store to talk to runners."""

    def __call__(
        self, train_dataset: Dataset[Any] | None = None, val_dataset: Dataset[Any] | None = None
    ) -> Awaitable[None] | None:
        return self.run(train_dataset=train_dataset, val_dataset=val_dataset)

    def training_data_report(self) -> str | None:
        """Why rollouts of the last run gave no training data, with the fixes
        (:class:`agl.algorithms.adapter.NoDataTally`); ``None``: all gave some, or this algorithm does not say.
        The :class:`~agl.runner.Trainer` shows it at the end of ``fit``."""
        return None
