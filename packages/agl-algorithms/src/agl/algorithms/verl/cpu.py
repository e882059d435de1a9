"""VERL on CPU: every adaptation of verl that ``VERL(..., device="cpu")`` needs, in one place.

Checked against verl **0.9.1** (:data:`VERL_VERSION_CHECKED`); ``tests/test_verl_cpu_contract.py`` fails
loudly when an installed verl changes one of the places relied on here. verl's CPU gaps and what bridges
each (all through verl's own extension points where it has one):

1. **No ``cpu`` platform** (``verl/plugin/platform/`` has nvidia, npu, rocm): :class:`PlatformCPU`,
   registered with ``PlatformRegistry.register("cpu")`` and picked with ``VERL_PLATFORM=cpu``. Its device
   id is ``torch.device("cpu")`` (torch reads verl's integer ids as CUDA devices) and its device module
   answers verl's ``torch.cuda``-style calls on CPU. Ray still places workers on ``GPU`` resources
   (``ResourcePoolManager`` always asks for them): the run starts Ray with logical GPUs.
2. **The process-group backend string** ``cpu:gloo,{device}:{backend}`` (``verl/utils/distributed.py``)
   is ``cpu:gloo,cpu:gloo`` on CPU, which torch refuses: plain ``gloo``.
3. **The FSDP engine is registered for cuda and npu only** (``verl/workers/engine/fsdp/transformer_impl.py``):
   ``VERL_ENGINE_DEVICE=cuda`` makes verl's ``EngineRegistry`` pick that (device-neutral) engine class.
4. **trl**: verl's monkey patch imports ``trl``'s ``AutoModelForCausalLMWithValueHead`` whenever trl is
   installed; trl >= 1 has none (verl's ``fsdp`` extra pins trl 0.27; the workspace's dev group has trl >= 1.16).
   ``is_trl_available`` answers whether that class can be imported. This one applies on every device: VERL
   has its Ray processes import this module on CUDA too (:func:`verl_runtime_env`).
5. **No rollout backend on CPU** (verl's registry: vllm, sglang, trtllm): the ``agl_local`` rollout serves
   the model with agl's own :class:`~agl.algorithms.local.ModelServer` in a Ray actor (OpenAI chat with
   token ids and logprobs, tool calls), registered in ``_ROLLOUT_REGISTRY`` and
   ``RolloutReplicaRegistry``; verl's naive weight sync reaches it through the rollout adapter's
   ``update_weights`` (:mod:`.cpu_rollout`).

Every Ray process verl starts imports this module through ``VERL_USE_EXTERNAL_MODULES`` (verl's plug-in
point, read when ``verl`` is imported), see :func:`verl_runtime_env`; 1., 2., 3. and 5. apply only with
``VERL_PLATFORM=cpu``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Generator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from agl.types.env import read_env

__all__ = [
    "ROLLOUT_NAME",
    "VERL_VERSION_CHECKED",
    "PlatformCPU",
    "cpu_config",
    "cpu_runtime_env",
    "install",
    "verl_runtime_env",
]

logger = logging.getLogger(__name__)

VERL_VERSION_CHECKED = "0.9.1"
ROLLOUT_NAME = "agl_local"
PLATFORM_NAME = "cpu"


def _on_cpu_platform() -> bool:
    """Whether verl's ``VERL_PLATFORM`` asks for this CPU platform (in any case)."""
    return (read_env("VERL_PLATFORM") or "").lower() == PLATFORM_NAME


def verl_runtime_env() -> dict[str, str]:
    """The environment verl's Ray processes need on any device: they import this module (4.)."""
    return {"VERL_USE_EXTERNAL_MODULES": __name__}


def cpu_runtime_env() -> dict[str, str]:
    """The environment verl's Ray processes need on CPU (``ray_kwargs.ray_init.runtime_env.env_vars``)."""
    return {
        **verl_runtime_env(),
        "VERL_PLATFORM": PLATFORM_NAME,
        "VERL_ENGINE_DEVICE": "cuda",  # 3.: picks the FSDP engine class, which is device-neutral
    }


def cpu_config(n_workers: int = 1) -> dict[str, Any]:
    """The verl config overrides of a CPU run (merged under the user's own)."""
    return {
        "trainer": {"device": "cpu", "n_gpus_per_node": n_workers, "nnodes": 1},
        "actor_rollout_ref": {
            "model": {"use_remove_padding": False},  # the packed path compiles for half a minute on CPU
            "actor": {
                "strategy": "fsdp2",
                "fsdp_config": {"param_offload": False, "optimizer_offload": False},
            },
            "ref": {"strategy": "fsdp2"},
            "rollout": {
                "name": ROLLOUT_NAME,
                "free_cache_engine": False,
                "load_format": "auto",
                "checkpoint_engine": {"backend": "naive"},
                "engine_kwargs": {"vllm": {}},
            },
        },
        # logical resources: verl's actors (task runner, TransferQueue, agent-loop and reward workers) mostly
        # wait; on a 2-core machine Ray would otherwise never schedule them all
        "ray_kwargs": {
            "ray_init": {
                "num_cpus": 16,
                "num_gpus": n_workers,
                "runtime_env": {"env_vars": cpu_runtime_env()},
            }
        },
    }


