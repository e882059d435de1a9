"""``VERL``: GRPO/PPO of a Hugging Face model with verl 0.9 (FSDP + vLLM, Ray) on any agent the Trainer runs.

Constructing it needs nothing beyond this package; :meth:`VERL.run` needs the ``verl`` extra, vLLM and a
CUDA GPU, and says which is missing. With ``device="cpu"`` it runs verl's real trainer on CPU (FSDP on
gloo, agl's own model server as the rollout; :mod:`.cpu`): for debugging an agent, its config and rewards
on a laptop before renting GPUs.
"""

from __future__ import annotations

import importlib.util
import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agl.types import Dataset

from ..base import Algorithm

__all__ = ["VERL", "check_requirements"]

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "install the `verl` extra (`uv sync --extra verl`, or `pip install 'agl-algorithms[verl]'`) and, on the "
    "GPU machine, `vllm==0.24.0`"
)


DEVICES = ("cuda", "cpu")


def check_requirements(need_gpu: bool = True) -> str | None:
    """What is missing to run :class:`VERL` here (one line), or ``None`` when all is there."""
    missing = [
        m for m in ("verl", "ray", "transfer_queue", "tensordict") if importlib.util.find_spec(m) is None
    ]
    if missing:
        return f"VERL needs {', '.join(missing)}: {INSTALL_HINT}"
    if not need_gpu:
        return None
    if importlib.util.find_spec("vllm") is None:
        return f"VERL needs vLLM for its rollouts: {INSTALL_HINT}"
    import torch

    if not torch.cuda.is_available():
        return "VERL needs a CUDA GPU (torch.cuda.is_available() is False)"
    return None


def make_task_runner() -> Any:
    """verl's ``TaskRunnerV1`` as a Ray actor that first imports this package (registering ``agl_sync``)."""
    import ray
    from verl.trainer.main_ppo import TaskRunnerV1

    base: Any = TaskRunnerV1.__ray_actor_class__  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType, reportAttributeAccessIssue]

    class AglTaskRunner(base):
        def run(self, config: Any) -> Any:
            from . import bridge, trainer  # noqa: F401  # pyright: ignore[reportUnusedImport]  # imported to register the agent loop and the trainer with verl

            return super().run(config)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]  # a Ray actor class of verl's, untyped

    return ray.remote(num_cpus=1)(AglTaskRunner)


def _driver_main(config_yaml: str) -> None:
    """verl's ``run_ppo`` (Ray's driver) with the config given as YAML: the body of the driver process."""
    from omegaconf import OmegaConf
    from verl.trainer.main_ppo import run_ppo  # pyright: ignore[reportUnknownVariableType]  # verl leaves its parameters unannotated

    run_ppo(OmegaConf.create(config_yaml), task_runner_class=make_task_runner())


def run_driver(config: Any) -> None:
    """Run verl (``run_ppo``) in a fresh process started with ``spawn``, and wait for it.

    ``ray.init`` starts Ray's head processes with ``subprocess.Popen(preexec_fn=...)``, a plain fork that
    runs every ``os.register_at_fork`` handler in the child; in a process that already runs threads (the
    runners, the LLM proxy, OpenTelemetry's tracer provider, whose fork handler submits to a thread pool)
    that child can deadlock before it execs, and ``ray.init`` then waits forever. A spawned process has
    none of them.
    """
    import multiprocessing

    from omegaconf import OmegaConf

    context = multiprocessing.get_context("spawn")
    process = context.Process(target=_driver_main, args=(OmegaConf.to_yaml(config),), name="agl-verl-driver")
    process.start()
    try:
        process.join()
    finally:
        if process.is_alive():
            process.terminate()
            process.join(30)
    if process.exitcode != 0:
        raise RuntimeError(f"verl's driver process (run_ppo) failed with exit code {process.exitcode}")


