"""The reference's ``LLMProxy`` arguments (agentlightning 0.3), mapped onto this proxy.

``num_retries``, ``litellm_config``, ``callbacks`` and ``middlewares`` keep their meaning; ``launch_mode="mp"``,
``num_workers`` and ``launcher_args`` have none here (the proxy serves in a thread or on the caller's loop) and
are accepted with a warning saying so; the reference's positional order ``LLMProxy(port, model_list, store,
host)`` is recognised by its types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from agl.types.caller import warn_at_caller

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = [
    "CALLBACK_ALIASES",
    "MIDDLEWARE_ALIASES",
    "ReferenceOptions",
    "apply_litellm_settings",
    "reference_launch",
    "reference_options",
    "reference_positional",
]

CALLBACK_ALIASES = ("return_token_ids", "logprobs", "opentelemetry")
"""The reference's callback names: ask for token ids, ask for logprobs, record spans."""
MIDDLEWARE_ALIASES = ("rollout_attempt", "stream_conversion", "message_inspection")
"""The reference's middleware names; the first two are what this proxy always does."""


@dataclass
class ReferenceOptions:
    """What the reference's options ask of this proxy."""

    router_kwargs: dict[str, Any] = field(default_factory=dict[str, Any])
    """Defaults for ``litellm.Router`` (explicit ``router_kwargs`` win)."""
    litellm_settings: dict[str, Any] = field(default_factory=dict[str, Any])
    """LiteLLM module settings (``litellm.<name> = value``), set when the proxy starts."""
    callbacks: list[Any] = field(default_factory=list[Any])
    """LiteLLM callback objects, added to ``litellm.callbacks`` while the proxy runs."""
    middlewares: list[Callable[[Any], Any]] = field(default_factory=list[Callable[[Any], Any]])
    """ASGI middleware classes wrapped around the proxy's app, the last outermost."""
    model_list: list[dict[str, Any]] | None = None
    """``litellm_config["model_list"]``."""
    return_token_ids: bool | None = None
    """``None``: not said (the default applies)."""
    request_logprobs: bool | None = None
    through_litellm: bool = False
    """An option acts inside LiteLLM: calls must go through it to be affected."""


def reference_options(
    *,
    litellm_config: Mapping[str, Any] | None,
    num_retries: int | None,
    callbacks: Sequence[Any] | None,
    middlewares: Sequence[Any] | None,
) -> ReferenceOptions:
    """Map the reference's ``litellm_config``, ``num_retries``, ``callbacks`` and ``middlewares``."""
    options = ReferenceOptions()
    if litellm_config:
        _map_litellm_config(options, dict(litellm_config))
    if num_retries is not None:
        if num_retries < 0:
            raise ValueError(f"num_retries must be 0 or more, got {num_retries}")
        options.router_kwargs["num_retries"] = num_retries
        options.through_litellm = options.through_litellm or num_retries > 0
    if callbacks is not None:
        _map_callbacks(options, callbacks)
    if middlewares is not None:
        _map_middlewares(options, middlewares)
    return options


def _map_litellm_config(options: ReferenceOptions, config: dict[str, Any]) -> None:
    """The reference merged ``litellm_config`` into LiteLLM proxy's YAML config: its ``litellm_settings`` are
    LiteLLM module settings, its ``router_settings`` the Router's arguments."""
    settings = dict(cast("Mapping[str, Any]", config.pop("litellm_settings", None) or {}))
    if "num_retries" in settings:
        options.router_kwargs["num_retries"] = settings.pop("num_retries")
    options.litellm_settings.update(settings)
    options.router_kwargs.update(cast("Mapping[str, Any]", config.pop("router_settings", None) or {}))
    model_list = config.pop("model_list", None)
    if model_list is not None:
        options.model_list = [dict(e) for e in cast("Sequence[Mapping[str, Any]]", model_list)]
    if config:
        warn_at_caller(
            f"LLMProxy(litellm_config=...): {', '.join(sorted(config))} ignored (this proxy is not LiteLLM's proxy "
            "server; only model_list, litellm_settings and router_settings apply)",
        )
    options.through_litellm = bool(options.litellm_settings or options.router_kwargs)


