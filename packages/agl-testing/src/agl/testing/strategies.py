"""Hypothesis strategies for every agl.types model, reused by the property tests."""

from __future__ import annotations

from typing import Any

from agl.types import (
    ATTEMPT_STATUSES,
    LLM,
    ROLLOUT_STATUSES,
    Attempt,
    AttemptedRollout,
    AttemptQuery,
    EnqueueRolloutRequest,
    Event,
    Link,
    LinkPydanticModel,
    OtelResource,
    PaginatedResult,
    PromptTemplate,
    ProxyLLM,
    ResourcesQuery,
    ResourcesUpdate,
    RewardPydanticModel,
    Rollout,
    RolloutConfig,
    RolloutQuery,
    Span,
    SpanContext,
    SpanCoreFields,
    SpanQuery,
    StoreQuery,
    TraceStatus,
    Triplet,
    Worker,
    WorkerQuery,
)
from agl.types.query import MAX_PAGE, sort_fields
from hypothesis import strategies as st

text = st.text(max_size=12)
ids = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=16)
hex32 = st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)
hex16 = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)
finite = st.floats(allow_nan=False, allow_infinity=False)
times = st.floats(min_value=0, max_value=4e9, allow_nan=False)
opt_times = st.none() | times

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | finite | text
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
json_dicts = st.dictionaries(text, json_values, max_size=4)
attribute_values = (
    st.booleans()
    | st.integers(-(2**53), 2**53)
    | finite
    | text
    | st.lists(st.integers(-1000, 1000), max_size=3)
    | st.lists(text, max_size=3)
)
attributes = st.dictionaries(text, attribute_values, max_size=4)
metadata = st.none() | json_dicts

rollout_configs = st.builds(
    RolloutConfig,
    timeout_seconds=st.none() | st.floats(min_value=0.001, max_value=1e6),
    unresponsive_seconds=st.none() | st.floats(min_value=0.001, max_value=1e6),
    max_attempts=st.integers(1, 10),
    retry_condition=st.lists(st.sampled_from(ATTEMPT_STATUSES), max_size=3, unique=True),
)
attempts = st.builds(
    Attempt,
    rollout_id=ids,
    attempt_id=ids,
    sequence_id=st.integers(1, 100),
    start_time=times,
    end_time=opt_times,
    status=st.sampled_from(ATTEMPT_STATUSES),
    worker_id=st.none() | ids,
    last_heartbeat_time=opt_times,
    metadata=metadata,
)
modes = st.none() | st.sampled_from(["train", "val", "test"])


def _rollout_fields() -> dict[str, st.SearchStrategy[Any]]:
    return {
        "rollout_id": ids,
        "input": json_values,
        "start_time": times,
        "end_time": opt_times,
        "mode": modes,
        "resources_id": st.none() | ids,
        "status": st.sampled_from(ROLLOUT_STATUSES),
        "config": rollout_configs,
        "metadata": metadata,
    }


rollouts = st.builds(Rollout, **_rollout_fields())


@st.composite
def attempted_rollouts(draw: st.DrawFn) -> AttemptedRollout:
    fields = {name: draw(strategy) for name, strategy in _rollout_fields().items()}
    attempt = draw(attempts).model_copy(update={"rollout_id": fields["rollout_id"]})
    return AttemptedRollout(**fields, attempt=attempt)


enqueue_requests = st.builds(
    EnqueueRolloutRequest,
    input=json_values,
    mode=modes,
    resources_id=st.none() | ids,
    config=st.none() | rollout_configs,
    metadata=metadata,
)
workers = st.builds(
    Worker,
    worker_id=ids,
    status=st.sampled_from(["idle", "busy", "unknown"]),
    heartbeat_stats=metadata,
    last_heartbeat_time=opt_times,
    last_dequeue_time=opt_times,
    last_busy_time=opt_times,
    last_idle_time=opt_times,
    current_rollout_id=st.none() | ids,
    current_attempt_id=st.none() | ids,
)
triplets = st.builds(
    Triplet,
    prompt=json_values,
    response=json_values,
    reward=st.none() | finite,
    metadata=json_dicts,
)
span_contexts = st.builds(
    SpanContext,
    trace_id=hex32,
    span_id=hex16,
    is_remote=st.booleans(),
    trace_state=st.dictionaries(text, text, max_size=2),
)
trace_statuses = st.builds(
    TraceStatus, status_code=st.sampled_from(["UNSET", "OK", "ERROR"]), description=st.none() | text
)
events = st.builds(Event, name=text, attributes=attributes, timestamp=opt_times)
links = st.builds(Link, context=span_contexts, attributes=st.none() | attributes)
otel_resources = st.builds(OtelResource, attributes=attributes, schema_url=text)
span_core_fields = st.builds(
    SpanCoreFields,
    name=text,
    status=trace_statuses,
    attributes=attributes,
    start_time=opt_times,
    end_time=opt_times,
)


