"""The flat namespace: every reference name resolves, lazily; placeholders fail only when used."""

from __future__ import annotations

import sys
from pathlib import Path

import agl.compat as agl
import pytest
from agl.compat import legacy
from agl.compat._names import LEGACY, NAMES
from agl.testing.child import run_python

MIGRATING = Path(__file__).resolve().parents[3] / "MIGRATING.md"

# The expected values, written down from the reference rather than derived from ``_names.NAMES`` (the table under
# test): the names at agentlightning 0.3.0's top level (the union of its submodules' ``__all__`` it star-imports,
# plus its explicit imports), read from its source.
REFERENCE_TOP_LEVEL = [
    "APO",
    "Adapter",
    "AgentLightningClient",
    "AgentLightningServer",
    "AgentOpsTracer",
    "Algorithm",
    "Attempt",
    "AttemptStatus",
    "AttemptedRollout",
    "AttributeValue",
    "Attributes",
    "Baseline",
    "ClientServerExecutionStrategy",
    "CollectionBasedLightningStore",
    "Dataset",
    "DevTaskLoader",
    "DummyTracer",
    "EnqueueRolloutRequest",
    "Event",
    "ExecutionEvent",
    "ExecutionStrategy",
    "FastAlgorithm",
    "FilterField",
    "FilterOptions",
    "GenericResponse",
    "Hook",
    "InMemoryLightningStore",
    "LLM",
    "LLMProxy",
    "LegacyAgentRunner",
    "LightningEnvVar",
    "LightningStore",
    "LightningStoreCapabilities",
    "LightningStoreClient",
    "LightningStoreServer",
    "LightningStoreStatistics",
    "LightningStoreThreaded",
    "Link",
    "LitAgent",
    "LitAgentRunner",
    "LlmProxyTraceToTriplet",
    "MultiprocessingEvent",
    "NamedResources",
    "OtelResource",
    "OtelTraceAdapter",
    "OtelTracer",
    "PaginatedResult",
    "ParallelWorkerBase",
    "PromptTemplate",
    "ProxyLLM",
    "Resource",
    "ResourceUnion",
    "ResourcesUpdate",
    "Rollout",
    "RolloutConfig",
    "RolloutLegacy",
    "RolloutMode",
    "RolloutRawResult",
    "RolloutRawResultLegacy",
    "RolloutStatus",
    "Runner",
    "SharedMemoryExecutionStrategy",
    "SortOptions",
    "Span",
    "SpanAttributeNames",
    "SpanContext",
    "SpanCoreFields",
    "SpanLike",
    "SpanNames",
    "SpanRecordingContext",
    "StatusCode",
    "Task",
    "TaskIfAny",
    "TaskInput",
    "ThreadingEvent",
    "TraceAdapter",
    "TraceState",
    "TraceStatus",
    "TraceToMessages",
    "TraceToTripletBase",
    "Tracer",
    "TracerTraceToTriplet",
    "Trainer",
    "Triplet",
    "VERL",
    "Worker",
    "WorkerStatus",
    "algo",
    "build_component",
    "clear_active_tracer",
    "configure_logger",
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "find_final_reward",
    "find_reward_spans",
    "get_active_tracer",
    "get_message_value",
    "get_object_value",
    "get_reward_value",
    "get_rewards_from_span",
    "is_reward_span",
    "lightning_cli",
    "llm_rollout",
    "operation",
    "prompt_rollout",
    "resolve_bool_env_var",
    "resolve_int_env_var",
    "resolve_str_env_var",
    "reward",
    "rollout",
    "set_active_tracer",
    "setup_logging",
    "setup_module_logging",
]

# Names the reference's examples import from its submodules.
FROM_SUBMODULES = [
    "ModelConfig",
    "get_tracer_provider",
    "get_tracer",
    "make_tag_attributes",
    "make_link_attributes",
    "query_linked_spans",
    "extract_links_from_attributes",
    "extract_tags_from_attributes",
    "filter_and_unflatten_attributes",
    "MetricsBackend",
    "ConsoleMetricsBackend",
    "PrometheusMetricsBackend",
    "MultiMetricsBackend",
    "AGL_OPERATION",
    "LightningSpanAttributes",
    "batch_iter_over_dataset",
]


