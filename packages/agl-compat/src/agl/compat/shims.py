"""Small reference names with no one-to-one home in the agl packages, each built over what they have.

- :class:`LightningStoreThreaded`: the reference's thread-safe store facade, here an
  :class:`agl.store.LoopBoundStore` (every call runs on one event loop, whichever thread calls);
- :class:`ThreadingEvent`, :class:`MultiprocessingEvent`: the two :class:`agl.runner.ExecutionEvent`
  implementations the reference exports;
- :class:`SpanNames`, :class:`SpanAttributeNames`: the reference's deprecated enums (use
  :mod:`agl.types.semconv`); :data:`SpanLike`, :data:`TraceState`: its type aliases;
- :class:`Resource`: the base of the resources (``isinstance(x, Resource)`` holds for ``LLM``, ``ProxyLLM``,
  ``PromptTemplate``);
- :class:`ModelConfig`: one entry of an ``LLMProxy`` model list;
- :class:`PythonServerLauncherArgs`: the reference's server launch options, which ``LightningStoreServer`` and
  ``LLMProxy`` accept as ``launcher_args`` (their host and port are used; see MIGRATING.md).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import threading
from dataclasses import dataclass
from enum import Enum
from multiprocessing.context import BaseContext
from multiprocessing.synchronize import Event as EventType
from typing import Any, Literal, TypedDict, Union

from agl.store import LightningStore, LoopBoundStore
from agl.types import LLM, PromptTemplate, ProxyLLM, Span
from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "LightningStoreThreaded",
    "ModelConfig",
    "MultiprocessingEvent",
    "PythonServerLauncherArgs",
    "Resource",
    "SpanAttributeNames",
    "SpanLike",
    "SpanNames",
    "ThreadingEvent",
    "TraceState",
]

SpanLike = Union[ReadableSpan, Span]  # noqa: UP007 - a runtime alias, usable in isinstance on Python 3.10
"""An OpenTelemetry ``ReadableSpan`` or an agl :class:`~agl.types.Span`."""

TraceState = dict[str, str]
"""A span's trace state: key -> value."""


class LightningStoreThreaded(LoopBoundStore):
    """``LightningStoreThreaded(store)``: ``store`` made safe to share between threads.

    Every call runs on one event loop (a private loop thread, started on first use), whichever thread or loop
    calls it; :meth:`close` stops that thread and leaves ``store`` open. Stores that are thread-safe already
    (``store.capabilities["thread_safe"]``) need no wrapper: :func:`agl.store.as_thread_safe` returns them as
    they are.
    """

    def __init__(self, store: LightningStore, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(store, loop)


class _Signal:
    """A stop signal over a ``threading`` or ``multiprocessing`` event: what both reference events share."""

    __slots__ = ("_event",)

    def __init__(self, event: threading.Event | EventType) -> None:
        self._event = event

    def set(self) -> None:
        """Raise the signal."""
        self._event.set()

    def clear(self) -> None:
        """Lower the signal."""
        self._event.clear()

    def is_set(self) -> bool:
        """Whether the signal is raised."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the signal; whether it is raised."""
        return self._event.wait(timeout)


class ThreadingEvent(_Signal):
    """A stop signal shared by threads (an :class:`agl.runner.ExecutionEvent`)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(threading.Event())


class MultiprocessingEvent(_Signal):
    """A stop signal shared by processes (an :class:`agl.runner.ExecutionEvent`), from ``ctx`` if given."""

    __slots__ = ()

    def __init__(self, *, ctx: BaseContext | None = None) -> None:
        super().__init__(ctx.Event() if ctx is not None else multiprocessing.Event())


class SpanNames(str, Enum):
    """The reference's span names (deprecated there too: use the ``AGL_*`` names of :mod:`agl.types.semconv`)."""

    REWARD = "agentlightning.reward"
    MESSAGE = "agentlightning.message"
    OBJECT = "agentlightning.object"
    EXCEPTION = "agentlightning.exception"
    VIRTUAL = "agentlightning.virtual"
    ROLLOUT_ID = "agentlightning.rollout_id"
    ATTEMPT_ID = "agentlightning.attempt_id"
    SPAN_SEQUENCE_ID = "agentlightning.span_sequence_id"


class SpanAttributeNames(str, Enum):
    """The reference's emitter attribute names (deprecated there too: use :mod:`agl.types.semconv`)."""

    MESSAGE = "message"
    OBJECT = "object"


class _ResourceMeta(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, (LLM, ProxyLLM, PromptTemplate))

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, (LLM, ProxyLLM, PromptTemplate))


class Resource(metaclass=_ResourceMeta):
    """What the reference's resources derive from: ``isinstance(x, Resource)`` holds for every resource here
    (``LLM``, ``ProxyLLM``, ``PromptTemplate``). Not a base to derive new resources from: the resource types
    are a closed union (:data:`agl.types.ResourceUnion`)."""

    def __init__(self) -> None:
        raise TypeError("Resource is abstract: create an LLM, ProxyLLM or PromptTemplate")


class ModelConfig(TypedDict):
    """One entry of an ``LLMProxy`` model list, as in LiteLLM's ``model_list``."""

    model_name: str
    """The name clients ask for."""
    litellm_params: dict[str, Any]
    """What LiteLLM calls (``model``, ``api_base``, ...)."""


@dataclass
class PythonServerLauncherArgs:
    """The reference's launch options of its HTTP servers. Here ``LightningStoreServer(launcher_args=...)`` and
    ``LLMProxy(launcher_args=...)`` use ``host``, ``port`` and ``launch_mode`` (both always serve from a thread of
    this process); the other fields are kept for code that reads them back."""

    port: int | None = None
    host: str | None = None
    access_host: str | None = None
    launch_mode: Literal["asyncio", "thread", "mp"] = "asyncio"
    n_workers: int = 1
    healthcheck_url: str | None = None
    log_level: int = logging.INFO
    access_log: bool = False
    startup_timeout: float = 60.0
    kill_unhealthy_server: bool = True
    thread_join_timeout: float = 10.0
    process_join_timeout: float = 10.0
    timeout_keep_alive: int = 30
