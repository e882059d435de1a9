"""Where each name of :mod:`agl.compat` lives: name -> (module, attribute), by the reference's area.

For the placeholders (:data:`LEGACY`), what to use instead.

Kept free of imports so that ``import agl.compat`` loads nothing else; ``agl.compat.__getattr__`` imports a name's
module the first time the name is asked for.
"""

from __future__ import annotations

__all__ = ["LEGACY", "NAMES"]


def _same(module: str, *names: str) -> dict[str, tuple[str, str]]:
    return {name: (module, name) for name in names}


_TYPES = {
    **_same(
        "agl.types",
        "Attempt",
        "AttemptStatus",
        "AttemptedRollout",
        "AttributeValue",
        "Attributes",
        "Dataset",
        "EnqueueRolloutRequest",
        "Event",
        "FilterField",
        "FilterOptions",
        "LLM",
        "Link",
        "NamedResources",
        "OtelResource",
        "PaginatedResult",
        "ParallelWorkerBase",
        "PromptTemplate",
        "ProxyLLM",
        "ResourceUnion",
        "ResourcesUpdate",
        "Rollout",
        "RolloutConfig",
        "RolloutMode",
        "RolloutStatus",
        "SortOptions",
        "Span",
        "SpanContext",
        "SpanCoreFields",
        "SpanRecordingContext",
        "StatusCode",
        "TaskInput",
        "TraceStatus",
        "Triplet",
        "Worker",
        "WorkerStatus",
    ),
    **_same(
        "agl.compat.shims",
        "Resource",
        "SpanAttributeNames",
        "SpanLike",
        "SpanNames",
        "TraceState",
    ),
}
"""``agentlightning.types``: the data model (``Hook`` and ``RolloutRawResult`` are the runner's)."""

_ENV = _same(
    "agl.types.env", "LightningEnvVar", "resolve_bool_env_var", "resolve_int_env_var", "resolve_str_env_var"
)
"""``agentlightning.env_var``."""

_SEMCONV = _same(
    "agl.types.semconv",
    "AGL_ANNOTATION",
    "AGL_EXCEPTION",
    "AGL_MESSAGE",
    "AGL_OBJECT",
    "AGL_OPERATION",
    "AGL_REWARD",
    "AGL_VIRTUAL",
    "LightningResourceAttributes",
    "LightningSpanAttributes",
    "LinkPydanticModel",
    "RewardPydanticModel",
)
"""``agentlightning.semconv``: span and attribute names."""

_STORE = {
    **_same(
        "agl.store",
        "InMemoryLightningStore",
        "LightningStore",
        "LightningStoreCapabilities",
        "LightningStoreClient",
        "LightningStoreServer",
        "LightningStoreStatistics",
    ),
    **_same("agl.compat.shims", "LightningStoreThreaded"),
}
"""``agentlightning.store``."""

_TRACER = _same(
    "agl.tracer",
    "AgentOpsTracer",
    "DummyTracer",
    "OtelTracer",
    "Tracer",
    "clear_active_tracer",
    "get_active_tracer",
    "set_active_tracer",
    # emitters (agentlightning.emitter, agentlightning.reward)
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "find_final_reward",
    "find_reward_spans",
    "get_message_value",
    "get_object_value",
    "get_reward_value",
    "get_rewards_from_span",
    "is_reward_span",
    "operation",
    "reward",
    # attribute helpers (agentlightning.utils.otel)
    "extract_links_from_attributes",
    "extract_tags_from_attributes",
    "filter_and_unflatten_attributes",
    "filter_attributes",
    "flatten_attributes",
    "make_link_attributes",
    "make_tag_attributes",
    "query_linked_spans",
    "sanitize_attributes",
    "unflatten_attributes",
)
"""``agentlightning.tracer``, ``.emitter`` and the attribute helpers of ``.utils.otel``."""

_OTEL = _same("agl.compat.otel", "full_qualified_name", "get_tracer", "get_tracer_provider")
"""The rest of ``agentlightning.utils.otel``."""

