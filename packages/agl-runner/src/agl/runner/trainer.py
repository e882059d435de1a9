"""``Trainer``: wires an algorithm, runners, a store, a tracer and an execution strategy, and runs them."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Sequence
from typing import Any

from agl.algorithms import Algorithm, Baseline, FastAlgorithm, SupportsAdapt, SupportsLLMProxy
from agl.store import LightningStore
from agl.tracer import Tracer
from agl.types import Dataset, NamedResources
from agl.types.caller import warn_at_caller
from agl.types.env import SERVER_HOST, SERVER_PORT

from ._bounds import check_at_least
from .build import ComponentSpec, build_component
from .events import ExecutionEvent
from .hooks import Hook
from .litagent import LitAgent
from .progress import ProgressMonitor
from .runner import LitAgentRunner, Runner
from .strategies import STRATEGY_REGISTRY, ExecutionStrategy
from .strategies.base import call_sync_in_daemon_thread, wait_event

__all__ = ["Trainer"]

logger = logging.getLogger(__name__)

TRACER_REGISTRY: dict[str, str] = {
    "otel": "agl.tracer.OtelTracer",
    "agentops": "agl.tracer.AgentOpsTracer",
}
STORE_REGISTRY: dict[str, str] = {
    "memory": "agl.store.InMemoryLightningStore",
    "sql": "agl.store.SqlLightningStore",
    "client": "agl.store.LightningStoreClient",
}


def _default_tracer() -> Any:
    from agl.tracer import OtelTracer

    return OtelTracer()


def _default_adapter() -> Any:
    """``TracerTraceToTriplet`` when the adapters are installed, else no adapter."""
    try:
        from agl.algorithms import TracerTraceToTriplet
    except ImportError:
        return None
    return TracerTraceToTriplet()


class Trainer:
    """Runs an algorithm and ``n_runners`` runners of an agent, connected through a store.

    Every component can be given as an instance, a class, a factory, an import path, or a dict with
    ``type`` plus keyword arguments (see :func:`build_component`).

    Args:
        algorithm: What drives training (``None``: only runners work, e.g. under ``AGL_CURRENT_ROLE=runner``).
        n_runners: Runner threads or processes (default 1; a strategy instance's own count wins).
        store: A store, or a URL that :func:`agl.store.open_store` opens (``memory``, ``sqlite:///…``,
            ``postgresql://…``, ``http://…``). Default ``InMemoryLightningStore``; with ``AGL_MANAGED_STORE=0`` a client of the store at
            ``AGL_SERVER_HOST:AGL_SERVER_PORT`` (e.g. ``agl store``).
        tracer: Default ``OtelTracer``.
        adapter: Given to the algorithm (default ``TracerTraceToTriplet`` when available).
        strategy: ``"cs"`` / ``"client_server"`` (default: runner processes, store served over HTTP) or
            ``"shm"`` / ``"shared_memory"`` (threads), or anything :func:`build_component` accepts.
        initial_resources: Resources the algorithm publishes first (LLM endpoints, prompt templates).
        hooks: A :class:`Hook` or several, called around each rollout.
        llm_proxy: An ``agl.proxy.LLMProxy`` (it gets the store injected).
        runner: Default ``LitAgentRunner(tracer, max_rollouts)``.
        max_rollouts: Per runner, stop after this many rollouts.
        port: Store server port for the client-server strategy (0: any free port).
        progress: Show progress (a bar in a terminal, log lines otherwise); default on.

    The reference's older keywords are accepted, each with a ``DeprecationWarning`` naming the new spelling:
    ``n_workers`` (``n_runners``), ``max_tasks`` (``max_rollouts``), ``triplet_exporter`` (``adapter``); when both
    spellings are given the new one wins, with a warning if they differ. ``dev=True`` only warns (call
    :meth:`dev` instead; :meth:`fit` still fits, as in the reference). ``daemon`` is kept as an attribute: runner
    processes always stop with the trainer (the reference's ``daemon=True``), so ``daemon=False`` warns that it
    has no effect. An ``llm_proxy`` dict without ``type`` builds an ``agl.proxy.LLMProxy``.
    """

    def __init__(
        self,
        *,
        algorithm: ComponentSpec[Algorithm] = None,
        n_runners: int | None = None,
        store: ComponentSpec[LightningStore] = None,
        tracer: ComponentSpec[Tracer] = None,
        adapter: ComponentSpec[SupportsAdapt] = None,
        strategy: ComponentSpec[ExecutionStrategy] = None,
        initial_resources: NamedResources | None = None,
        hooks: Hook | Sequence[Hook] | None = None,
        llm_proxy: ComponentSpec[SupportsLLMProxy] = None,
        runner: ComponentSpec[Runner[Any]] = None,
        max_rollouts: int | None = None,
        port: int | None = None,
        progress: bool | None = None,
        dev: bool = False,
        daemon: bool = True,
        n_workers: int | None = None,
        max_tasks: int | None = None,
        triplet_exporter: ComponentSpec[SupportsAdapt] = None,
    ) -> None:
        n_runners = _renamed("n_workers", n_workers, "n_runners", n_runners)
        max_rollouts = _renamed("max_tasks", max_tasks, "max_rollouts", max_rollouts)
        adapter = _renamed("triplet_exporter", triplet_exporter, "adapter", adapter)
        _check_dev_and_daemon(dev, daemon)
        self.daemon = daemon
        self.n_runners = 1 if n_runners is None else n_runners
        check_at_least("n_runners", self.n_runners, 1)
        self.max_rollouts = max_rollouts
        self.initial_resources = initial_resources
        self.port = port
        self.progress = True if progress is None else progress

        optional: dict[str, Any] = {"n_runners": self.n_runners}
        if port is not None:
            optional["server_port"] = port
        self.strategy: ExecutionStrategy = build_component(
            strategy,
            ExecutionStrategy,
            spec_name="strategy",
            default_factory=lambda: _build_default_strategy(optional),
            optional_defaults=optional,
            registry=STRATEGY_REGISTRY,
        )
        if port is not None and hasattr(self.strategy, "server_port"):
            self.strategy.server_port = port  # pyright: ignore[reportAttributeAccessIssue]
        self.n_runners = self.strategy.n_runners

        from agl.tracer import Tracer

        self.tracer: Tracer = build_component(
            tracer, Tracer, spec_name="tracer", default_factory=_default_tracer, registry=TRACER_REGISTRY
        )

        from agl.store import LightningStore, is_store_url, open_store

        if isinstance(store, str) and is_store_url(store):
            store = open_store(store)
        self.store: LightningStore = build_component(
            store,
            LightningStore,
            spec_name="store",
            default_factory=self._default_store,
            registry=STORE_REGISTRY,
        )
        self.adapter: SupportsAdapt | None = build_component(
            adapter,
            SupportsAdapt,
            spec_name="adapter",
            default_factory=_default_adapter,
            allow_none=True,
            dict_requires_type=False,
            dict_default_cls=_adapter_default_cls(),
        )
        self.algorithm: Algorithm | None = build_component(
            algorithm,
            Algorithm,
            spec_name="algorithm",
            allow_none=True,
        )
        self.llm_proxy: SupportsLLMProxy | None = build_component(
            llm_proxy,
            SupportsLLMProxy,
            spec_name="llm_proxy",
            allow_none=True,
            optional_defaults={"store": self.store},
            dict_requires_type=False,
            dict_default_cls=_llm_proxy_default_cls(),
        )
        self.runner: Runner[Any] = build_component(
            runner,
            Runner,
            spec_name="runner",
            default_factory=lambda: LitAgentRunner[Any](tracer=self.tracer, max_rollouts=max_rollouts),
            optional_defaults={"tracer": lambda: self.tracer, "max_rollouts": max_rollouts},
        )
        self.hooks: tuple[Hook, ...] = _checked_hooks(hooks)

    def _default_store(self) -> LightningStore:
        managed = getattr(self.strategy, "managed_store", True)
        role = getattr(self.strategy, "role", "both")
        from agl.store import open_store

        if not managed and role in ("algorithm", "runner"):
            return open_store(f"http://{SERVER_HOST.get()}:{SERVER_PORT.get()}")
        return open_store("memory")

    # -- running -------------------------------------------------------------------------------

    def fit(
        self,
        agent: LitAgent[Any],
        train_dataset: Dataset[Any] | None = None,
        *,
        val_dataset: Dataset[Any] | None = None,
    ) -> None:
        """Run the algorithm on the datasets with runners executing ``agent``; returns when the algorithm is done."""
        self._run(agent, self.algorithm, train_dataset, val_dataset)

    def dev(
        self,
        agent: LitAgent[Any],
        train_dataset: Dataset[Any] | None = None,
        *,
        val_dataset: Dataset[Any] | None = None,
    ) -> None:
        """Like :meth:`fit` for a quick check of an agent: the algorithm defaults to :class:`Baseline`.

        Only a :class:`FastAlgorithm` is accepted (``TypeError`` otherwise).
        """
        algorithm = self.algorithm if self.algorithm is not None else Baseline()
        if not isinstance(algorithm, FastAlgorithm):
            raise TypeError(
                f"Trainer.dev() runs only a FastAlgorithm (e.g. Baseline); {type(algorithm).__name__} is not one. "
                "Use fit() for it."
            )
        self._run(agent, algorithm, train_dataset, val_dataset)

    def _run(
        self,
        agent: LitAgent[Any],
        algorithm: Algorithm | None,
        train_dataset: Dataset[Any] | None,
        val_dataset: Dataset[Any] | None,
    ) -> None:
        _check_agent(agent)
        for name, dataset in (("train_dataset", train_dataset), ("val_dataset", val_dataset)):
            if isinstance(dataset, (str, bytes)):
                raise TypeError(
                    f"{name} is a string; pass a list (or any indexable dataset) of tasks. The v0.1 API that "
                    "took a server URL here is not supported"
                )
        agent.set_trainer(self)
        algorithm_bundle = _AlgorithmBundle(self, algorithm, train_dataset, val_dataset)
        runner_bundle = _RunnerBundle(self.runner, agent, self.hooks)
        self.strategy.execute(algorithm_bundle, runner_bundle, self.store)
        report = algorithm.training_data_report() if algorithm is not None else None
        if report is not None:
            logger.warning("%s", report)


def _renamed(old_name: str, old: Any, new_name: str, new: Any) -> Any:
    """The value of a keyword the reference renamed: ``new`` when given, else ``old`` (warning whenever ``old`` is)."""
    if old is None:
        return new
    if new is None:
        warn_at_caller(
            f"Trainer({old_name}=...) is deprecated: use {new_name}=... (same meaning)",
            DeprecationWarning,
        )
        return old
    if new is not old and new != old:
        warn_at_caller(
            f"Trainer({old_name}=...) is deprecated and ignored because {new_name}=... is given",
            DeprecationWarning,
        )
    return new


def _check_dev_and_daemon(dev: bool, daemon: bool) -> None:
    if dev:
        warn_at_caller(
            "Trainer(dev=True) is deprecated: call Trainer.dev(agent, ...) instead (fit() still fits)",
            DeprecationWarning,
        )
    if not daemon:
        warn_at_caller(
            "Trainer(daemon=False) has no effect here: runner processes always stop with the trainer",
            UserWarning,
        )


def _checked_hooks(hooks: Hook | Sequence[object] | None) -> tuple[Hook, ...]:
    """``hooks`` as a tuple; ``TypeError`` for anything that is not a :class:`Hook` (untyped callers)."""
    if hooks is None:
        return ()
    if isinstance(hooks, Hook):
        return (hooks,)
    checked: list[Hook] = []
    for hook in hooks:
        if not isinstance(hook, Hook):
            raise TypeError(f"hooks must be Hook instances, got {type(hook).__name__}")
        checked.append(hook)
    return tuple(checked)


def _check_agent(agent: object) -> None:
    """``TypeError`` unless ``agent`` is a :class:`LitAgent` (untyped callers pass plain functions)."""
    if not isinstance(agent, LitAgent):
        raise TypeError(
            f"agent must be a LitAgent (or a function decorated with @rollout), got {type(agent).__name__}"
        )


def _build_default_strategy(optional: dict[str, Any]) -> ExecutionStrategy:
    from .strategies import ClientServerExecutionStrategy

    return ClientServerExecutionStrategy(**optional)


def _llm_proxy_default_cls() -> type[Any] | None:
    """``agl.proxy.LLMProxy``: what an ``llm_proxy`` dict without ``type`` builds (as in the reference)."""
    try:
        from agl.proxy import LLMProxy
    except ImportError:  # pragma: no cover - agl-proxy comes with agl-algorithms
        return None
    return LLMProxy


def _adapter_default_cls() -> type[Any] | None:
    try:
        from agl.algorithms import TracerTraceToTriplet
    except ImportError:
        return None
    return TracerTraceToTriplet


class _AlgorithmBundle:
    """Runs in the algorithm's process: wires the algorithm to the store and runs it, with progress."""

    def __init__(
        self,
        trainer: Trainer,
        algorithm: Algorithm | None,
        train_dataset: Dataset[Any] | None,
        val_dataset: Dataset[Any] | None,
    ) -> None:
        self.trainer = trainer
        self.algorithm = algorithm
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset

    async def __call__(self, store: LightningStore, event: ExecutionEvent) -> None:
        trainer = self.trainer
        monitor_task = None
        if trainer.progress and self.algorithm is not None:
            monitor_task = asyncio.create_task(ProgressMonitor(store).run(), name="agl-progress")
        try:
            algorithm = self.algorithm
            if algorithm is None:
                logger.info("No algorithm: waiting for the stop signal")
                await wait_event(event)
                return
            algorithm.set_trainer(trainer)
            algorithm.set_store(store)
            if trainer.adapter is not None:
                algorithm.set_adapter(trainer.adapter)
            if trainer.initial_resources is not None:
                algorithm.set_initial_resources(trainer.initial_resources)
            if trainer.llm_proxy is not None:
                trainer.llm_proxy.set_store(store)
                algorithm.set_llm_proxy(trainer.llm_proxy)
            kwargs = {"train_dataset": self.train_dataset, "val_dataset": self.val_dataset}
            if algorithm.is_async():
                result = algorithm.run(**kwargs)
                if result is not None:
                    await result
            else:
                await call_sync_in_daemon_thread(algorithm.run, **kwargs)
        finally:
            if monitor_task is not None:
                monitor_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await monitor_task


class _RunnerBundle:
    """Runs in each runner thread or process: a private copy of the runner executes the agent until stopped."""

    def __init__(self, runner: Runner[Any], agent: LitAgent[Any], hooks: tuple[Hook, ...]) -> None:
        self.runner = runner
        self.agent = agent
        self.hooks = hooks

    async def __call__(self, store: LightningStore, worker_id: Any, event: ExecutionEvent) -> None:
        try:
            runner = copy.deepcopy(self.runner)
        except (TypeError, copy.Error) as exc:  # e.g. a tracer holding a lock
            logger.warning("Could not copy the runner (%s); runners share one instance", exc)
            runner = self.runner
        with runner.run_context(agent=self.agent, store=store, hooks=self.hooks, worker_id=worker_id):
            await runner.iter(event=event)
