"""The reference's flat namespace: ``import agl.compat as agl`` where a program had ``import agentlightning as agl``.

Every name of ``agentlightning`` 0.3.0's top level is here, plus the names its examples import from its submodules
(``Hook``, ``AgentOpsTracer``, the adapters, ``APO``, ``VERL``, ``LLMProxy`` and ``ModelConfig``,
``LightningStoreThreaded``, ``get_tracer_provider``, the ``utils.metrics`` backends, the ``semconv`` names...), so::

    import agentlightning as agl                      ->  import agl.compat as agl
    from agentlightning.tracer.agentops import X      ->  from agl.compat import X

is the whole migration. Names are imported on first use (``import agl.compat`` itself imports nothing else), each
from its agl package (``agl.compat._names.NAMES`` says which); the few with no one-to-one home are built here (``logs``,
``metrics``, ``otel``, ``shims``), and the reference's v0.1 names without an equivalent are placeholders that
raise ``NotImplementedError`` naming the replacement when used (``legacy``). ``MIGRATING.md`` at the repository
root lists every deliberate difference.
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING
from typing import Any as _Any

from ._names import NAMES as _NAMES

if TYPE_CHECKING:
    from agl.algorithms import APO as APO
    from agl.algorithms import VERL as VERL
    from agl.algorithms import Algorithm as Algorithm
    from agl.algorithms import Baseline as Baseline
    from agl.algorithms import FastAlgorithm as FastAlgorithm
    from agl.algorithms import algo as algo
    from agl.algorithms import batch_iter_over_dataset as batch_iter_over_dataset
    from agl.algorithms.adapter import Adapter as Adapter
    from agl.algorithms.adapter import LlmProxyTraceToTriplet as LlmProxyTraceToTriplet
    from agl.algorithms.adapter import OpenAIMessages as OpenAIMessages
    from agl.algorithms.adapter import TraceAdapter as TraceAdapter
    from agl.algorithms.adapter import TracerTraceToTriplet as TracerTraceToTriplet
    from agl.algorithms.adapter import TraceToMessages as TraceToMessages
    from agl.algorithms.adapter import TraceToTripletBase as TraceToTripletBase
    from agl.proxy import LLMProxy as LLMProxy
    from agl.runner import ClientServerExecutionStrategy as ClientServerExecutionStrategy
    from agl.runner import ExecutionEvent as ExecutionEvent
    from agl.runner import ExecutionStrategy as ExecutionStrategy
    from agl.runner import Hook as Hook
    from agl.runner import LitAgent as LitAgent
    from agl.runner import LitAgentRunner as LitAgentRunner
    from agl.runner import RolloutRawResult as RolloutRawResult
    from agl.runner import Runner as Runner
    from agl.runner import SharedMemoryExecutionStrategy as SharedMemoryExecutionStrategy
    from agl.runner import Trainer as Trainer
    from agl.runner import build_component as build_component
    from agl.runner import llm_rollout as llm_rollout
    from agl.runner import prompt_rollout as prompt_rollout
    from agl.runner import rollout as rollout
    from agl.store import InMemoryLightningStore as InMemoryLightningStore
    from agl.store import LightningStore as LightningStore
    from agl.store import LightningStoreCapabilities as LightningStoreCapabilities
    from agl.store import LightningStoreClient as LightningStoreClient
    from agl.store import LightningStoreServer as LightningStoreServer
    from agl.store import LightningStoreStatistics as LightningStoreStatistics
    from agl.tracer import AgentOpsTracer as AgentOpsTracer
    from agl.tracer import DummyTracer as DummyTracer
    from agl.tracer import OtelTracer as OtelTracer
    from agl.tracer import Tracer as Tracer
    from agl.tracer import clear_active_tracer as clear_active_tracer
    from agl.tracer import emit_annotation as emit_annotation
    from agl.tracer import emit_exception as emit_exception
    from agl.tracer import emit_message as emit_message
    from agl.tracer import emit_object as emit_object
    from agl.tracer import emit_reward as emit_reward
    from agl.tracer import extract_links_from_attributes as extract_links_from_attributes
    from agl.tracer import extract_tags_from_attributes as extract_tags_from_attributes
    from agl.tracer import filter_and_unflatten_attributes as filter_and_unflatten_attributes
    from agl.tracer import filter_attributes as filter_attributes
    from agl.tracer import find_final_reward as find_final_reward
    from agl.tracer import find_reward_spans as find_reward_spans
    from agl.tracer import flatten_attributes as flatten_attributes
    from agl.tracer import get_active_tracer as get_active_tracer
    from agl.tracer import get_message_value as get_message_value
    from agl.tracer import get_object_value as get_object_value
    from agl.tracer import get_reward_value as get_reward_value
    from agl.tracer import get_rewards_from_span as get_rewards_from_span
    from agl.tracer import is_reward_span as is_reward_span
    from agl.tracer import make_link_attributes as make_link_attributes
    from agl.tracer import make_tag_attributes as make_tag_attributes
    from agl.tracer import operation as operation
    from agl.tracer import query_linked_spans as query_linked_spans
    from agl.tracer import reward as reward
    from agl.tracer import sanitize_attributes as sanitize_attributes
    from agl.tracer import set_active_tracer as set_active_tracer
    from agl.tracer import unflatten_attributes as unflatten_attributes
    from agl.types import LLM as LLM
    from agl.types import Attempt as Attempt
    from agl.types import AttemptedRollout as AttemptedRollout
    from agl.types import AttemptStatus as AttemptStatus
    from agl.types import Attributes as Attributes
    from agl.types import AttributeValue as AttributeValue
    from agl.types import Dataset as Dataset
    from agl.types import EnqueueRolloutRequest as EnqueueRolloutRequest
    from agl.types import Event as Event
    from agl.types import FilterField as FilterField
    from agl.types import FilterOptions as FilterOptions
    from agl.types import Link as Link
    from agl.types import NamedResources as NamedResources
    from agl.types import OtelResource as OtelResource
    from agl.types import PaginatedResult as PaginatedResult
    from agl.types import ParallelWorkerBase as ParallelWorkerBase
    from agl.types import PromptTemplate as PromptTemplate
    from agl.types import ProxyLLM as ProxyLLM
    from agl.types import ResourcesUpdate as ResourcesUpdate
    from agl.types import ResourceUnion as ResourceUnion
    from agl.types import Rollout as Rollout
    from agl.types import RolloutConfig as RolloutConfig
    from agl.types import RolloutMode as RolloutMode
    from agl.types import RolloutStatus as RolloutStatus
    from agl.types import SortOptions as SortOptions
    from agl.types import Span as Span
    from agl.types import SpanContext as SpanContext
    from agl.types import SpanCoreFields as SpanCoreFields
    from agl.types import SpanRecordingContext as SpanRecordingContext
    from agl.types import StatusCode as StatusCode
    from agl.types import TaskInput as TaskInput
    from agl.types import TraceStatus as TraceStatus
    from agl.types import Triplet as Triplet
    from agl.types import Worker as Worker
    from agl.types import WorkerStatus as WorkerStatus
    from agl.types.env import LightningEnvVar as LightningEnvVar
    from agl.types.env import resolve_bool_env_var as resolve_bool_env_var
    from agl.types.env import resolve_int_env_var as resolve_int_env_var
    from agl.types.env import resolve_str_env_var as resolve_str_env_var
    from agl.types.semconv import AGL_ANNOTATION as AGL_ANNOTATION
    from agl.types.semconv import AGL_EXCEPTION as AGL_EXCEPTION
    from agl.types.semconv import AGL_MESSAGE as AGL_MESSAGE
    from agl.types.semconv import AGL_OBJECT as AGL_OBJECT
    from agl.types.semconv import AGL_OPERATION as AGL_OPERATION
    from agl.types.semconv import AGL_REWARD as AGL_REWARD
    from agl.types.semconv import AGL_VIRTUAL as AGL_VIRTUAL
    from agl.types.semconv import LightningResourceAttributes as LightningResourceAttributes
    from agl.types.semconv import LightningSpanAttributes as LightningSpanAttributes
    from agl.types.semconv import LinkPydanticModel as LinkPydanticModel
    from agl.types.semconv import RewardPydanticModel as RewardPydanticModel

    from .legacy import AgentLightningClient as AgentLightningClient
    from .legacy import AgentLightningServer as AgentLightningServer
    from .legacy import CollectionBasedLightningStore as CollectionBasedLightningStore
    from .legacy import DevTaskLoader as DevTaskLoader
    from .legacy import GenericResponse as GenericResponse
    from .legacy import LegacyAgentRunner as LegacyAgentRunner
    from .legacy import OtelTraceAdapter as OtelTraceAdapter
    from .legacy import RolloutLegacy as RolloutLegacy
    from .legacy import RolloutRawResultLegacy as RolloutRawResultLegacy
    from .legacy import Task as Task
    from .legacy import TaskIfAny as TaskIfAny
    from .legacy import lightning_cli as lightning_cli
    from .logs import configure_logger as configure_logger
    from .logs import setup_logging as setup_logging
    from .logs import setup_module_logging as setup_module_logging
    from .metrics import ConsoleMetricsBackend as ConsoleMetricsBackend
    from .metrics import MetricsBackend as MetricsBackend
    from .metrics import MultiMetricsBackend as MultiMetricsBackend
    from .metrics import PrometheusMetricsBackend as PrometheusMetricsBackend
    from .otel import full_qualified_name as full_qualified_name
    from .otel import get_tracer as get_tracer
    from .otel import get_tracer_provider as get_tracer_provider
    from .shims import LightningStoreThreaded as LightningStoreThreaded
    from .shims import ModelConfig as ModelConfig
    from .shims import MultiprocessingEvent as MultiprocessingEvent
    from .shims import PythonServerLauncherArgs as PythonServerLauncherArgs
    from .shims import Resource as Resource
    from .shims import SpanAttributeNames as SpanAttributeNames
    from .shims import SpanLike as SpanLike
    from .shims import SpanNames as SpanNames
    from .shims import ThreadingEvent as ThreadingEvent
    from .shims import TraceState as TraceState

__version__ = "0.1.0"

# ``_names.NAMES`` is the one list of names; the imports above (``X as X``) re-export each to type checkers.
__all__ = sorted(_NAMES)  # pyright: ignore[reportUnsupportedDunderAll]  # derived, not a literal list


def __getattr__(name: str) -> _Any:
    """Import ``name`` from its home on first use, then keep it here."""
    try:
        module, attribute = _NAMES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Every public name, imported yet or not."""
    return sorted({*globals(), *_NAMES})
