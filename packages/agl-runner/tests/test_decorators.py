"""The @rollout family: signature rules, injection of resources, sync and async functions."""

from __future__ import annotations

import inspect
import keyword
import logging
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from agl.runner import FunctionalLitAgent, LitAgent, llm_rollout, prompt_rollout, rollout
from agl.types import LLM, Attempt, AttemptedRollout, PromptTemplate, ProxyLLM, Rollout
from hypothesis import example, given
from hypothesis import strategies as st

INJECTABLE = {"llm", "prompt_template", "rollout", "resources"}


def make_function(params: list[inspect.Parameter]) -> Any:
    def func(*args: Any, **kwargs: Any) -> None:
        return None

    func.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return func


names = st.sampled_from(["task", "llm", "prompt_template", "rollout", "resources", "extra", "other"])
param_specs = st.lists(st.tuples(names, st.booleans()), min_size=0, max_size=5, unique_by=lambda p: p[0])


def build_params(spec: list[tuple[str, bool]]) -> list[inspect.Parameter]:
    params: list[inspect.Parameter] = []
    seen_default = False
    for name, has_default in spec:
        seen_default = seen_default or has_default
        default = None if seen_default else inspect.Parameter.empty
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    return params


def rule_accepts(params: list[inspect.Parameter], kind: str) -> bool:
    """The documented rule: >= 2 parameters, the first named task, one named ``kind``, others injectable or defaulted."""
    if len(params) < 2 or params[0].name != "task":
        return False
    if kind not in {p.name for p in params}:
        return False
    return all(p.name in INJECTABLE or p.default is not inspect.Parameter.empty for p in params[1:])


def check_signature_rule(
    decorator: Callable[[Any], Any],
    spec: list[tuple[str, bool]],
    kinds: tuple[str, ...],
    error: type[Exception],
) -> None:
    """``decorator`` accepts a function of ``spec``'s signature exactly when ``rule_accepts`` it for one of
    ``kinds``; otherwise it raises ``error``."""
    params = build_params(spec)
    func = make_function(params)
    if any(rule_accepts(params, kind) for kind in kinds):
        assert isinstance(decorator(func), FunctionalLitAgent)
    else:
        with pytest.raises(error):
            decorator(func)


@given(param_specs)
def test_llm_rollout_signature_rule(spec: list[tuple[str, bool]]) -> None:
    check_signature_rule(llm_rollout, spec, ("llm",), ValueError)


@given(param_specs)
def test_prompt_rollout_signature_rule(spec: list[tuple[str, bool]]) -> None:
    check_signature_rule(prompt_rollout, spec, ("prompt_template",), ValueError)


@given(param_specs)
def test_rollout_accepts_exactly_what_either_form_accepts(spec: list[tuple[str, bool]]) -> None:
    check_signature_rule(rollout, spec, ("llm", "prompt_template"), NotImplementedError)


