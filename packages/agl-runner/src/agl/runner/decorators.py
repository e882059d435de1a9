"""``@rollout``, ``@llm_rollout`` and ``@prompt_rollout``: write an agent as one function.

The function's first parameter is the task (named ``task``); the others are injected by name:
``llm`` (the first LLM resource, routed to the current attempt when it is a ``ProxyLLM``),
``prompt_template`` (the first prompt template), ``rollout`` (the rollout being executed) and
``resources`` (all named resources). Sync and async functions both work.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, Literal, TypeVar, overload

from agl.types import LLM, AttemptedRollout, NamedResources, PromptTemplate, ProxyLLM, Rollout

from .litagent import LitAgent, RolloutRawResult

__all__ = ["FunctionalLitAgent", "llm_rollout", "prompt_rollout", "rollout"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

INJECTABLE = ("llm", "prompt_template", "rollout", "resources")
_BY_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _check_signature(func: Callable[..., Any], kind: Literal["llm", "prompt_template"]) -> None:
    """Raise ``ValueError`` unless ``func(task, ..., <kind>, ...)`` can be called as a rollout."""
    name = getattr(func, "__qualname__", repr(func))
    params = list(inspect.signature(func).parameters.values())
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(named) < 2:
        raise ValueError(f"{name} must take at least two parameters: task and {kind}")
    first = named[0]
    if first.name != "task" or first.kind not in _POSITIONAL:
        raise ValueError(f"The first parameter of {name} must be 'task', got {first.name!r}")
    by_name = {p.name: p for p in named}
    if kind not in by_name or by_name[kind].kind not in _BY_KEYWORD:
        raise ValueError(f"{name} must have a parameter named {kind!r} that can be passed by keyword")
    for p in named[1:]:
        if p.name in INJECTABLE:
            if p.kind not in _BY_KEYWORD:
                raise ValueError(f"Parameter {p.name!r} of {name} must be passable by keyword")
        elif p.default is inspect.Parameter.empty:
            raise ValueError(
                f"Parameter {p.name!r} of {name} has no default and cannot be injected; "
                f"injectable parameters are {', '.join(INJECTABLE)}"
            )


def _lookup(module: str, qualname: str) -> Any:
    import importlib

    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


def _fits(func: Callable[..., Any], kind: Literal["llm", "prompt_template"]) -> bool:
    try:
        _check_signature(func, kind)
    except ValueError:
        return False
    return True


class FunctionalLitAgent(LitAgent[T]):
    """A :class:`LitAgent` whose rollout is a plain function; calling the agent calls the function."""

    def __init__(self, rollout_func: Callable[..., Any], *, strip_proxy: bool = True) -> None:
        super().__init__()
        self._rollout_func = rollout_func
        self._strip_proxy = strip_proxy
        self._is_async = inspect.iscoroutinefunction(rollout_func)
        params = inspect.signature(rollout_func).parameters
        self._wants = frozenset(name for name in INJECTABLE if name in params)
        # A parameter with a default keeps it when the resources hold nothing of its kind.
        self._optional = frozenset(
            name for name in self._wants if params[name].default is not inspect.Parameter.empty
        )
        functools.update_wrapper(self, rollout_func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._rollout_func(*args, **kwargs)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # A decorated module-level function is pickled by name: the name now refers to this agent.
        module = getattr(self._rollout_func, "__module__", None)
        qualname = getattr(self._rollout_func, "__qualname__", "")
        if module and "<locals>" not in qualname and _lookup(module, qualname) is self:
            return (_lookup, (module, qualname))
        return super().__reduce_ex__(protocol)

    def is_async(self) -> bool:
        return self._is_async

    def _kwargs(self, resources: NamedResources, rollout: Rollout) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if "rollout" in self._wants:
            kwargs["rollout"] = rollout
        if "resources" in self._wants:
            kwargs["resources"] = resources
        if "llm" in self._wants and not self._skip("llm", resources, LLM):
            kwargs["llm"] = self._pick_llm(resources, rollout)
        if "prompt_template" in self._wants and not self._skip("prompt_template", resources, PromptTemplate):
            kwargs["prompt_template"] = self._pick(resources, PromptTemplate, "PromptTemplate")
        return kwargs

    def _skip(self, name: str, resources: NamedResources, cls: type[Any]) -> bool:
        return name in self._optional and not any(isinstance(r, cls) for r in resources.values())

    def _pick(self, resources: NamedResources, cls: type[Any], what: str) -> Any:
        found = [(name, r) for name, r in resources.items() if isinstance(r, cls)]
        if not found:
            raise ValueError(
                f"The agent {self._name()} needs a {what} resource but the resources have none "
                f"(names: {sorted(resources) or 'none'}); pass one in initial_resources or publish it"
            )
        if len(found) > 1:
            logger.warning(
                "Several %s resources (%s); the agent %s gets the first, %r",
                what,
                ", ".join(name for name, _ in found),
                self._name(),
                found[0][0],
            )
        return found[0][1]

    def _pick_llm(self, resources: NamedResources, rollout: Rollout) -> LLM:
        llm: LLM = self._pick(resources, LLM, "LLM")
        if self._strip_proxy and isinstance(llm, ProxyLLM):
            if not isinstance(rollout, AttemptedRollout):
                raise ValueError(
                    "A ProxyLLM can only be routed for an AttemptedRollout (a rollout with its attempt); "
                    f"got {type(rollout).__name__}"
                )
            return llm.with_attempted_rollout(rollout)
        return llm

    def _name(self) -> str:
        return getattr(self._rollout_func, "__qualname__", repr(self._rollout_func))

    def rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        if self._is_async:
            raise RuntimeError(f"{self._name()} is async: call rollout_async()")
        return self._rollout_func(task, **self._kwargs(resources, rollout))

    async def rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        if not self._is_async:
            raise RuntimeError(f"{self._name()} is not async: call rollout()")
        return await self._rollout_func(task, **self._kwargs(resources, rollout))


def _decorator(
    kind: Literal["llm", "prompt_template"] | None,
    func: Callable[..., Any] | None,
    strip_proxy: bool,
) -> Any:
    def wrap(f: Callable[..., Any]) -> FunctionalLitAgent[Any]:
        if not callable(f):
            raise TypeError(f"Expected a function to decorate, got {type(f).__name__}")
        if kind is None:
            if not (_fits(f, "llm") or _fits(f, "prompt_template")):
                name = getattr(f, "__qualname__", repr(f))
                raise NotImplementedError(
                    f"@rollout cannot use {name}: it must look like (task, llm, ...) or "
                    "(task, prompt_template, ...), optionally with rollout=/resources=, and other "
                    "parameters need defaults"
                )
        else:
            _check_signature(f, kind)
        return FunctionalLitAgent(f, strip_proxy=strip_proxy)

    return wrap if func is None else wrap(func)


@overload
def llm_rollout(func: Callable[..., Any], /) -> FunctionalLitAgent[Any]: ...
@overload
def llm_rollout(*, strip_proxy: bool = True) -> Callable[[Callable[..., Any]], FunctionalLitAgent[Any]]: ...
def llm_rollout(func: Callable[..., Any] | None = None, /, *, strip_proxy: bool = True) -> Any:
    """Agent from ``func(task, llm, [rollout])``: ``llm`` is the first LLM resource.

    With ``strip_proxy`` (default) a ``ProxyLLM`` arrives as a plain ``LLM`` routed to the current attempt.
    """
    return _decorator("llm", func, strip_proxy)


@overload
def prompt_rollout(func: Callable[..., Any], /) -> FunctionalLitAgent[Any]: ...
@overload
def prompt_rollout() -> Callable[[Callable[..., Any]], FunctionalLitAgent[Any]]: ...
def prompt_rollout(func: Callable[..., Any] | None = None, /) -> Any:
    """Agent from ``func(task, prompt_template, [rollout])``: the first prompt-template resource."""
    return _decorator("prompt_template", func, True)


@overload
def rollout(func: Callable[..., Any], /) -> FunctionalLitAgent[Any]: ...
@overload
def rollout(*, strip_proxy: bool = True) -> Callable[[Callable[..., Any]], FunctionalLitAgent[Any]]: ...
def rollout(func: Callable[..., Any] | None = None, /, *, strip_proxy: bool = True) -> Any:
    """Agent from a function taking ``task`` and ``llm`` or ``prompt_template`` (see the module docstring)."""
    return _decorator(None, func, strip_proxy)
