"""``ProxyLLM`` routes calls to one rollout and attempt through the URL; ``LLM`` never rewrites it."""

from __future__ import annotations

import pytest
from agl.types import LLM, Attempt, AttemptedRollout, ProxyLLM
from hypothesis import given
from hypothesis import strategies as st

hosts = st.sampled_from(["http://127.0.0.1:4000", "http://localhost:8080", "https://proxy.internal"])
paths = st.sampled_from(["", "/api", "/a/b"])
segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=14)


@given(host=hosts, path=paths, v1=st.booleans(), slash=st.booleans(), rollout_id=segment, attempt_id=segment)
def test_routed_url(host: str, path: str, v1: bool, slash: bool, rollout_id: str, attempt_id: str) -> None:
    endpoint = host + path + ("/v1" if v1 else "") + ("/" if slash else "")
    llm = ProxyLLM(endpoint=endpoint, model="m")
    routed = llm.get_base_url(rollout_id, attempt_id)
    expected = f"{host}{path}/rollout/{rollout_id}/attempt/{attempt_id}" + ("/v1" if v1 else "")
    assert routed == expected
    assert llm.get_base_url() == endpoint  # no ids: the raw endpoint


def test_examples() -> None:
    assert (
        ProxyLLM(endpoint="http://h:1/v1", model="m").get_base_url("R", "A")
        == "http://h:1/rollout/R/attempt/A/v1"
    )
    assert (
        ProxyLLM(endpoint="http://h:1/", model="m").get_base_url("R", "A") == "http://h:1/rollout/R/attempt/A"
    )
    assert (
        ProxyLLM(endpoint="http://h:1/v1/", model="m").get_base_url("R", "A")
        == "http://h:1/rollout/R/attempt/A/v1"
    )


@pytest.mark.parametrize(
    ("rollout_id", "attempt_id"), [("R", None), (None, "A"), ("", "A"), ("R", ""), (1, "A"), ("R", 2)]
)
def test_half_routed_urls_are_rejected(rollout_id: object, attempt_id: object) -> None:
    with pytest.raises(ValueError, match="rollout_id and attempt_id"):
        ProxyLLM(endpoint="http://h:1/v1", model="m").get_base_url(rollout_id, attempt_id)  # pyright: ignore[reportArgumentType]


def test_with_attempted_rollout_gives_a_plain_llm() -> None:
    proxy = ProxyLLM(
        endpoint="http://h:1/v1", model="m", api_key="k", sampling_parameters={"temperature": 0.2}
    )
    attempt = Attempt(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, start_time=0)
    llm = proxy.with_attempted_rollout(AttemptedRollout(rollout_id="ro-1", start_time=0, attempt=attempt))
    assert type(llm) is LLM
    assert llm.endpoint == "http://h:1/rollout/ro-1/attempt/at-1/v1"
    assert (llm.model, llm.api_key, llm.sampling_parameters) == ("m", "k", {"temperature": 0.2})
    llm.sampling_parameters["temperature"] = 1.0
    assert proxy.sampling_parameters == {"temperature": 0.2}  # not shared


@given(rollout_id=st.none() | segment, attempt_id=st.none() | segment)
def test_plain_llm_ignores_routing(rollout_id: str | None, attempt_id: str | None) -> None:
    llm = LLM(endpoint="http://h:1/v1", model="m")
    assert llm.get_base_url(rollout_id, attempt_id) == "http://h:1/v1"
