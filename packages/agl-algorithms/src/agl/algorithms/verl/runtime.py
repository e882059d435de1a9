"""What the verl-side pieces (agent loop, trainer hook) share in one process: the store, the adapter and the
LLM proxy in front of vLLM.

In a verl run these live in Ray processes, built from the config's ``agentlightning`` block
(``store_url``: the HTTP store the main process serves). Tests and single-process uses install their own
with :func:`set_runtime`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from agl.types import NamedResources

__all__ = ["AglRuntime", "BackendPublisher", "get_runtime", "set_runtime", "vllm_model_list"]

logger = logging.getLogger(__name__)

LLM_RESOURCE = "main_llm"


def vllm_model_list(addresses: list[str], model_name: str) -> list[dict[str, Any]]:
    """One LiteLLM deployment per vLLM replica (``host:port`` or a URL), all under ``model_name``."""
    if not addresses:
        raise ValueError("verl reported no vLLM server addresses: is the rollout engine up?")
    out: list[dict[str, Any]] = []
    for address in addresses:
        base = address if address.startswith(("http://", "https://")) else f"http://{address}"
        base = base.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        out.append(
            {
                "model_name": model_name,
                "litellm_params": {"model": f"hosted_vllm/{model_name}", "api_base": base},
            }
        )
    return out


@dataclass
class BackendPublisher:
    """Points the LLM proxy at vLLM's replicas and publishes ``main_llm`` (a ``ProxyLLM``) to the store.

    Args:
        store: the store the runners read resources from.
        proxy: the LLM proxy (an ``agl.proxy.LLMProxy``); created on first use when ``None`` (asking the
            backends for logprobs, which verl's ``calculate_log_probs`` needs).
        sampling: sampling parameters of the training resource (``temperature``, ``max_tokens``).
        val_sampling: those of the validation resource.
    """

    store: Any
    proxy: Any = None
    proxy_host: str = "127.0.0.1"
    proxy_port: int | None = None
    sampling: dict[str, Any] = field(default_factory=dict[str, Any])
    val_sampling: dict[str, Any] = field(default_factory=dict[str, Any])
    model_name: str | None = None
    published: list[str] = field(default_factory=list[str])

    async def set_backends(self, addresses: list[str], model_name: str) -> None:
        """Replace the proxy's backends with the replicas and (re)start it."""
        model_list = vllm_model_list(addresses, model_name)
        if self.proxy is None:
            from agl.proxy import LLMProxy

            # verl trains with calculate_log_probs: the spans must carry the sampled tokens' logprobs
            self.proxy = LLMProxy(
                model_list=model_list,
                store=self.store,
                host=self.proxy_host,
                port=self.proxy_port,
                request_logprobs=True,
            )
        else:
            self.proxy.settings.request_logprobs = True
            self.proxy.update_model_list(model_list)
            if self.proxy.get_store() is None:
                self.proxy.set_store(self.store)
            if self.proxy.is_running():
                await self.proxy.stop()
        await self.proxy.start()
        self.model_name = model_name
        logger.info(
            "LLM proxy at %s serves %s from %s", self.proxy.endpoint, model_name, ", ".join(addresses)
        )

    async def publish(self, validation: bool = False) -> str:
        """Publish ``main_llm`` with the training (or validation) sampling parameters; its resources id."""
        if self.proxy is None or self.model_name is None:
            raise RuntimeError("BackendPublisher.publish() before set_backends(): no vLLM backends yet")
        params = dict(self.val_sampling if validation else self.sampling)
        resources: NamedResources = {
            LLM_RESOURCE: self.proxy.as_resource(model=self.model_name, sampling_parameters=params)
        }
        update = await self.store.add_resources(resources)
        self.published.append(update.resources_id)
        return update.resources_id

    async def close(self) -> None:
        if self.proxy is not None and self.proxy.is_running():
            await self.proxy.stop()


@dataclass
class AglRuntime:
    """The store, the adapter and the publisher one process uses (see the module docstring)."""

    store: Any
    adapter: Any = None
    publisher: BackendPublisher | None = None

    def get_adapter(self) -> Any:
        if self.adapter is None:
            from ..adapter import LlmProxyTraceToTriplet

            self.adapter = LlmProxyTraceToTriplet()
        return self.adapter


_lock = threading.Lock()
_runtime: AglRuntime | None = None


def set_runtime(runtime: AglRuntime | None) -> None:
    """Install (or with ``None`` remove) this process's runtime."""
    global _runtime
    with _lock:
        _runtime = runtime


def get_runtime(agl_config: Any = None) -> AglRuntime:
    """This process's runtime; built from ``agl_config`` (the ``agentlightning`` block) on first use."""
    global _runtime
    with _lock:
        if _runtime is not None:
            return _runtime
        url = None if agl_config is None else agl_config.get("store_url")
        if not url or agl_config is None:
            raise RuntimeError(
                "no store for the verl bridge: agentlightning.store_url is unset (VERL.run() sets it) and "
                "no runtime was installed with agl.algorithms.verl.runtime.set_runtime()"
            )
        from agl.store import LightningStoreClient

        store = LightningStoreClient(str(url))
        proxy_cfg: Any = agl_config.get("proxy") or {}
        publisher = BackendPublisher(
            store, proxy_host=str(proxy_cfg.get("host") or "127.0.0.1"), proxy_port=proxy_cfg.get("port")
        )
        _runtime = AglRuntime(store=store, publisher=publisher)
        return _runtime


_bg_loop: asyncio.AbstractEventLoop | None = None


def run_sync(coro: Any, timeout: float | None = 600.0) -> Any:
    """Run a coroutine from synchronous code (verl's trainer hooks) on this process's background loop.

    One long-lived loop, so what the coroutine starts (the LLM proxy and its span writer) keeps running
    after it returns.
    """
    global _bg_loop
    with _lock:
        if _bg_loop is None or _bg_loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agl-verl-loop", daemon=True).start()
            _bg_loop = loop
        loop = _bg_loop
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)