# -- 1. the platform ---------------------------------------------------------------------------------


def _noop(*args: Any, **kwargs: Any) -> int:
    return 0


def _memory() -> tuple[int, int]:
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    free = os.sysconf("SC_AVPHYS_PAGES") * size
    return free, pages * size


class _CpuDeviceModule(ModuleType):
    """What verl calls on ``torch.cuda`` (``get_torch_device()``), answered on CPU: RNG state through
    torch's CPU generator, memory as the machine's, streams and caches as no-ops."""

    def __init__(self) -> None:
        super().__init__("agl_cpu_device")
        cpu: Any = torch
        self.get_rng_state: Any = cpu.get_rng_state
        self.set_rng_state: Any = cpu.set_rng_state
        self.manual_seed: Any = cpu.manual_seed
        self.manual_seed_all: Any = cpu.manual_seed

    @staticmethod
    def mem_get_info(*args: Any) -> tuple[int, int]:
        return _memory()

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> torch.device:
        return torch.device("cpu")

    @staticmethod
    def get_device_name(*args: Any) -> str:
        return "cpu"

    @staticmethod
    @contextmanager
    def stream(*args: Any) -> Generator[None]:
        yield

    def __getattr__(self, name: str) -> Any:
        found = getattr(torch.cpu, name, None)
        return found if found is not None else _noop


_DEVICE_MODULE = _CpuDeviceModule()


def _platform_base() -> type[Any]:
    from verl.plugin.platform import PlatformBase

    return PlatformBase


class PlatformCPU(_platform_base()):
    """verl's platform interface on CPU (1.)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return _on_cpu_platform()

    def current_device(self) -> Any:
        return torch.device("cpu")  # an int would be read as a CUDA device (FSDP device_id, model.to)

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        _DEVICE_MODULE.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        _DEVICE_MODULE.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str) -> Generator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"  # logical GPUs of the Ray cluster (ResourcePoolManager asks for GPUs)

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


# -- 2. and 4.: process groups, trl ------------------------------------------------------------------


def _patch_process_group() -> None:
    import verl.utils.distributed

    distributed: Any = verl.utils.distributed
    original: Callable[..., Any] = distributed.initialize_global_process_group_ray
    if getattr(original, "_agl_cpu", False):
        return

    def initialize_global_process_group_ray(timeout_second: Any = None, backend: Any = None) -> Any:
        if backend is None or str(backend).startswith("cpu:gloo,cpu:"):
            backend = "gloo"
        return original(timeout_second=timeout_second, backend=backend)

    initialize_global_process_group_ray._agl_cpu = True  # pyright: ignore[reportFunctionMemberAccess]  # marks the patch
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray


@functools.cache
def trl_value_head_available() -> bool:
    """Whether trl has the class verl's monkey patch imports (verl's own test: is trl installed)."""
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        return False
    for module in ("trl.experimental.ppo", "trl"):
        try:
            if hasattr(
                __import__(module, fromlist=["AutoModelForCausalLMWithValueHead"]),
                "AutoModelForCausalLMWithValueHead",
            ):
                return True
        except ImportError:
            continue
    return False


def _patch_trl() -> None:
    import sys

    import verl.utils.import_utils

    modules: list[Any] = [verl.utils.import_utils]
    modules += [sys.modules.get(n) for n in ("verl.models.transformers.monkey_patch", "verl.utils.model")]
    for module in modules:
        if module is not None:  # those importing it later bind this one
            module.is_trl_available = trl_value_head_available


# -- 5. the rollout registries ---------------------------------------------------------------------


def _register_rollout() -> None:
    from verl.workers.rollout import base, replica

    base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "agl.algorithms.verl.cpu_rollout.AglLocalServerAdapter"  # pyright: ignore[reportPrivateUsage]

    def load() -> type[Any]:
        from .cpu_rollout import AglLocalReplica

        return AglLocalReplica

    replica.RolloutReplicaRegistry.register(ROLLOUT_NAME, load)


_installed = False


def install() -> None:
    """Register the platform and the rollout, and apply the patches (idempotent). Runs on import when
    ``VERL_PLATFORM=cpu`` (verl's Ray processes, see :func:`cpu_runtime_env`)."""
    global _installed
    if _installed:
        return
    from verl.plugin.platform import PlatformRegistry

    PlatformRegistry.register(platform=PLATFORM_NAME)(PlatformCPU)
    _patch_process_group()
    _patch_trl()
    _register_rollout()
    _installed = True


_patch_trl()
if _on_cpu_platform():
    install()
