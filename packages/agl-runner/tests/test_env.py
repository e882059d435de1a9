"""AGL_* environment variables: parsing rules and precedence."""

from __future__ import annotations

import pytest
from agl.runner import (
    ClientServerExecutionStrategy,
    SharedMemoryExecutionStrategy,
    resolve_bool_env_var,
    resolve_int_env_var,
)
from hypothesis import given
from hypothesis import strategies as st

TRUE = ["1", "true", "yes", "on"]
FALSE = ["0", "false", "no", "off"]


def _cases(words: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(words).flatmap(
        lambda w: st.tuples(
            st.lists(st.booleans(), min_size=len(w), max_size=len(w)), st.sampled_from(["", " ", "\t"])
        ).map(lambda t: t[1] + "".join(c.upper() if up else c for c, up in zip(w, t[0], strict=True)) + t[1])
    )


@given(_cases(TRUE), _cases(FALSE))
def test_booleans_any_case_and_padding(true_text: str, false_text: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGL_MANAGED_STORE", true_text)
        assert resolve_bool_env_var("AGL_MANAGED_STORE", fallback=False) is True
        mp.setenv("AGL_MANAGED_STORE", false_text)
        assert resolve_bool_env_var("AGL_MANAGED_STORE", fallback=True) is False
        assert resolve_bool_env_var("AGL_MANAGED_STORE", True, fallback=True) is True  # explicit wins


@given(
    st.text(min_size=1).filter(
        lambda s: s.strip().lower() not in TRUE + FALSE and s.strip() and "\x00" not in s
    )
)
def test_other_boolean_texts_are_rejected_with_the_name(text: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGL_MANAGED_STORE", text)
        with pytest.raises(ValueError, match="AGL_MANAGED_STORE"):
            resolve_bool_env_var("AGL_MANAGED_STORE", fallback=True)


def test_ints_and_strategy_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_SERVER_PORT", "not-a-port")
    with pytest.raises(ValueError, match=r"AGL_SERVER_PORT.*integer"):
        resolve_int_env_var("AGL_SERVER_PORT", fallback=1)
    with pytest.raises(ValueError, match="integer"):
        ClientServerExecutionStrategy()
    assert ClientServerExecutionStrategy(server_port=5000).server_port == 5000
    monkeypatch.setenv("AGL_SERVER_PORT", "4999")
    monkeypatch.setenv("AGL_CURRENT_ROLE", "runner")
    monkeypatch.setenv("AGL_MANAGED_STORE", "off")
    strategy = ClientServerExecutionStrategy()
    assert (strategy.server_port, strategy.role, strategy.managed_store) == (4999, "runner", False)
    monkeypatch.setenv("AGL_CURRENT_ROLE", "nobody")
    with pytest.raises(ValueError, match="role"):
        ClientServerExecutionStrategy()
    monkeypatch.delenv("AGL_CURRENT_ROLE")
    monkeypatch.delenv("AGL_SERVER_PORT")
    assert ClientServerExecutionStrategy().server_port == 4747


def test_shm_constructor_rules() -> None:
    with pytest.raises(ValueError, match="n_runners=1"):
        SharedMemoryExecutionStrategy(n_runners=2, main_thread="runner")
    with pytest.raises(ValueError, match="main_thread"):
        SharedMemoryExecutionStrategy(main_thread="both")  # pyright: ignore[reportArgumentType]
    assert SharedMemoryExecutionStrategy(n_runners=3).n_runners == 3
