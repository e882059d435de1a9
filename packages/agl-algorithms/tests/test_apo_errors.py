"""APO refuses to start without what it needs, and says what to pass instead."""

from __future__ import annotations

from typing import Any

import pytest
from agl.algorithms import APO as LazyAPO
from agl.algorithms.adapter import TraceToMessages
from agl.algorithms.apo import APO
from agl.store import InMemoryLightningStore
from agl.testing.child import run_python
from agl.types import LLM, PromptTemplate

PROMPT = PromptTemplate(template="Pick a room.")
TASKS = [{"id": 1}, {"id": 2}]


class NotMessages:
    def adapt(self, source: Any) -> Any:
        return source


def configured(resources: Any = None, adapter: Any = None, **kwargs: Any) -> APO[Any]:
    apo: APO[Any] = APO(None, **kwargs)
    apo.set_store(InMemoryLightningStore())
    apo.set_initial_resources({"prompt_template": PROMPT} if resources is None else resources)
    apo._test_adapter = adapter if adapter is not None else TraceToMessages()  # pyright: ignore[reportAttributeAccessIssue]  # keep it alive
    apo.set_adapter(apo._test_adapter)  # pyright: ignore[reportAttributeAccessIssue]
    return apo


def test_apo_is_exported_lazily_from_agl_algorithms() -> None:
    assert LazyAPO is APO


async def test_no_initial_resources() -> None:
    apo = configured(resources={})
    with pytest.raises(ValueError, match="needs initial resources holding the PromptTemplate"):
        await apo.run(TASKS, TASKS)


async def test_no_prompt_template_among_the_resources() -> None:
    apo = configured(resources={"llm": LLM(endpoint="http://127.0.0.1:1/v1", model="m")})
    with pytest.raises(ValueError, match="no PromptTemplate in the initial resources"):
        await apo.run(TASKS, TASKS)


async def test_prompt_names_must_name_prompt_templates() -> None:
    resources = {"llm": LLM(endpoint="http://127.0.0.1:1/v1", model="m"), "p": PROMPT}
    with pytest.raises(ValueError, match="'missing', which is not in the initial resources"):
        await configured(resources=resources, prompt_names="missing").run(TASKS, TASKS)
    with pytest.raises(ValueError, match="'llm' is a LLM, not a PromptTemplate"):
        await configured(resources=resources, prompt_names=["p", "llm"]).run(TASKS, TASKS)


async def test_wrong_adapter() -> None:
    apo = configured(adapter=NotMessages())
    with pytest.raises(ValueError, match="use adapter=TraceToMessages"):
        await apo.run(TASKS, TASKS)


async def test_no_adapter() -> None:
    apo: APO[Any] = APO(None)
    apo.set_store(InMemoryLightningStore())
    apo.set_initial_resources({"prompt_template": PROMPT})
    with pytest.raises(ValueError, match="got no adapter"):
        await apo.run(TASKS, TASKS)


@pytest.mark.parametrize(
    ("train", "val", "missing"),
    [(None, TASKS, "train_dataset"), (TASKS, None, "val_dataset"), ([], [], "train_dataset, val_dataset")],
)
async def test_missing_datasets(train: Any, val: Any, missing: str) -> None:
    with pytest.raises(ValueError, match=f"missing or empty: {missing}$"):
        await configured().run(train, val)


def test_best_prompt_before_run() -> None:
    with pytest.raises(ValueError, match="after run"):
        APO(None).get_best_prompt()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beam_width": 0}, "beam_width must be at least 1"),
        ({"branch_factor": 0}, "branch_factor must be at least 1"),
        ({"gradient_batch_size": 0}, "gradient_batch_size must be at least 1"),
        ({"val_batch_size": -1}, "val_batch_size must be at least 1"),
        ({"beam_rounds": -1}, "beam_rounds must be 0 or more"),
        ({"rollout_batch_timeout": 0}, "rollout_batch_timeout must be positive"),
    ],
)
def test_bad_parameters(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        APO(None, **kwargs)


def test_defaults_follow_the_reference() -> None:
    apo: APO[Any] = APO(None)
    assert (apo.gradient_model, apo.apply_edit_model, apo.diversity_temperature) == (
        "gpt-5-mini",
        "gpt-4.1-mini",
        1.0,
    )
    assert (
        apo.gradient_batch_size,
        apo.val_batch_size,
        apo.beam_width,
        apo.branch_factor,
        apo.beam_rounds,
    ) == (
        4,
        16,
        4,
        4,
        3,
    )
    assert (apo.rollout_batch_timeout, apo.run_initial_validation) == (3600.0, True)


def test_the_references_poml_trace_flag_is_a_deprecated_alias() -> None:
    """``APO(_poml_trace=True)`` traced POML into ``pomltrace``: here ``poml_trace_dir="pomltrace"``, with a warning."""
    with pytest.warns(DeprecationWarning, match=r"poml_trace_dir='pomltrace'"):
        apo: APO[Any] = APO(None, _poml_trace=True)
    assert apo.poml_trace_dir == "pomltrace"
    with pytest.warns(DeprecationWarning, match="_poml_trace"):
        assert APO(None, _poml_trace=False).poml_trace_dir is None
    with pytest.raises(ValueError, match="not both"):
        APO(None, _poml_trace=True, poml_trace_dir="elsewhere")


def test_importing_apo_loads_neither_poml_nor_openai() -> None:
    code = (
        "import sys\n"
        "import agl.algorithms, agl.algorithms.apo\n"
        "from agl.algorithms import APO\n"
        "print(sorted(m for m in ('poml', 'openai', 'litellm', 'torch') if m in sys.modules))\n"
    )
    assert run_python(code, timeout=60).strip() == "[]"
