"""The ``agl_local`` rollout of verl (:mod:`.cpu`, 5.): agl's ``ModelServer`` as verl's inference server.

- :class:`AglModelServerActor`: a Ray actor holding a :class:`~agl.algorithms.local.ModelServer` (OpenAI
  chat on ``127.0.0.1``, token ids, logprobs, tool calls), named per replica; sleep/wake, abort/resume and
  the KV-cache calls of verl's replica interface are no-ops (the server keeps its weights in memory).
- :class:`AglLocalReplica`: verl's ``RolloutReplica`` that starts that actor and reports its address.
- :class:`AglLocalServerAdapter`: verl's ``BaseRollout`` in each training worker: verl's naive weight sync
  calls its ``update_weights`` with the actor's full tensors, which it hands to the server actor.

Checked against verl 0.9.1 (see :mod:`.cpu`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import ray
from agl.types.env import CPU_SERVER_THREADS, read_env
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica

__all__ = ["AglLocalReplica", "AglLocalServerAdapter", "AglModelServerActor", "server_actor_name"]

logger = logging.getLogger(__name__)


def server_actor_name(replica_rank: int) -> str:
    return f"agl_local_server_{replica_rank}"


class AglModelServerActor:
    """agl's model server in a Ray process (see the module docstring)."""

    def __init__(self, model_path: str, served_model_name: str, threads: int = 2) -> None:
        import torch

        torch.set_num_threads(max(1, threads))
        self.model_path, self.served_model_name = model_path, served_model_name
        self.server: Any = None
        self.updates = 0

    def launch(self) -> str:
        """Start the server (once); its ``host:port``."""
        from agl.algorithms.local import ModelServer

        if self.server is None:
            self.server = ModelServer(self.model_path, served_model_name=self.served_model_name).start()
        return f"{self.server.host}:{self.server.port}"

    def update_weights(self, state: dict[str, Any], version: int | None = None) -> int:
        """Swap in the trainer's weights, served as ``version`` (verl's step; ``None``: the next); the
        server's new version."""
        version = int(self.server.update_weights(state, version))
        self.updates += 1
        return version

    def stats(self) -> dict[str, Any]:
        return {"version": int(self.server.version), "updates": self.updates}

    def shutdown(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    # verl's replica interface: nothing to release on CPU
    def wake_up(self) -> None: ...
    def sleep(self) -> None: ...
    def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    def resume_generation(self) -> None: ...
    def clear_kv_cache(self) -> None: ...
    def release_kv_cache(self) -> None: ...
    def resume_kv_cache(self) -> None: ...
    def start_profile(self, **kwargs: Any) -> None: ...
    def stop_profile(self) -> None: ...
    def wait_for_requests_to_drain(self) -> None: ...


class AglLocalReplica(RolloutReplica):
    """One ``agl_local`` server per replica (see the module docstring)."""

    async def launch_servers(self) -> None:
        model: Any = self.model_config
        path = str(model.get("path") if hasattr(model, "get") else model.path)
        actor_cls: Any = ray.remote(AglModelServerActor)
        server = actor_cls.options(
            name=server_actor_name(self.replica_rank), num_cpus=0, max_concurrency=16
        ).remote(path, path, threads=CPU_SERVER_THREADS.get())
        address = await server.launch.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = address
        logger.info("agl_local rollout replica %d serves %s at %s", self.replica_rank, path, address)

    def rollout_worker_use_gpu(self) -> bool:
        return False


class AglLocalServerAdapter(BaseRollout):
    """verl's rollout object in a training worker: forwards weight updates to the server actor."""

    def __init__(
        self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1, **kwargs: Any
    ) -> None:
        super().__init__(config, model_config, device_mesh)  # pyright: ignore[reportUnknownMemberType]  # verl's types
        rank = int(read_env("RANK") or "0")  # torch.distributed's rank of this worker
        world = max(
            1,
            int(self.config.tensor_model_parallel_size)
            * int(self.config.data_parallel_size)
            * int(self.config.pipeline_model_parallel_size),
        )
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % world
        self.sleep_level = 1
        self._server: Any = None

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(
        self, weights: Iterable[Any], wire_format: str = "named_tensors", **kwargs: Any
    ) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the agl_local rollout takes full named tensors, not {wire_format!r}")
        state: dict[str, Any] = {}
        for name, tensor in weights:  # every rank consumes the generator: FSDP gathers collectively
            full: Any = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
            state[str(name)] = full.detach().to("cpu").clone()
        if self.rollout_rank != 0:
            return
        if self._server is None:
            cluster: Any = ray
            self._server = cluster.get_actor(server_actor_name(self.replica_rank))
        # verl's step names the version, so the answers' fingerprints (agl-local-v<step>) tell the bridge which
        # weights served each call, across a resume too
        steps = kwargs.get("global_steps")
        version = await self._server.update_weights.remote(state, None if steps is None else int(steps))
        logger.info("agl_local rollout: %d tensors pushed, server version %s", len(state), version)