def _map_callbacks(options: ReferenceOptions, callbacks: Sequence[Any]) -> None:
    """Aliases become the switches they were; classes (instantiated) and objects become LiteLLM callbacks."""
    names: set[str] = set()
    for callback in callbacks:
        if isinstance(callback, str):
            names.add(_known_alias(callback, "callback", CALLBACK_ALIASES, "a LiteLLM CustomLogger class"))
        else:
            options.callbacks.append(callback() if isinstance(callback, type) else callback)
    options.return_token_ids = "return_token_ids" in names
    options.request_logprobs = "logprobs" in names
    options.through_litellm = options.through_litellm or bool(options.callbacks)
    if "opentelemetry" not in names:
        warn_at_caller(
            "LLMProxy(callbacks=...) without 'opentelemetry': this proxy records every call as a span "
            "all the same (its spans are not made by an OpenTelemetry callback)",
        )


def _map_middlewares(options: ReferenceOptions, middlewares: Sequence[Any]) -> None:
    for middleware in middlewares:
        if isinstance(middleware, str):
            other = "an ASGI middleware class, e.g. a starlette BaseHTTPMiddleware"
            if _known_alias(middleware, "middleware", MIDDLEWARE_ALIASES, other) == "message_inspection":
                warn_at_caller(
                    "LLMProxy(middlewares=['message_inspection']) is not offered here: the recorded spans hold "
                    "every request and response",
                )
            continue  # rollout_attempt and stream_conversion: what this proxy always does
        if not callable(middleware):
            raise TypeError(f"middlewares takes aliases or ASGI middleware classes, not {middleware!r}")
        options.middlewares.append(cast("Callable[[Any], Any]", middleware))


def _known_alias(alias: str, kind: str, aliases: Sequence[str], other: str) -> str:
    """``alias`` if it is one of ``aliases``; else ``ValueError`` naming them and the ``other`` kind of value."""
    if alias not in aliases:
        raise ValueError(
            f"unknown {kind} alias {alias!r}; the aliases are {', '.join(aliases)} (or pass {other})"
        )
    return alias


def reference_launch(
    launch_mode: str, num_workers: int | None, launcher_args: Any, host: str | None, port: int | None
) -> tuple[str, str | None, int | None]:
    """``(launch_mode, host, port)`` after the reference's launch options, warning about those without effect."""
    if launcher_args is not None:
        warn_at_caller(
            "LLMProxy(launcher_args=...) is deprecated: its host, port and launch_mode are used, the rest is "
            "ignored; pass host=, port=, launch_mode= instead",
            DeprecationWarning,
        )
        host = host if host is not None else getattr(launcher_args, "host", None)
        port = port if port is not None else getattr(launcher_args, "port", None)
        launch_mode = str(getattr(launcher_args, "launch_mode", None) or launch_mode)
        num_workers = num_workers if num_workers is not None else getattr(launcher_args, "n_workers", None)
    if launch_mode == "mp":
        warn_at_caller(
            "LLMProxy(launch_mode='mp'): this proxy serves in a thread of this process instead (its spans do not "
            "go through OpenTelemetry, so it needs no process of its own); pass launch_mode='thread'"
        )
        launch_mode = "thread"
    if num_workers is not None and num_workers != 1:
        warn_at_caller(
            f"LLMProxy(num_workers={num_workers}) has no effect here: one server answers every call"
        )
    return launch_mode, host, port


def reference_positional(
    model_list: object, store: object, host: object, port: object
) -> tuple[Sequence[dict[str, Any]] | None, LightningStore | None, str | None, int | None]:
    """The first four positional arguments, reordered when they follow the reference's ``(port, model_list,
    store, host)``: a port (or ``None``) first and a model list second."""
    port_first = isinstance(model_list, int) and not isinstance(model_list, bool)
    if not port_first and not (model_list is None and isinstance(store, (list, tuple))):
        return cast("Any", model_list), cast("Any", store), cast("Any", host), cast("Any", port)
    warn_at_caller(
        "LLMProxy(port, model_list, store, host) positionally is the reference's order; this LLMProxy's is "
        "(model_list, store, host, port): pass them by keyword (port=..., model_list=..., store=...)",
        DeprecationWarning,
    )
    return cast("Any", store), cast("Any", host), cast("Any", port), cast("Any", model_list)


def apply_litellm_settings(litellm: Any, settings: Mapping[str, Any]) -> None:
    """``litellm.<name> = value`` for each setting; a list setting (``callbacks``...) is extended."""
    for name, value in settings.items():
        current = getattr(litellm, name, None)
        if isinstance(current, list) and isinstance(value, (list, tuple)):
            items = cast("list[Any]", current)
            items.extend(v for v in cast("Sequence[Any]", value) if v not in items)
        else:
            setattr(litellm, name, value)
