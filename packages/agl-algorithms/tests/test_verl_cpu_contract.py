"""What ``agl.algorithms.verl.cpu`` relies on in verl: fails loudly, naming the place, when an installed
verl changes one of them (the module was checked against ``VERL_VERSION_CHECKED``). Also the pieces of the
CPU adaptation that need no Ray: the platform, the backend string, trl, the registries, the config."""

from __future__ import annotations

import inspect
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from agl.testing.child import run_python

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

MODEL = Path(__file__).resolve().parents[3] / "apps" / "calc_tiny" / "model"


def test_installed_verl_is_the_checked_version_or_say_what_to_recheck() -> None:
    import verl
    from agl.algorithms.verl.cpu import VERL_VERSION_CHECKED

    assert verl.__version__ == VERL_VERSION_CHECKED, (
        f"verl {verl.__version__} is installed, agl.algorithms.verl.cpu was checked against "
        f"{VERL_VERSION_CHECKED}: recheck the five places its docstring lists and this file's tests, then "
        "bump VERL_VERSION_CHECKED"
    )


def test_the_platform_plugin_point_is_as_relied_on() -> None:
    from verl.plugin.platform import PlatformBase, PlatformRegistry, platform_manager

    source = inspect.getsource(platform_manager._detect_platform_name)
    assert 'os.environ.get("VERL_PLATFORM"' in source, "verl no longer picks the platform from VERL_PLATFORM"
    assert callable(PlatformRegistry.register)
    from agl.algorithms.verl.cpu import PlatformCPU

    missing = sorted(getattr(PlatformBase, "__abstractmethods__", set()) - set(vars(PlatformCPU)))
    assert not missing, f"verl's PlatformBase has new abstract methods PlatformCPU lacks: {missing}"
    import verl

    assert "VERL_USE_EXTERNAL_MODULES" in inspect.getsource(verl), "verl's module plug-in variable changed"


def test_the_backend_string_the_engine_code_builds_is_the_one_bridged() -> None:
    import verl.utils.distributed as distributed
    import verl.workers.engine_workers as workers

    source = inspect.getsource(distributed)
    assert 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in source
    worker_source = inspect.getsource(workers)
    assert "from verl.utils.distributed import initialize_global_process_group_ray" in worker_source
    assert "initialize_global_process_group_ray(timeout_second=None)" in worker_source


def test_the_engine_registry_reads_verl_engine_device() -> None:
    from verl.workers.engine.base import EngineRegistry

    assert 'os.getenv("VERL_ENGINE_DEVICE")' in inspect.getsource(EngineRegistry.get_engine_cls)
    import verl.workers.engine.fsdp.transformer_impl as fsdp

    source = inspect.getsource(fsdp)
    assert 'backend=["fsdp", "fsdp2"], device=["cuda", "npu"]' in source, (
        "the FSDP engine's registration changed: if it now covers cpu, drop VERL_ENGINE_DEVICE"
    )


def test_trl_is_read_through_is_trl_available() -> None:
    import verl.models.transformers.monkey_patch as monkey_patch

    source = inspect.getsource(monkey_patch)
    assert "from verl.utils.import_utils import is_trl_available" in source
    assert "AutoModelForCausalLMWithValueHead" in source


def test_the_rollout_registries_are_as_relied_on() -> None:
    from verl.workers.rollout import base, replica

    assert isinstance(base._ROLLOUT_REGISTRY, dict)
    assert ("vllm", "async") in base._ROLLOUT_REGISTRY
    assert callable(replica.RolloutReplicaRegistry.register)
    abstract = sorted(getattr(replica.RolloutReplica, "__abstractmethods__", set()))
    assert abstract == ["launch_servers"], f"RolloutReplica's abstract methods changed: {abstract}"
    abstract = sorted(getattr(base.BaseRollout, "__abstractmethods__", set()))
    assert abstract == ["release", "resume", "update_weights"], f"BaseRollout's abstract methods: {abstract}"
    import verl.workers.engine_workers as workers

    source = inspect.getsource(workers)
    assert "await self.rollout.update_weights(" in source and 'effective_mode != "naive"' in source


def test_in_a_verl_process_the_cpu_module_installs_everything() -> None:
    from agl.algorithms.verl.cpu import cpu_runtime_env

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, **cpu_runtime_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    code = (
        "import verl\n"
        "from verl.utils.device import get_device_name, get_device_id, get_torch_device\n"
        "from verl.utils.import_utils import is_trl_available\n"
        "from verl.workers.rollout.base import get_rollout_class\n"
        "from verl.workers.rollout.replica import get_rollout_replica_class\n"
        "import verl.utils.distributed as d\n"
        "print(get_device_name(), get_device_id(), get_torch_device().current_device())\n"
        "print(get_rollout_class('agl_local', 'async').__name__, get_rollout_replica_class('agl_local').__name__)\n"
        "print('trl', is_trl_available())\n"
        "import torch.distributed as dist\n"
        "d.initialize_global_process_group_ray()\n"
        "print('backend', dist.get_backend())\n"
    )
    out = run_python(code, env=env)
    assert "cpu cpu cpu" in out
    assert "AglLocalServerAdapter AglLocalReplica" in out
    assert "trl False" in out  # trl 1.x has no AutoModelForCausalLMWithValueHead
    assert "backend gloo" in out


def test_on_cuda_verls_processes_get_only_the_trl_bridge() -> None:
    from agl.algorithms import VERL
    from agl.algorithms.verl.cpu import verl_runtime_env

    config: Any = VERL({"actor_rollout_ref": {"model": {"path": str(MODEL)}}}).compose("t", "v")
    env = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert dict(env) == verl_runtime_env() and config.actor_rollout_ref.rollout.name == "vllm"
    code = (
        "import verl\n"
        "from verl.utils.import_utils import is_trl_available\n"
        "from verl.plugin.platform import PlatformRegistry\n"
        "print('trl', is_trl_available(), 'cpu' in PlatformRegistry.registered_names())\n"
    )
    out = run_python(code, env={**os.environ, **verl_runtime_env(), "VERL_PLATFORM": ""})
    assert "trl False False" in out


def test_cpu_config_composes_and_passes_verls_checks() -> None:
    from agl.algorithms import VERL

    algorithm = VERL(
        {"actor_rollout_ref": {"model": {"path": str(MODEL)}}, "ray_kwargs": {"ray_init": {"num_cpus": 2}}},
        device="cpu",
    )
    config: Any = algorithm.compose("t.parquet", "v.parquet")
    assert config.actor_rollout_ref.rollout.name == "agl_local"
    assert config.trainer.device == "cpu" and config.ray_kwargs.ray_init.num_gpus == 1
    env = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_PLATFORM == "cpu" and env.VERL_USE_EXTERNAL_MODULES == "agl.algorithms.verl.cpu"
    assert config.ray_kwargs.ray_init.num_cpus == 2  # the user's keys stay
    with pytest.raises(ValueError, match="device"):
        VERL({}, device="tpu")