@st.composite
def spans(draw: st.DrawFn) -> Span:
    span = Span(
        rollout_id=draw(ids),
        attempt_id=draw(ids),
        sequence_id=draw(st.integers(0, 10_000)),
        trace_id=draw(hex32),
        span_id=draw(hex16),
        parent_id=draw(st.none() | hex16),
        name=draw(text),
        status=draw(trace_statuses),
        attributes=draw(attributes),
        events=draw(st.lists(events, max_size=2)),
        links=draw(st.lists(links, max_size=2)),
        start_time=draw(opt_times),
        end_time=draw(opt_times),
        context=draw(st.none() | span_contexts),
        parent=draw(st.none() | span_contexts),
        resource=draw(otel_resources),
        **draw(
            st.dictionaries(
                st.sampled_from(["kind", "instrumentation_scope", "dropped"]), json_values, max_size=2
            )
        ),
    )
    return span


llms = st.builds(
    LLM,
    endpoint=st.sampled_from(["http://127.0.0.1:8000/v1", "http://localhost:1", "https://h.example/api/"]),
    model=text,
    api_key=st.none() | text,
    sampling_parameters=json_dicts,
)
proxy_llms = st.builds(
    ProxyLLM,
    endpoint=st.sampled_from(["http://127.0.0.1:8000/v1", "http://127.0.0.1:9/"]),
    model=text,
    api_key=st.none() | text,
    sampling_parameters=json_dicts,
)
prompt_templates = st.builds(
    PromptTemplate, template=text, engine=st.sampled_from(["f-string", "jinja", "poml"])
)
resources = st.dictionaries(text, llms | proxy_llms | prompt_templates, max_size=3)


@st.composite
def resources_updates(draw: st.DrawFn) -> ResourcesUpdate:
    create = draw(times)
    return ResourcesUpdate(
        resources_id=draw(ids),
        create_time=create,
        update_time=create + draw(st.floats(0, 1e6)),
        version=draw(st.integers(1, 1000)),
        resources=draw(resources),
    )


rewards = st.builds(RewardPydanticModel, name=text, value=finite)
link_models = st.builds(LinkPydanticModel, key_match=text, value_match=text)


@st.composite
def paginated_rollouts(draw: st.DrawFn) -> PaginatedResult[Rollout]:
    items = draw(st.lists(rollouts, max_size=3))
    offset = draw(st.integers(0, 10))
    return PaginatedResult[Rollout](
        items=items, limit=draw(st.integers(-1, 10)), offset=offset, total=offset + len(items)
    )


_ids = st.text(min_size=1, max_size=8)


def _page(model: type[StoreQuery]) -> dict[str, st.SearchStrategy[Any]]:
    return {
        "sort_by": st.none() | st.sampled_from(sort_fields(model.row_model)),
        "sort_order": st.sampled_from(["asc", "desc"]),
        "limit": st.integers(-1, MAX_PAGE),
        "offset": st.integers(0, MAX_PAGE),
    }


def _query(model: type[StoreQuery], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Every field of ``model`` drawn: the filters (``None`` or a value), pooling, sort and page."""
    if "filter_logic" in model.model_fields:
        fields["filter_logic"] = st.sampled_from(["and", "or"])
    return st.builds(model, **fields, **(_page(model) if hasattr(model, "row_model") else {}))


store_queries = st.builds(StoreQuery, limit=st.integers(-1, 99), offset=st.integers(0, 99))
rollout_queries = _query(
    RolloutQuery,
    status_in=st.none() | st.lists(st.sampled_from(list(ROLLOUT_STATUSES))),
    rollout_id_in=st.none() | st.lists(_ids),
    rollout_id_contains=st.none() | _ids,
)
attempt_queries = _query(AttemptQuery, rollout_id=_ids)
resources_queries = _query(
    ResourcesQuery, resources_id=st.none() | _ids, resources_id_contains=st.none() | _ids
)
span_queries = _query(
    SpanQuery,
    rollout_id=_ids | st.lists(_ids, min_size=1),
    attempt_id=st.none() | st.just("latest") | _ids,
    trace_id=st.none() | _ids,
    span_id_contains=st.none() | _ids,
    name=st.none() | _ids,
    name_contains=st.none() | _ids,
)
worker_queries = _query(
    WorkerQuery,
    status_in=st.none() | st.lists(st.sampled_from(["idle", "busy", "unknown"])),
    worker_id_contains=st.none() | _ids,
)


EVERY_MODEL: dict[str, st.SearchStrategy[Any]] = {
    "RolloutConfig": rollout_configs,
    "Attempt": attempts,
    "Rollout": rollouts,
    "AttemptedRollout": attempted_rollouts(),
    "EnqueueRolloutRequest": enqueue_requests,
    "Worker": workers,
    "Triplet": triplets,
    "SpanContext": span_contexts,
    "TraceStatus": trace_statuses,
    "Event": events,
    "Link": links,
    "OtelResource": otel_resources,
    "SpanCoreFields": span_core_fields,
    "Span": spans(),
    "LLM": llms,
    "ProxyLLM": proxy_llms,
    "PromptTemplate": prompt_templates,
    "ResourcesUpdate": resources_updates(),
    "RewardPydanticModel": rewards,
    "LinkPydanticModel": link_models,
    "PaginatedResult[Rollout]": paginated_rollouts(),
    "StoreQuery": store_queries,
    "RolloutQuery": rollout_queries,
    "AttemptQuery": attempt_queries,
    "ResourcesQuery": resources_queries,
    "SpanQuery": span_queries,
    "WorkerQuery": worker_queries,
}
"""Model name → a strategy of instances. A test checks every public model is listed."""
