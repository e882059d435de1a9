"""``agl.types.env``: every variable documented once, one parser for every kind."""

from __future__ import annotations

import pytest
from agl.types import env
from agl.types.env import (
    DEFAULT_STORE_PORT,
    ENV_VARS,
    SERVER_PORT,
    EnvVar,
    LightningEnvVar,
    parse_bool,
    parse_choice,
    parse_float,
)
from hypothesis import given
from hypothesis import strategies as st


def test_every_name_of_the_enum_is_a_documented_constant() -> None:
    assert {v.name for v in ENV_VARS} == {m.value for m in LightningEnvVar}
    doc = env.__doc__ or ""
    for var in ENV_VARS:
        assert f"``{var.name}``" in doc and var.meaning
    assert SERVER_PORT.default == DEFAULT_STORE_PORT == 4747


def test_get_override_then_variable_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGL_SERVER_PORT", raising=False)
    assert SERVER_PORT.get() == 4747 and not SERVER_PORT.is_set()
    monkeypatch.setenv("AGL_SERVER_PORT", "  ")  # blank counts as unset
    assert SERVER_PORT.get() == 4747
    monkeypatch.setenv("AGL_SERVER_PORT", " 5000 ")
    assert SERVER_PORT.get() == 5000 and SERVER_PORT.get(6000) == 6000
    monkeypatch.setenv("AGL_SERVER_PORT", "http")
    with pytest.raises(ValueError, match=r"AGL_SERVER_PORT='http' must be an integer"):
        SERVER_PORT.get()


@given(
    st.text().filter(lambda s: s.strip().lower() not in {"1", "true", "yes", "on", "0", "false", "no", "off"})
)
def test_one_boolean_parser_rejects_everything_else_by_name(text: str) -> None:
    with pytest.raises(ValueError, match="AGL_X"):
        parse_bool("AGL_X", text)


@given(st.sampled_from(["1", "TRUE", "Yes", " on "]), st.sampled_from(["0", "False", "NO", "off "]))
def test_booleans(true_text: str, false_text: str) -> None:
    assert parse_bool("AGL_X", true_text) is True and parse_bool("AGL_X", false_text) is False


def test_numbers_and_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_float("AGL_X", "2.5") == 2.5
    with pytest.raises(ValueError, match="must be a number"):
        parse_float("AGL_X", "fast")
    monkeypatch.setenv("AGL_RATE", "0.25")
    assert EnvVar("AGL_RATE", "a test variable", 1.0, parse_float).get() == 0.25
    role = parse_choice(["algorithm", "runner", "both"])
    assert role("AGL_CURRENT_ROLE", "Runner") == "runner"
    with pytest.raises(
        ValueError, match=r"AGL_CURRENT_ROLE='nobody' is not one of 'algorithm', 'runner', 'both'"
    ):
        role("AGL_CURRENT_ROLE", "nobody")
    mode = EnvVar("AGL_MODE", "a test variable", "both", role)
    monkeypatch.setenv("AGL_MODE", "ALGORITHM")
    assert mode.get() == "algorithm"


def test_agentops_service_uses_the_one_boolean_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_AGENTOPS_SERVICE", "maybe")
    with pytest.raises(ValueError, match="AGL_AGENTOPS_SERVICE='maybe' is not a boolean"):
        env.AGENTOPS_SERVICE.get()
    monkeypatch.setenv("AGL_AGENTOPS_SERVICE", "On")
    assert env.AGENTOPS_SERVICE.get() is True
