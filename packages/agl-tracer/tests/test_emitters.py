"""Emitters and reward readers: validation rules (Hypothesis) and examples."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from agl.tracer import (
    OtelTracer,
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    find_final_reward,
    find_reward_spans,
    get_message_value,
    get_object_value,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
    make_link_attributes,
    make_tag_attributes,
    operation,
    unflatten_attributes,
)
from agl.types import Span, SpanCoreFields
from hypothesis import given
from hypothesis import strategies as st

finite = st.floats(allow_nan=False, allow_infinity=False)
non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
names = st.text(min_size=1, max_size=12)
non_numbers = st.one_of(
    st.text(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(), st.integers(), max_size=1),
)


def as_span(core: SpanCoreFields) -> Span:
    return Span.from_core_fields(core, rollout_id="ro-x", attempt_id="at-x", sequence_id=1)


# -- emit_reward ----------------------------------------------------------------------------------


@given(st.one_of(finite, st.integers(min_value=-(2**53), max_value=2**53), st.booleans()))
def test_a_scalar_reward_is_one_dimension_named_primary(value: Any) -> None:
    core = emit_reward(value, propagate=False)
    assert core.name == "agentlightning.annotation"
    assert core.status.status_code == "OK"
    rewards = get_rewards_from_span(as_span(core))
    assert [(r.name, r.value) for r in rewards] == [("primary", float(value))]
    assert get_reward_value(as_span(core)) == float(value)


@given(non_numbers)
def test_a_scalar_reward_that_is_not_a_number_is_a_type_error(value: Any) -> None:
    if isinstance(value, dict):
        return  # dicts are multi-dimensional rewards
    with pytest.raises(TypeError):
        emit_reward(value, propagate=False)


@given(non_finite)
def test_non_finite_rewards_are_rejected(value: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        emit_reward(value, propagate=False)
    with pytest.raises(ValueError, match="finite"):
        emit_reward({"a": value, "b": 1.0}, primary_key="b", propagate=False)


@given(st.dictionaries(names, finite, min_size=1, max_size=6), st.data())
def test_a_dict_reward_puts_the_primary_dimension_first(
    reward: dict[str, float], data: st.DataObject
) -> None:
    primary = data.draw(st.sampled_from(sorted(reward)))
    core = emit_reward(reward, primary_key=primary, propagate=False)
    dims = get_rewards_from_span(as_span(core))
    assert dims[0].name == primary and dims[0].value == reward[primary]
    rest = [k for k in reward if k != primary]
    assert [d.name for d in dims[1:]] == rest  # the others keep dict order
    assert get_reward_value(as_span(core)) == reward[primary]


@given(st.dictionaries(names, finite, min_size=1, max_size=4), st.one_of(st.none(), names))
def test_a_dict_reward_needs_an_existing_primary_key(reward: dict[str, float], key: str | None) -> None:
    if key is not None and key in reward:
        return
    with pytest.raises(ValueError, match="primary"):
        emit_reward(reward, primary_key=key, propagate=False)


@given(st.dictionaries(names, finite, min_size=1, max_size=4), non_numbers)
def test_dict_reward_values_must_be_numbers(reward: dict[str, float], bad: Any) -> None:
    key = next(iter(reward))
    with pytest.raises(ValueError):
        emit_reward({**reward, "bad!": bad}, primary_key=key, propagate=False)


def test_reward_extra_attributes_are_kept_but_cannot_fake_reward_keys() -> None:
    core = emit_reward(
        1.0,
        attributes={**make_link_attributes({"gen_ai.response.id": "r1"}), **make_tag_attributes(["t"])},
        propagate=False,
    )
    assert core.attributes["agentlightning.link.0.key_match"] == "gen_ai.response.id"
    assert core.attributes["agentlightning.tag.0"] == "t"
    with pytest.raises(ValueError, match="reward keys"):
        emit_reward(1.0, attributes={"agentlightning.reward.0.value": 9.0}, propagate=False)
    with pytest.raises(ValueError, match="primary_key"):
        emit_reward(1.0, primary_key="x", propagate=False)


# -- propagate and the active tracer --------------------------------------------------------------


@pytest.mark.parametrize(
    ("emit", "kind"),
    [
        (lambda: emit_reward(1.0), "annotation"),
        (lambda: emit_annotation({"a": 1}), "annotation"),
        (lambda: emit_message("m"), "message"),
        (lambda: emit_object({"a": 1}), "object"),
        (lambda: emit_exception(ValueError("x")), "exception"),
    ],
)
def test_emitters_need_an_active_tracer_unless_propagate_is_false(emit: Any, kind: str) -> None:
    # the message begins as the reference's does (code matches on it)
    with pytest.raises(RuntimeError, match=rf"^No active tracer found\. Cannot emit {kind} span\. "):
        emit()


def test_emitters_record_into_the_active_tracer() -> None:
    tracer = OtelTracer()
    tracer.init_worker(0)

    async def run() -> None:
        async with tracer.trace_context():
            emit_reward(1.0)
            emit_message("hello")
            emit_object([1, 2])
            emit_exception(KeyError("k"))
            emit_annotation({"a": {"b": [1, 2]}})

    asyncio.run(run())
    spans = tracer.get_last_trace()
    assert [s.name for s in spans] == [
        "agentlightning.annotation",
        "agentlightning.message",
        "agentlightning.object",
        "agentlightning.exception",
        "agentlightning.annotation",
    ]
    assert find_final_reward(spans) == 1.0
    assert find_reward_spans(spans) == spans[:1]
    assert get_message_value(spans[1]) == "hello"
    assert get_object_value(spans[2]) == [1, 2]
    assert spans[3].attributes["exception.type"] == "KeyError"
    assert spans[4].attributes["a.b"] == [1, 2]


# -- the other emitters ---------------------------------------------------------------------------


@given(st.one_of(st.integers(), st.booleans(), finite, st.text(), st.binary()))
def test_emit_object_round_trips_literals_and_bytes(value: Any) -> None:
    decoded = get_object_value(as_span(emit_object(value, propagate=False)))
    assert decoded == value and type(decoded) is type(value)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), finite, st.text()),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(), children, max_size=3)
    ),
    max_leaves=10,
)


@given(json_values)
def test_emit_object_round_trips_json(value: Any) -> None:
    if isinstance(value, (bool, int, float, str)):
        return  # literals are covered above
    assert get_object_value(as_span(emit_object(value, propagate=False))) == value


def test_emit_object_rejects_what_json_cannot_encode() -> None:
    with pytest.raises(RuntimeError, match="JSON"):
        emit_object(object(), propagate=False)
    with pytest.raises(RuntimeError, match="unknown object literal"):
        get_object_value(
            Span.from_attributes(
                attributes={"agentlightning.object.type": "complex", "agentlightning.object.literal": "1j"}
            )
        )
    with pytest.raises(RuntimeError):
        get_object_value(Span.from_attributes(attributes={"agentlightning.object.json": "{nope"}))


@given(st.one_of(st.integers(), st.none(), st.binary(), st.lists(st.text())))
def test_emit_message_takes_only_text(value: Any) -> None:
    with pytest.raises(TypeError):
        emit_message(value, propagate=False)


@given(st.text())
def test_emit_message_round_trips(text: str) -> None:
    assert get_message_value(as_span(emit_message(text, propagate=False))) == text


def test_get_message_value_rejects_non_text() -> None:
    with pytest.raises(TypeError):
        get_message_value(Span.from_attributes(attributes={"agentlightning.message.body": 3}))
    assert get_message_value(Span.from_attributes(attributes={})) is None


@given(st.one_of(st.text(), st.integers(), st.none()))
def test_emit_exception_takes_only_exceptions(value: Any) -> None:
    with pytest.raises(TypeError):
        emit_exception(value, propagate=False)


def test_emit_exception_records_otel_exception_attributes() -> None:
    try:
        raise ValueError("bad value")
    except ValueError as exc:
        core = emit_exception(exc, propagate=False)
    assert core.name == "agentlightning.exception"
    assert core.status.status_code == "OK"
    assert core.attributes["exception.type"] == "ValueError"
    assert core.attributes["exception.message"] == "bad value"
    assert core.attributes["exception.escaped"] is True
    assert "Traceback" in core.attributes["exception.stacktrace"]


primitive = st.one_of(st.text(), st.integers(min_value=-(2**62), max_value=2**62), finite, st.booleans())
annotation_values = st.recursive(
    st.one_of(
        primitive,
        st.lists(st.integers(), min_size=1, max_size=3),
        st.lists(st.text(), min_size=1, max_size=3),
    ),
    lambda children: st.dictionaries(
        st.text(alphabet="abc", min_size=1, max_size=3), children, min_size=1, max_size=3
    ),
    max_leaves=8,
)


@given(
    st.dictionaries(
        st.text(alphabet="xyz", min_size=1, max_size=3), annotation_values, min_size=1, max_size=3
    )
)
def test_emit_annotation_flattens_nested_values(annotation: dict[str, Any]) -> None:
    core = emit_annotation(annotation, propagate=False)
    assert core.name == "agentlightning.annotation"
    assert all(isinstance(v, (str, int, float, bool, list)) for v in core.attributes.values())
    assert unflatten_attributes(core.attributes) == annotation


@given(st.one_of(st.none(), st.builds(object), st.lists(st.none(), min_size=1)))
def test_emit_annotation_rejects_non_primitive_leaves(bad: Any) -> None:
    with pytest.raises(ValueError):
        emit_annotation({"k": bad}, propagate=False)


def test_emit_annotation_needs_a_dict() -> None:
    with pytest.raises(TypeError):
        emit_annotation([1, 2], propagate=False)  # pyright: ignore[reportArgumentType]


# -- readers --------------------------------------------------------------------------------------


def test_legacy_reward_formats_are_read_with_a_warning() -> None:
    agentops = Span.from_attributes(attributes={"agentops.task.output": '{"type": "reward", "value": 0.25}'})
    with pytest.warns(DeprecationWarning):
        assert get_reward_value(agentops) == 0.25
    v02 = Span.from_attributes(name="agentlightning.reward", attributes={"reward": 2})
    with pytest.warns(DeprecationWarning):
        assert get_reward_value(v02) == 2.0
    assert get_reward_value(Span.from_attributes(name="other", attributes={"reward": 2})) is None
    assert not is_reward_span(Span.from_attributes(attributes={}))


def test_find_final_reward_takes_the_last_reward_span() -> None:
    spans = [as_span(emit_reward(v, propagate=False)) for v in (1.0, 2.0)]
    spans.append(as_span(emit_message("after", propagate=False)))
    assert find_final_reward(spans) == 2.0
    assert find_final_reward([]) is None


# -- operation ------------------------------------------------------------------------------------


def test_operation_decorator_records_inputs_output_and_errors() -> None:
    tracer = OtelTracer()
    tracer.init_worker(0)

    @operation
    def add(a: int, *rest: int, scale: int = 1, offset: int = 5) -> dict[str, int]:
        return {"sum": (a + sum(rest)) * scale + offset - 5}

    @operation(name="custom", team="red")
    async def fail(x: str) -> None:
        raise KeyError(x)

    async def run() -> None:
        async with tracer.trace_context():
            assert add(1, 2, 3, scale=2) == {"sum": 12}
            with pytest.raises(KeyError):
                await fail("k")

    asyncio.run(run())
    ok, err = tracer.get_last_trace()
    assert ok.name == err.name == "agentlightning.operation"
    assert ok.attributes["agentlightning.operation.name"] == "add"
    assert ok.attributes["agentlightning.operation.input.a"] == 1
    assert ok.attributes["agentlightning.operation.input.rest"] == [2, 3]
    assert ok.attributes["agentlightning.operation.input.scale"] == 2
    assert ok.attributes["agentlightning.operation.input.offset"] == 5  # left at its default: recorded too
    assert ok.attributes["agentlightning.operation.output.sum"] == 12
    assert err.attributes["agentlightning.operation.name"] == "custom"
    assert err.attributes["team"] == "red"
    assert err.status.status_code == "ERROR"
    assert add(1) == {"sum": 1}  # outside a rollout the function still works


def test_operation_context_manager_rules() -> None:
    with operation(propagate=False, kind="tool") as op:
        op.set_input(1, 2, q="x")
        op.set_output({"answer": 42})
        with pytest.raises(RuntimeError):
            op.span()
    span = op.span()
    assert span.name == "agentlightning.operation"
    assert span.attributes["agentlightning.operation.input.args"] == [1, 2]
    assert span.attributes["agentlightning.operation.input.q"] == "x"
    assert span.attributes["agentlightning.operation.output.answer"] == 42
    assert span.attributes["kind"] == "tool"
    with pytest.raises(RuntimeError):
        op.set_output(1)
    with pytest.raises(ValueError):
        operation("my-span")  # pyright: ignore[reportArgumentType, reportCallIssue]
    with pytest.raises(ValueError):
        operation(name="a", operation_name="b")


def test_deprecated_reward_decorator_emits_numeric_results() -> None:
    from agl.tracer import reward

    with pytest.warns(DeprecationWarning):

        @reward
        def score(x: int) -> float:
            return x / 2

    with pytest.warns(DeprecationWarning):

        @reward
        async def not_a_number() -> str:
            return "n/a"

    tracer = OtelTracer()
    tracer.init_worker(0)

    async def run() -> None:
        async with tracer.trace_context():
            assert score(3) == 1.5
            assert await not_a_number() == "n/a"

    asyncio.run(run())
    assert [get_reward_value(s) for s in tracer.get_last_trace()] == [1.5]
