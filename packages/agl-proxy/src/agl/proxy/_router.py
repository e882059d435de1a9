"""LiteLLM's Router, imported lazily: model selection and load balancing, and the LiteLLM call path."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from agl.types.narrow import as_dict
from agl.types.timeouts import wait_within

__all__ = ["DIRECT_PROVIDERS", "Deployment", "ModelRouter", "close_litellm_loop_resources", "import_litellm"]

DIRECT_PROVIDERS = frozenset(
    {"openai", "hosted_vllm", "custom_openai", "text-completion-openai", "litellm_proxy", "openai_like"}
)
"""LiteLLM providers that speak OpenAI's HTTP API as is: the proxy forwards to them directly."""

# litellm_params copied into forwarded requests as defaults (when the client did not set them).
_DEFAULT_PARAMS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
)


def import_litellm() -> Any:
    """Import LiteLLM without letting it fetch its model cost map from the network."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    return litellm


async def close_litellm_loop_resources() -> None:
    """Release what LiteLLM holds on the calling event loop: call it before that loop closes.

    LiteLLM caches its HTTP clients per event loop (the loop's token ends their cache key) and never closes
    them; a loop that closes with their connections open leaks them (ResourceWarning: unclosed transport).
    Its logging worker is stopped too (:func:`stop_litellm_logging_worker`).
    """
    await stop_litellm_logging_worker()
    litellm = sys.modules.get("litellm")
    cache: object = getattr(litellm, "in_memory_llm_clients_cache", None)
    raw: object = getattr(cache, "cache_dict", None)
    if not isinstance(raw, dict):
        return
    entries = cast("dict[object, object]", raw)  # LiteLLM's untyped cache: key -> client
    ttl = cast("dict[object, object]", getattr(cache, "ttl_dict", {}))
    from litellm.caching.evicted_client_closer import running_loop_token

    suffix = f"-{running_loop_token()}"
    for key in [key for key in list(entries) if isinstance(key, str) and key.endswith(suffix)]:
        client = entries.pop(key, None)
        ttl.pop(key, None)
        close: Any = getattr(client, "aclose", None) or getattr(client, "close", None)
        if close is None:
            continue
        with contextlib.suppress(Exception):  # a client already closed, or broken: nothing more to release
            result = close()
            if inspect.isawaitable(result):
                await result


async def stop_litellm_logging_worker(timeout: float = 5.0) -> None:
    """Stop LiteLLM's logging worker if it runs on the calling event loop: call it before that loop closes.

    LiteLLM hands every call's success/failure callbacks to one process-wide worker task, made on the loop of
    the first call. A loop that closes with that task pending destroys it mid-wait ("Task was destroyed but it
    is pending", an unraisable exception in tests). Queued callbacks run first; the worker starts again on the
    next call, on whichever loop makes it.
    """
    module = sys.modules.get("litellm.litellm_core_utils.logging_worker")
    if module is None:  # LiteLLM never logged a call in this process
        return
    worker: Any = getattr(module, "GLOBAL_LOGGING_WORKER", None)
    task: object = getattr(
        worker, "_worker_task", None
    )  # private, but LiteLLM says nowhere which loop it is on
    if not isinstance(task, asyncio.Task) or task.done() or task.get_loop() is not asyncio.get_running_loop():
        return
    with contextlib.suppress(asyncio.TimeoutError):
        await wait_within(worker.flush(), timeout)
    await worker.stop(timeout=timeout)


@dataclass(frozen=True)
class Deployment:
    """One backend chosen for a request."""

    model_name: str
    litellm_model: str
    provider: str
    backend_model: str
    api_base: str | None
    api_key: str | None
    extra_headers: dict[str, str]
    extra_body: dict[str, Any]
    defaults: dict[str, Any]

    @property
    def direct(self) -> bool:
        """Whether the proxy may forward raw OpenAI requests to this backend."""
        return self.provider in DIRECT_PROVIDERS and bool(self.api_base)

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> Deployment:
        params = dict(entry.get("litellm_params") or {})
        litellm_model = str(params.get("model") or "")
        provider, _, backend_model = litellm_model.partition("/")
        if not backend_model:
            provider, backend_model = str(params.get("custom_llm_provider") or "openai"), litellm_model
        api_base = params.get("api_base")
        return cls(
            model_name=str(entry.get("model_name")),
            litellm_model=litellm_model,
            provider=provider,
            backend_model=backend_model,
            api_base=str(api_base).rstrip("/") if api_base else None,
            api_key=params.get("api_key"),
            extra_headers=dict(params.get("extra_headers") or {}),
            extra_body=dict(params.get("extra_body") or {}),
            defaults={k: params[k] for k in _DEFAULT_PARAMS if params.get(k) is not None},
        )


class ModelRouter:
    """Wraps a LiteLLM ``Router`` built from a ``model_list`` (LiteLLM's format).

    LiteLLM (seconds of CPU to import) is loaded only when something may use it: a model name served by
    several deployments (the Router chooses), a backend the proxy cannot forward to directly, or
    ``direct_forwarding=False``. A proxy in front of OpenAI-compatible servers, one deployment a name,
    never imports it; :attr:`router` still builds it on first access.
    """

    def __init__(
        self,
        model_list: Sequence[dict[str, Any]],
        router_kwargs: dict[str, Any] | None = None,
        *,
        direct_forwarding: bool = True,
    ) -> None:
        validate_model_list(model_list)
        self.model_list = [dict(entry) for entry in model_list]
        self._router_kwargs = dict(router_kwargs or {})
        self._router: Any = None
        self.model_names = sorted({str(e["model_name"]) for e in self.model_list})
        self._by_id: dict[str, Deployment] = {}
        # A name served by one deployment leaves the Router nothing to choose: skip its selection
        # machinery (~0.2 ms of CPU per call) on the hot path.
        counts: dict[str, int] = {}
        for entry in self.model_list:
            counts[str(entry["model_name"])] = counts.get(str(entry["model_name"]), 0) + 1
        self._single = {
            str(e["model_name"]): Deployment.from_entry(e)
            for e in self.model_list
            if counts[str(e["model_name"])] == 1
        }
        all_direct = len(self._single) == len(self.model_list) and all(
            d.direct for d in self._single.values()
        )
        if not (direct_forwarding and all_direct):
            _ = self.router  # LiteLLM will serve or route calls: import it now, not on the first request

    @property
    def router(self) -> Any:
        """LiteLLM's ``Router`` over the model list (imported and built on first use)."""
        if self._router is None:
            litellm = import_litellm()
            self._router = litellm.Router(
                model_list=[_copy_entry(e) for e in self.model_list], **self._router_kwargs
            )
        return self._router

    async def select(self, model: str, request: dict[str, Any]) -> Deployment:
        """Pick a deployment for ``model`` with the Router's strategy. Unknown model → ``LookupError``."""
        if model not in self.model_names:
            raise LookupError(
                f"model {model!r} is not served by this proxy; known models: {', '.join(self.model_names)}"
            )
        single = self._single.get(model)
        if single is not None:
            return single
        chosen: Any = await self.router.select(model, {"messages": request.get("messages")})
        model_info: Any = chosen.get("model_info") or {}  # LiteLLM's untyped deployment entry
        key = str(model_info.get("id") or id(chosen))
        deployment = self._by_id.get(key)
        if deployment is None:
            deployment = self._by_id[key] = Deployment.from_entry(chosen)
        return deployment


def _copy_entry(entry: dict[str, Any]) -> dict[str, Any]:
    copied = dict(entry)
    copied["litellm_params"] = dict(entry.get("litellm_params") or {})
    return copied


def validate_model_list(model_list: Sequence[dict[str, Any]]) -> None:
    """Raise ``ValueError`` saying what is wrong with a LiteLLM ``model_list``."""
    if not isinstance(model_list, Sequence) or isinstance(model_list, (str, bytes)):  # pyright: ignore[reportUnnecessaryIsInstance]  # public API: checks untyped callers
        raise ValueError("model_list must be a list of {'model_name': ..., 'litellm_params': {...}} entries")
    for i, entry in enumerate(model_list):
        if not isinstance(entry, dict):  # pyright: ignore[reportUnnecessaryIsInstance]  # public API: checks untyped callers
            raise ValueError(f"model_list[{i}] must be a dict, got {type(entry).__name__}")
        if not isinstance(entry.get("model_name"), str) or not entry["model_name"]:
            raise ValueError(f"model_list[{i}] needs a non-empty 'model_name' (the name clients ask for)")
        params = as_dict(entry.get("litellm_params"))
        if params is None or not isinstance(params.get("model"), str):
            raise ValueError(
                f"model_list[{i}] needs 'litellm_params' with a 'model', e.g. "
                "{'model': 'hosted_vllm/Qwen2.5-0.5B', 'api_base': 'http://127.0.0.1:8000/v1'}"
            )