def test_every_reference_name_is_offered() -> None:
    assert len(REFERENCE_TOP_LEVEL) == 116
    missing = sorted(set(REFERENCE_TOP_LEVEL + FROM_SUBMODULES) - set(agl.__all__))
    assert not missing


@pytest.mark.parametrize("name", sorted(set(agl.__all__) - set(LEGACY)))
def test_every_name_resolves_to_its_home(name: str) -> None:
    value = getattr(agl, name)
    module, attribute = NAMES[name]
    assert value is getattr(sys.modules[module], attribute)


def test_all_dir_and_table_agree() -> None:
    assert sorted(agl.__all__) == sorted(NAMES) and len(set(agl.__all__)) == len(agl.__all__)
    assert set(agl.__all__) <= set(dir(agl))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = agl.NoSuchThing  # type: ignore[attr-defined]


def test_names_are_the_agl_objects_themselves() -> None:
    from agl.runner import Trainer, rollout
    from agl.tracer import emit_reward
    from agl.types import LLM

    assert (
        agl.Trainer is Trainer
        and agl.rollout is rollout
        and agl.emit_reward is emit_reward
        and agl.LLM is LLM
    )
    assert agl.Hook is __import__("agl.runner", fromlist=["Hook"]).Hook


def test_importing_loads_no_other_agl_package() -> None:
    out = run_python("import sys, agl.compat; print(sorted(m for m in sys.modules if m.startswith('agl')))")
    assert out.strip() == "['agl', 'agl.compat', 'agl.compat._names']"


def test_star_import_gives_every_name() -> None:
    out = run_python(
        "import warnings; warnings.simplefilter('error')\n"
        "from agl.compat import *\nfrom agl.compat import __all__ as names\n"
        "print(all(n in globals() for n in names), len(names))"
    )
    assert out.split() == ["True", str(len(agl.__all__))]


@pytest.mark.parametrize("name", LEGACY)
def test_placeholders_import_and_fail_when_used_naming_the_replacement(name: str) -> None:
    placeholder = getattr(agl, name)
    with pytest.raises(NotImplementedError, match=f"agentlightning.{name} has no equivalent in agl: .+"):
        placeholder()
    if isinstance(placeholder, type):
        with pytest.raises(NotImplementedError, match=name):
            type("Mine", (placeholder,), {})


def test_every_placeholder_says_what_to_use_instead_and_is_listed_in_migrating() -> None:
    assert set(LEGACY) == set(legacy.REPLACEMENTS) == set(legacy.__all__) - {"REPLACEMENTS"}
    assert len(LEGACY) == 12
    if not MIGRATING.is_file():
        pytest.skip("MIGRATING.md is the repository's, not the package's")
    placeholders = MIGRATING.read_text().split("## Placeholders", 1)[1].split("\n## ", 1)[0]
    listed = {line.split("`")[1] for line in placeholders.splitlines() if line.startswith("| `")}
    assert listed == set(LEGACY)


def test_the_server_placeholder_names_the_store_server() -> None:
    with pytest.raises(NotImplementedError, match="agl store"):
        agl.AgentLightningServer(host="0.0.0.0", port=9997)


def test_small_equivalents() -> None:
    assert agl.SpanNames.REWARD == agl.AGL_REWARD == "agentlightning.reward"
    assert agl.SpanAttributeNames.OBJECT.value == "object"
    assert isinstance(agl.PromptTemplate(template="hi {x}", engine="f-string"), agl.Resource)
    assert isinstance(agl.LLM(endpoint="http://x/v1", model="m"), agl.Resource)
    assert not isinstance("text", agl.Resource)
    event = agl.ThreadingEvent()
    assert not event.is_set()
    event.set()
    assert event.is_set() and event.wait(0)
    process_event = agl.MultiprocessingEvent()
    process_event.set()
    process_event.clear()
    assert not process_event.is_set()
    config: agl.ModelConfig = {"model_name": "m", "litellm_params": {"model": "hosted_vllm/m"}}
    assert config["model_name"] == "m"
