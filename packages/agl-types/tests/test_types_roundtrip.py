"""Every model survives a JSON round trip; validation errors say which field and what is allowed."""

from __future__ import annotations

import collections.abc
import inspect
from typing import Any

import agl.types
import pytest
from agl.testing.strategies import EVERY_MODEL, resources_updates, spans
from agl.types import (
    LLM,
    Attempt,
    AttemptedRollout,
    PaginatedResult,
    PromptTemplate,
    ProxyLLM,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    Span,
    SpanCoreFields,
    normalize_timestamp,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError


def test_every_public_model_has_a_strategy() -> None:
    models = {
        name
        for name in agl.types.__all__
        if inspect.isclass(obj := getattr(agl.types, name)) and issubclass(obj, BaseModel)
    }
    models.discard("PaginatedResult")  # generic: covered as PaginatedResult[Rollout]
    assert models <= set(EVERY_MODEL), f"add strategies for {sorted(models - set(EVERY_MODEL))}"


@pytest.mark.parametrize("name", sorted(EVERY_MODEL))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_json_round_trip(name: str, data: st.DataObject) -> None:
    model = data.draw(EVERY_MODEL[name])
    cls = type(model)
    assert cls.model_validate_json(model.model_dump_json()) == model
    assert cls.model_validate(model.model_dump()) == model


@settings(max_examples=40, deadline=None)
@given(update=resources_updates())
def test_resource_kinds_survive_the_round_trip(update: ResourcesUpdate) -> None:
    back = ResourcesUpdate.model_validate_json(update.model_dump_json())
    assert {k: type(v) for k, v in back.resources.items()} == {
        k: type(v) for k, v in update.resources.items()
    }


@settings(max_examples=40, deadline=None)
@given(span=spans())
def test_span_extras_survive(span: Span) -> None:
    back = Span.model_validate_json(span.model_dump_json())
    assert back.model_extra == span.model_extra


def test_resource_union_is_discriminated() -> None:
    update = ResourcesUpdate.model_validate(
        {
            "resources_id": "rs-1",
            "create_time": 1.0,
            "update_time": 2.0,
            "version": 1,
            "resources": {
                "a": {"resource_type": "llm", "endpoint": "http://127.0.0.1:1", "model": "m"},
                "b": {"resource_type": "proxy_llm", "endpoint": "http://127.0.0.1:2/v1", "model": "m"},
                "c": {"resource_type": "prompt_template", "template": "hi", "engine": "jinja"},
            },
        }
    )
    assert [type(v) for v in update.resources.values()] == [LLM, ProxyLLM, PromptTemplate]
    with pytest.raises(ValidationError, match="resource_type"):
        ResourcesUpdate.model_validate(
            {"resources_id": "x", "create_time": 1, "update_time": 1, "version": 1, "resources": {"a": {}}}
        )


@pytest.mark.parametrize(
    ("build", "field", "allowed"),
    [
        (lambda: Rollout(rollout_id="r", start_time=0, status="done"), "status", "queuing"),  # pyright: ignore[reportArgumentType]
        (lambda: Rollout(rollout_id="r", start_time=0, mode="prod"), "mode", "train"),  # pyright: ignore[reportArgumentType]
        (
            lambda: Attempt(rollout_id="r", attempt_id="a", sequence_id=1, start_time=0, status="x"),  # pyright: ignore[reportArgumentType]
            "status",
            "timeout",
        ),
        (
            lambda: Attempt(rollout_id="r", attempt_id="a", sequence_id=0, start_time=0),
            "sequence_id",
            "greater",
        ),
        (lambda: RolloutConfig(max_attempts=0), "max_attempts", "greater"),
        (lambda: RolloutConfig(retry_condition=["cancelled"]), "retry_condition", "unresponsive"),  # pyright: ignore[reportArgumentType]
        (lambda: PromptTemplate(template="x", engine="mustache"), "engine", "jinja"),  # pyright: ignore[reportArgumentType]
    ],
)
def test_validation_errors_name_the_field_and_the_allowed_values(
    build: Any, field: str, allowed: str
) -> None:
    with pytest.raises(ValidationError) as info:
        build()
    message = str(info.value)
    assert field in message and allowed in message


def test_attempted_rollout_rejects_a_foreign_attempt() -> None:
    attempt = Attempt(rollout_id="other", attempt_id="a", sequence_id=1, start_time=0)
    with pytest.raises(ValidationError, match="does not match"):
        AttemptedRollout(rollout_id="r", start_time=0, attempt=attempt)


def test_paginated_result_is_a_sequence() -> None:
    page = PaginatedResult[int](items=[1, 2, 3], limit=3, offset=6, total=10)
    assert len(page) == 3 and list(page) == [1, 2, 3] and page[1] == 2 and page[1:] == [2, 3]
    assert "6:9 of 10" in repr(page)
    assert "6:end of 10" in repr(PaginatedResult[int](items=[], limit=-1, offset=6, total=10))


def test_paginated_result_is_a_collections_abc_sequence() -> None:
    """The reference's ``PaginatedResult`` derives from ``Sequence``: ``isinstance`` checks and its mixins hold."""
    page = PaginatedResult[str](items=["a", "b", "a"], limit=-1, offset=0, total=3)
    assert isinstance(page, collections.abc.Sequence)
    assert page.index("b") == 1 and page.count("a") == 2
    assert "b" in page and "z" not in page
    assert list(reversed(page)) == ["a", "b", "a"]
    with pytest.raises(ValueError):
        page.index("z")
    assert page == PaginatedResult[str](items=["a", "b", "a"], limit=-1, offset=0, total=3)  # still a model
    assert PaginatedResult[str].model_validate_json(page.model_dump_json()) == page


def test_timestamps_are_normalised_to_seconds() -> None:
    assert normalize_timestamp(None) is None
    assert normalize_timestamp(0) is None
    assert normalize_timestamp(1_700_000_000_123_000_000) == pytest.approx(1_700_000_000.123)
    assert normalize_timestamp(1_700_000_000.5) == 1_700_000_000.5


def test_span_from_attributes_and_core_fields() -> None:
    span = Span.from_attributes(attributes={"k": 1}, parent_id="f" * 16)
    assert (span.rollout_id, span.attempt_id, span.sequence_id) == ("", "", 0)
    assert len(span.trace_id) == 32 and len(span.span_id) == 16
    assert span.context is not None and span.context.span_id == span.span_id
    assert span.parent is not None and span.parent.span_id == "f" * 16
    assert span.status.status_code == "OK"
    core = SpanCoreFields(name="emit", attributes={"r": 0.5})
    made = Span.from_core_fields(core, rollout_id="ro", attempt_id="at", sequence_id=4)
    assert (made.name, made.rollout_id, made.sequence_id, made.attributes) == ("emit", "ro", 4, {"r": 0.5})
    assert made.start_time is not None


def test_span_from_opentelemetry() -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "t"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span("parent"),
        tracer.start_as_current_span("child", attributes={"ids": (1, 2), "s": "x"}) as child,
    ):
        child.add_event("tick", {"n": 1})
        child.set_status(Status(StatusCode.ERROR, "boom"))
    provider.shutdown()
    finished = {s.name: s for s in exporter.get_finished_spans()}
    span = Span.from_opentelemetry(finished["child"], "ro-1", "at-1", 7)
    parent = Span.from_opentelemetry(finished["parent"], "ro-1", "at-1", 6)
    assert span.parent_id == parent.span_id and parent.parent_id is None
    assert span.trace_id == parent.trace_id and len(span.trace_id) == 32
    assert span.attributes == {"ids": [1, 2], "s": "x"}
    assert span.status.status_code == "ERROR" and span.status.description == "boom"
    assert [e.name for e in span.events] == ["tick"] and span.events[0].attributes == {"n": 1}
    assert span.start_time is not None and span.start_time < 1e11  # seconds, not nanoseconds
    assert span.resource.attributes["service.name"] == "t"
    assert Span.model_validate_json(span.model_dump_json()) == span
