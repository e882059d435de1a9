"""The LLM proxy of a :class:`~agl.algorithms.local.LocalGRPO` run: what it needs of one, and how it points
one at its model server."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from agl.store import LightningStore
from agl.types import LLM

from ..base import SupportsLLMProxy

__all__ = ["ServingProxy", "serving_proxy"]


@runtime_checkable
class ServingProxy(SupportsLLMProxy, Protocol):
    """What :class:`LocalGRPO` needs of an LLM proxy beyond :class:`SupportsLLMProxy`: to point it at the
    model server and to publish it as a resource (``agl.proxy.LLMProxy`` does both)."""

    def update_model_list(self, model_list: Sequence[dict[str, Any]], /) -> None: ...

    def as_resource(
        self, *, model: str | None = None, sampling_parameters: dict[str, Any] | None = None
    ) -> LLM:
        """The proxy as a resource for every attempt (a ``ProxyLLM``) serving ``model``."""
        ...


async def serving_proxy(
    given: SupportsLLMProxy | None, store: LightningStore, name: str, url: str, *, logprobs: bool = False
) -> ServingProxy:
    """The LLM proxy pointed at the model server at ``url`` (serving it as ``name``): a new one when none is
    ``given``. A given proxy that is running is restarted so that it serves the new model list (and stays
    running afterwards); any other is started and stopped around the run by :func:`running_proxy`.
    """
    model_list = [{"model_name": name, "litellm_params": {"model": f"hosted_vllm/{name}", "api_base": url}}]
    if given is None:
        from agl.proxy import LLMProxy

        return LLMProxy(model_list=model_list, store=store, request_logprobs=logprobs)
    if not isinstance(given, ServingProxy):
        raise TypeError(
            f"LocalGRPO points the LLM proxy at its model server and publishes it as a resource; "
            f"{type(given).__name__} lacks update_model_list() or as_resource(): give an agl.proxy.LLMProxy"
        )
    if logprobs and getattr(given, "request_logprobs", True) is False:
        raise ValueError(
            "asynchronous training corrects with the recorded logprobs: give LLMProxy(request_logprobs=True)"
        )
    given.update_model_list(model_list)
    given.set_store(store)
    if given.is_running():
        await given.stop()
        await given.start()
    return given
