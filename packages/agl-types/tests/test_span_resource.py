"""A span made a span of an attempt names that attempt in its OpenTelemetry resource, as the reference's exported
spans do (issue 28)."""

from __future__ import annotations

from agl.types import OtelResource, Span, SpanCoreFields
from agl.types.semconv import LightningResourceAttributes as R


def test_from_item_names_the_rollout_attempt_and_sequence_in_the_resource() -> None:
    core = SpanCoreFields(name="step", attributes={"k": 1}, start_time=1.0, end_time=2.0)
    numbered = Span.from_item(core, rollout_id="ro-1", attempt_id="at-1", sequence_id=7)
    assert numbered.resource.attributes == {
        R.ROLLOUT_ID.value: "ro-1",
        R.ATTEMPT_ID.value: "at-1",
        R.SPAN_SEQUENCE_ID.value: 7,
    }
    placeholder = Span.from_item(core, rollout_id="ro-1", attempt_id="at-1")  # the store numbers it
    assert R.SPAN_SEQUENCE_ID.value not in placeholder.resource.attributes


def test_a_copied_span_gets_its_new_attempt_and_keeps_its_own_resource() -> None:
    original = Span.from_attributes(
        attributes={},
        rollout_id="ro-a",
        attempt_id="at-a",
        resource=OtelResource(attributes={"service.name": "x"}),
    )
    copy = Span.from_item(original, rollout_id="ro-b", attempt_id="at-b")
    assert copy.resource.attributes == {
        "service.name": "x",
        R.ROLLOUT_ID.value: "ro-b",
        R.ATTEMPT_ID.value: "at-b",
    }
    assert original.resource.attributes == {"service.name": "x"}