@given(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).filter(
        lambda s: not keyword.iskeyword(s)
    )
)
@example("llm")  # a first parameter named like the second must not make the signature itself invalid
def test_first_parameter_must_be_task(name: str) -> None:
    second = "task" if name == "llm" else "llm"
    func = make_function(
        [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter(second, inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ]
    )
    if name == "task":
        llm_rollout(func)
    else:
        with pytest.raises(ValueError, match="task"):
            llm_rollout(func)


def test_positional_only_llm_is_rejected() -> None:
    func = make_function(
        [
            inspect.Parameter("task", inspect.Parameter.POSITIONAL_ONLY),
            inspect.Parameter("llm", inspect.Parameter.POSITIONAL_ONLY),
        ]
    )
    with pytest.raises(ValueError, match="keyword"):
        llm_rollout(func)


def _attempted(mode: Any = "train") -> AttemptedRollout:
    return AttemptedRollout(
        rollout_id="ro-1",
        input={"q": 1},
        start_time=0.0,
        mode=mode,
        attempt=Attempt(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, start_time=0.0),
    )


LLM_A = LLM(endpoint="http://127.0.0.1:1/v1", model="a")
LLM_B = LLM(endpoint="http://127.0.0.1:2/v1", model="b")
PROMPT = PromptTemplate(template="Hi {name}")


def test_llm_injection_picks_the_first_llm_and_warns_on_several(caplog: pytest.LogCaptureFixture) -> None:
    seen: dict[str, Any] = {}

    @llm_rollout
    def agent(task: Any, llm: LLM, rollout: Rollout) -> float:
        seen["llm"], seen["rollout"], seen["task"] = llm, rollout, task
        return 1.0

    attempted = _attempted()
    with caplog.at_level(logging.WARNING):
        assert agent.rollout({"q": 1}, {"a": LLM_A, "b": LLM_B, "p": PROMPT}, attempted) == 1.0
    assert seen == {"llm": LLM_A, "rollout": attempted, "task": {"q": 1}}
    assert "Several LLM" in caplog.text


def test_proxy_llm_is_routed_to_the_attempt_unless_strip_proxy_is_off() -> None:
    proxy = ProxyLLM(endpoint="http://127.0.0.1:9/v1", model="m")

    @rollout
    def routed(task: Any, llm: LLM) -> LLM:
        return llm

    @llm_rollout(strip_proxy=False)
    def raw(task: Any, llm: LLM) -> LLM:
        return llm

    got = routed.rollout(None, {"x": proxy}, _attempted())
    assert type(got) is LLM
    assert got.endpoint == "http://127.0.0.1:9/rollout/ro-1/attempt/at-1/v1"
    assert raw.rollout(None, {"x": proxy}, _attempted()) is proxy
    plain = Rollout(rollout_id="ro-2", start_time=0.0)
    with pytest.raises(ValueError, match="AttemptedRollout"):
        routed.rollout(None, {"x": proxy}, plain)


def test_missing_resource_is_a_clear_error_unless_the_parameter_has_a_default() -> None:
    @prompt_rollout
    def needs(task: Any, prompt_template: PromptTemplate) -> None:
        return None

    @rollout
    def optional(task: Any, prompt_template: PromptTemplate | None = None) -> str:
        return "default" if prompt_template is None else prompt_template.format(name="x")

    with pytest.raises(ValueError, match="PromptTemplate"):
        needs.rollout(None, {"llm": LLM_A}, _attempted())
    assert optional.rollout(None, {}, _attempted()) == "default"
    assert optional.rollout(None, {"p": PROMPT}, _attempted()) == "Hi x"


async def test_async_functions_and_wrong_entry_points() -> None:
    @rollout
    async def agent_async(task: int, llm: LLM) -> float:
        return float(task)

    @rollout
    def agent_sync(task: int, llm: LLM) -> float:
        return float(task)

    assert agent_async.is_async() and not agent_sync.is_async()
    assert await agent_async.rollout_async(3, {"m": LLM_A}, _attempted()) == 3.0
    assert await agent_async.training_rollout_async(4, {"m": LLM_A}, _attempted()) == 4.0
    with pytest.raises(RuntimeError):
        agent_async.rollout(3, {"m": LLM_A}, _attempted())
    with pytest.raises(RuntimeError):
        await agent_sync.rollout_async(3, {"m": LLM_A}, _attempted())
    # Calling the decorated object calls the function itself; metadata is preserved.
    assert agent_sync(5, LLM_A) == 5.0
    assert agent_sync.__name__ == "agent_sync"  # pyright: ignore[reportAttributeAccessIssue]  # set by functools.update_wrapper


@rollout
def module_level_agent(task: int, llm: LLM) -> float:
    return float(task)


def test_decorated_module_level_agent_pickles_by_name() -> None:
    assert pickle.loads(pickle.dumps(module_level_agent)) is module_level_agent


def test_litagent_is_async_and_defaults() -> None:
    class SyncAgent(LitAgent[int]):
        def rollout(self, task: int, resources: Any, rollout: Rollout) -> float:
            return float(task)

    class AsyncAgent(LitAgent[int]):
        async def validation_rollout_async(self, task: int, resources: Any, rollout: Rollout) -> float:
            return float(task)

    assert not SyncAgent().is_async()
    assert AsyncAgent().is_async()
    assert SyncAgent().training_rollout(2, {}, _attempted()) == 2.0
    with pytest.raises(ValueError, match="runner"):
        SyncAgent().get_runner()
    with pytest.warns(DeprecationWarning):
        SyncAgent(trained_agents="x")
