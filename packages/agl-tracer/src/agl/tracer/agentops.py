"""``AgentOpsTracer``: an ``OtelTracer`` on AgentOps' tracer provider (extra ``agentops``).

AgentOps' decorators (``@agentops.agent``, ``@operation``...) and each trace context's AgentOps trace record
into AgentOps' global provider, where this tracer's ``LightningSpanProcessor`` collects them for the store.

Local only by default: AgentOps is initialised without any exporter, metric reader or authentication call, and
its endpoints point at 127.0.0.1, so nothing is sent to AgentOps' hosted service. Pass
``enable_agentops_service=True`` (or set ``AGL_AGENTOPS_SERVICE=1``) to use the service with your own
``AGENTOPS_API_KEY``.

AgentOps' own LLM auto-instrumentation (an import hook over ``builtins.__import__``) is left off; OpenAI calls
are recorded by agl's instrumentation, which also captures token ids.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import TYPE_CHECKING, Any

from agl.types.env import AGENTOPS_SERVICE
from agl.types.extras import requires_extra

from ._pipeline import TraceSession
from .otel import OtelTracer

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["LOCAL_AGENTOPS_ENDPOINT", "AgentOpsTracer"]

logger = logging.getLogger(__name__)

LOCAL_AGENTOPS_ENDPOINT = "http://127.0.0.1:9"
"""Where AgentOps' endpoints point in local mode (the discard port: nothing is ever sent there)."""

_LOCAL_API_KEY = "00000000-0000-0000-0000-000000000000"


def _import_agentops(module: str = "agentops") -> Any:
    """``agentops`` (or one of its modules). AgentOps is untyped: callers treat what it offers as ``Any``.

    AgentOps writes ``agentops.log`` into the working directory unless told otherwise; a worker's tracer should
    not litter the user's folder, so that is off unless ``AGENTOPS_LOGGING_TO_FILE`` says so.
    """
    os.environ.setdefault("AGENTOPS_LOGGING_TO_FILE", "False")
    with requires_extra("agl-tracer", "AgentOpsTracer"):
        return importlib.import_module(module)


def _no_auth_task(api_key: Any) -> None:
    """Stands in for AgentOps' authentication call in local mode (nothing to authenticate against)."""


def _local_setup_telemetry(
    service_name: str = "agentops",
    project_id: str | None = None,
    exporter_endpoint: str | None = None,
    metrics_endpoint: str | None = None,
    max_queue_size: int = 512,
    max_wait_time: int = 5000,
    export_flush_interval: int = 1000,
    jwt_provider: Any = None,
) -> tuple[Any, Any]:
    """AgentOps' ``setup_telemetry`` without exporters: a provider whose spans stay in this process."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource({"service.name": service_name, "agentops.project.id": project_id or "local"})
    provider = TracerProvider(resource=resource)
    trace.set_tracer_provider(provider)
    meter_provider = MeterProvider(resource=resource, metric_readers=[])
    metrics.set_meter_provider(meter_provider)
    return provider, meter_provider


def service_enabled_by_env() -> bool:
    return AGENTOPS_SERVICE.get()


class AgentOpsTracer(OtelTracer):
    """Trace with AgentOps, collecting its spans into the store.

    Args:
        agentops_managed: initialise AgentOps in :meth:`init_worker` unless the application already did.
        instrument_managed: record OpenAI calls with agl's instrumentation.
        enable_agentops_service: let AgentOps talk to its hosted service (off: everything stays local).
        **kwargs: ``record_openai_parse`` (see :class:`~agl.tracer.OtelTracer`) and the pipeline options of
            :class:`~agl.tracer.Tracer`.
    """

    tracer_name = "agentops"

    def __init__(
        self,
        *,
        agentops_managed: bool = True,
        instrument_managed: bool = True,
        enable_agentops_service: bool | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("use_global_provider", None)
        super().__init__(use_global_provider=True, instrument_openai=instrument_managed, **kwargs)
        self.agentops_managed = agentops_managed
        self.instrument_managed = instrument_managed
        self.enable_agentops_service = (
            service_enabled_by_env() if enable_agentops_service is None else enable_agentops_service
        )

    def init_worker(
        self, worker_id: int | str, store: LightningStore | None = None, *args: Any, **kwargs: Any
    ) -> None:
        """Initialise AgentOps (local only unless enabled) and collect from its provider."""
        agentops = _import_agentops()
        if self.agentops_managed and not agentops.get_client().initialized:
            self._init_agentops(agentops)
        if self._provider is None:
            provider = _import_agentops("agentops.sdk.core").tracer.provider
            if provider is None:
                raise RuntimeError(
                    "AgentOps is not initialised: call agentops.init(...) first or use AgentOpsTracer(agentops_managed=True)"
                )
            self._install_provider(provider)
        super().init_worker(worker_id, store, *args, **kwargs)

    def _init_agentops(self, agentops: Any) -> None:
        options: dict[str, Any] = {
            "auto_start_session": False,
            "instrument_llm_calls": False,
            "log_session_replay_url": False,
        }
        if self.enable_agentops_service:
            agentops.init(**options)
            return
        core = _import_agentops("agentops.sdk.core")
        client = agentops.get_client()
        original_setup = core.setup_telemetry
        # AgentOps has no switch for "no exporters" or "no auth call": swap in a local setup while it initialises.
        core.setup_telemetry = _local_setup_telemetry
        client._start_auth_task = _no_auth_task
        try:
            agentops.init(
                api_key=_LOCAL_API_KEY,
                endpoint=LOCAL_AGENTOPS_ENDPOINT,
                app_url=LOCAL_AGENTOPS_ENDPOINT,
                exporter_endpoint=LOCAL_AGENTOPS_ENDPOINT + "/v1/traces",
                env_data_opt_out=True,
                **options,
            )
        finally:
            core.setup_telemetry = original_setup
        logger.info("AgentOps initialised locally: nothing is sent to the AgentOps service")

    def _install_provider(self, provider: Any) -> None:
        from .otel import LightningSpanProcessor

        for processor in getattr(provider._active_span_processor, "_span_processors", ()):
            if isinstance(processor, LightningSpanProcessor) and processor.tracer is self:
                self._provider = provider
                self._processor = processor
                self._otel_tracer = provider.get_tracer("agl.tracer")
                return
        super()._install_provider(provider)

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """AgentOps owns its provider: leave it running."""
        self._provider = None
        self._otel_tracer = None
        self._processor = None

    def _on_session_start(self, session: TraceSession) -> Any:
        agentops = _import_agentops()

        try:
            session.backend_state = agentops.start_trace(trace_name=session.name or session.rollout_id)
        except Exception:  # AgentOps trouble must not stop the rollout: spans are still collected
            logger.exception("AgentOps could not start a trace for %s", session.rollout_id)
        return self._otel_tracer

    def _on_session_end(self, session: TraceSession, exc: BaseException | None) -> None:
        agentops = _import_agentops()

        trace = getattr(session, "backend_state", None)
        if trace is not None:
            agentops.end_trace(trace, end_state="Error" if exc is not None else "Success")

    def get_langchain_handler(self, tags: list[str] | None = None) -> Any:
        """AgentOps' LangChain callback handler."""
        langchain: Any = importlib.import_module("agentops.integration.callbacks.langchain")  # untyped
        return langchain.LangchainCallbackHandler(tags=tags)

    get_langchain_callback_handler = get_langchain_handler