class VERL(Algorithm):
    """verl's V1 trainer (synchronous, or asynchronous with ``max_staleness``) with the agent loop bridged to
    the store (package README).

    Args:
        config: verl configuration overrides (nested dict or DictConfig) on top of verl's ``ppo_trainer``
            and the project's defaults (:data:`~agl.algorithms.verl.config.AGL_DEFAULTS`), e.g.
            ``{"actor_rollout_ref": {"model": {"path": ...}}, "trainer": {"total_training_steps": 5}}``.
            The ``agentlightning`` block takes the reference's keys (``trace_aggregator.level`` ...) and
            ``credit.{mode, turn_discount}``.

        device: ``"cuda"`` (vLLM rollouts, the default) or ``"cpu"``: verl's trainer on CPU, FSDP on gloo
            and agl's model server as the rollout (:mod:`agl.algorithms.verl.cpu`); small models only.
        max_staleness: K > 0 trains asynchronously (verl's ``colocate_async``: generation goes on during the
            update; no sample is more than K weight versions old, :func:`~agl.algorithms.verl.config.apply_staleness`),
            as ``LocalGRPO``'s option of that name; 0 (the default) is verl's synchronous trainer. ``None``:
            ``agentlightning.max_staleness`` of ``config``.

    Datasets are sequences of JSON-serialisable task inputs. The served model is published to the store as
    ``main_llm`` (a ``ProxyLLM``); agents must call it (only one LLM is optimised).
    """

    def __init__(
        self,
        config: Mapping[str, Any] | Any | None = None,
        *,
        device: str = "cuda",
        max_staleness: int | None = None,
    ) -> None:
        if device not in DEVICES:
            raise ValueError(f"VERL device must be one of {', '.join(DEVICES)}, got {device!r}")
        if max_staleness is not None:
            from .config import check_staleness

            check_staleness(max_staleness, "VERL max_staleness")
        self.config: Mapping[str, Any] | Any = config if config is not None else {}
        self.device = device
        self.max_staleness = max_staleness
        self.composed: Any = None
        self._server: Any = None

    def compose(self, train_files: str | None = None, val_files: str | None = None) -> Any:
        """The full verl config this algorithm would run with (needs the ``verl`` extra)."""
        problem = check_requirements(need_gpu=False)
        if problem:
            raise ImportError(problem)
        from omegaconf import OmegaConf

        from .config import compose_config, merge, validate
        from .cpu import cpu_config, verl_runtime_env

        given: Any = self.config
        given = OmegaConf.to_container(given, resolve=False) if OmegaConf.is_config(given) else given
        device: dict[str, Any] = (
            cpu_config()
            if self.device == "cpu"
            else {"ray_kwargs": {"ray_init": {"runtime_env": {"env_vars": verl_runtime_env()}}}}
        )
        overrides = merge(device, given or {})
        if self.max_staleness is not None:
            overrides = merge(overrides, {"agentlightning": {"max_staleness": self.max_staleness}})
        config = compose_config(overrides)
        if train_files is not None:
            config.data.train_files = train_files
        if val_files is not None:
            config.data.val_files = val_files
        validate(config)
        return config

    def _store_url(self) -> str:
        store = self.get_store()
        address = getattr(store, "address", None)
        if isinstance(address, str) and address.startswith("http"):
            return address  # a LightningStoreClient
        from agl.store import LightningStoreServer

        if isinstance(store, LightningStoreServer):
            return store.endpoint
        # verl's processes reach the store over HTTP: serve it.
        self._server = LightningStoreServer(store, port=0)
        self._server.start()
        return self._server.endpoint

    def run(self, train_dataset: Dataset[Any] | None = None, val_dataset: Dataset[Any] | None = None) -> None:
        problem = check_requirements(need_gpu=self.device != "cpu")
        if problem:
            raise RuntimeError(problem)
        if train_dataset is None or len(train_dataset) == 0:
            raise ValueError("VERL needs a non-empty train_dataset")
        from .dataset import write_tasks

        workdir = Path(tempfile.mkdtemp(prefix="agl-verl-"))
        train = write_tasks(
            [train_dataset[i] for i in range(len(train_dataset))], workdir / "train.parquet", "train"
        )
        val_rows = [val_dataset[i] for i in range(len(val_dataset))] if val_dataset is not None else []
        val = write_tasks(val_rows, workdir / "val.parquet", "val") if val_rows else train
        try:
            config = self.compose(str(train), str(val))
            config.agentlightning.store_url = self._store_url()
            if not val_rows:
                config.trainer.val_before_train = False
                config.trainer.test_freq = -1
            self.composed = config
            run_driver(config)
        finally:
            if self._server is not None:
                self._server.stop()
                self._server = None