_PROXY = {
    **_same("agl.proxy", "LLMProxy"),
    **_same("agl.compat.shims", "ModelConfig", "PythonServerLauncherArgs"),
}
"""``agentlightning.llm_proxy`` and ``agentlightning.utils.server_launcher``."""

_ALGORITHMS = {
    **_same(
        "agl.algorithms",
        "APO",
        "VERL",
        "Algorithm",
        "Baseline",
        "FastAlgorithm",
        "algo",
        "batch_iter_over_dataset",
    ),
    **_same(
        "agl.algorithms.adapter",  # agentlightning.adapter
        "Adapter",
        "LlmProxyTraceToTriplet",
        "OpenAIMessages",
        "TraceAdapter",
        "TraceToMessages",
        "TraceToTripletBase",
        "TracerTraceToTriplet",
    ),
}
"""``agentlightning.algorithm`` and ``agentlightning.adapter``."""

_RUNNER = {
    **_same(
        "agl.runner",
        "Hook",
        "LitAgent",
        "LitAgentRunner",
        "RolloutRawResult",
        "Runner",
        "Trainer",
        "build_component",
        "llm_rollout",
        "prompt_rollout",
        "rollout",
        # agentlightning.execution
        "ClientServerExecutionStrategy",
        "ExecutionEvent",
        "ExecutionStrategy",
        "SharedMemoryExecutionStrategy",
    ),
    **_same("agl.compat.shims", "MultiprocessingEvent", "ThreadingEvent"),
}
"""``agentlightning.litagent``, ``.runner``, ``.trainer`` and ``.execution``."""

_UTILS = {
    **_same("agl.compat.logs", "configure_logger", "setup_logging", "setup_module_logging"),
    **_same(
        "agl.compat.metrics",
        "ConsoleMetricsBackend",
        "MetricsBackend",
        "MultiMetricsBackend",
        "PrometheusMetricsBackend",
    ),
}
"""``agentlightning.logging`` and ``agentlightning.utils.metrics``."""

_V01 = "the v0.1 server/client API is not rebuilt"

LEGACY: dict[str, str] = {
    "AgentLightningClient": f"{_V01}; runners talk to a LightningStoreClient (Trainer(store='http://...'))",
    "AgentLightningServer": f"{_V01}; serve a store with `agl store` or LightningStoreServer",
    "DevTaskLoader": f"{_V01}; run Trainer.dev(agent, train_dataset=[...]) on a list of tasks",
    "LegacyAgentRunner": f"{_V01}; use LitAgentRunner",
    "GenericResponse": f"{_V01}; the store's methods return typed results",
    "Task": f"{_V01}; rollouts are Rollout (its task is rollout.input)",
    "TaskIfAny": f"{_V01}; LightningStore.dequeue_rollout() returns an AttemptedRollout or None",
    "RolloutLegacy": f"{_V01}; use Rollout and the store's spans",
    "RolloutRawResultLegacy": f"{_V01}; use RolloutRawResult",
    "CollectionBasedLightningStore": "there are no collection-based stores; use InMemoryLightningStore or "
    "agl.store.SqlLightningStore (SQLite, PostgreSQL)",
    "OtelTraceAdapter": "adapters here take agl Spans: derive from TraceAdapter",
    "lightning_cli": "the config CLI helper is not rebuilt; use argparse (or jsonargparse) and pass the values "
    "to the constructors",
}
"""Names the reference still exports that have no equivalent here -> what to use instead.

They are placeholders (:mod:`agl.compat.legacy`, which offers this table as ``REPLACEMENTS``) that raise
``NotImplementedError`` with that text when used."""

NAMES: dict[str, tuple[str, str]] = {
    **_TYPES,
    **_ENV,
    **_SEMCONV,
    **_STORE,
    **_TRACER,
    **_OTEL,
    **_PROXY,
    **_ALGORITHMS,
    **_RUNNER,
    **_UTILS,
    **_same("agl.compat.legacy", *LEGACY),
}
"""Every name of :mod:`agl.compat` -> (module, attribute)."""
