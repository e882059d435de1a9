"""AgentOpsTracer: AgentOps spans reach the store, and nothing leaves 127.0.0.1."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import sys
from typing import Any

import pytest
from agl.testing.tracer import new_attempt, new_store, spans_of

agentops = pytest.importorskip("agentops")

from agl.tracer import emit_reward, get_reward_value  # noqa: E402
from agl.tracer.agentops import LOCAL_AGENTOPS_ENDPOINT, AgentOpsTracer  # noqa: E402

_connections: list[Any] = []
_recording = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Audit hooks cannot be removed, so this one only records while a test asks it to.
    if _recording and event in ("socket.connect", "socket.getaddrinfo", "socket.sendto"):
        _connections.append((event, args))


sys.addaudithook(_audit)


def _is_local(event: str, args: tuple[Any, ...]) -> bool:
    if event == "socket.getaddrinfo":
        host = args[0]
    else:
        address = args[1]
        if not isinstance(address, tuple):  # a Unix socket
            return True
        host = address[0]
    if host in (None, "localhost"):
        return True
    if isinstance(host, bytes):
        host = host.decode()
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def test_agentops_tracer_collects_agentops_spans_and_never_calls_the_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    global _recording
    monkeypatch.setenv("AGENTOPS_API_KEY", "a-real-looking-key-that-must-not-be-used")
    monkeypatch.delenv("AGL_AGENTOPS_SERVICE", raising=False)
    store = new_store()
    tracer = AgentOpsTracer()
    _connections.clear()
    _recording = True
    try:
        tracer.init_worker(0, store)

        @agentops.operation
        def double(x: int) -> int:
            return 2 * x

        async def rollout() -> tuple[str, str]:
            rid, aid = await new_attempt(store)
            async with tracer.trace_context(rid, rollout_id=rid, attempt_id=aid):
                assert double(21) == 42
                emit_reward(0.75)
            return rid, aid

        rid, aid = asyncio.run(rollout())
        stored = asyncio.run(spans_of(store, rid, aid))
        # The hook sees connections: one to a local listener must show up.
        with socket.create_server(("127.0.0.1", 0)) as listener:
            socket.create_connection(listener.getsockname(), timeout=5).close()
    finally:
        _recording = False
        tracer.teardown_worker(0)

    names = [s.name for s in stored]
    assert any(name.startswith("double") for name in names), names  # AgentOps' own operation span
    assert any(name.startswith(rid) for name in names), names  # the AgentOps trace of the rollout
    assert [get_reward_value(s) for s in stored if get_reward_value(s) is not None] == [0.75]
    assert {s.resource.attributes.get("agentlightning.tracer.name") for s in stored} <= {None, "agentops"}

    assert any(event == "socket.connect" for event, _ in _connections)
    remote = [(event, args) for event, args in _connections if not _is_local(event, args)]
    assert remote == [], f"AgentOpsTracer tried to reach the network: {remote}"

    # Nothing that could send data is configured: no exporter on the provider, no metric reader,
    # and every AgentOps endpoint points at 127.0.0.1.
    from agentops.sdk.core import tracer as core

    assert core.provider is not None and core._meter_provider is not None
    processors = core.provider._active_span_processor._span_processors
    assert not any(hasattr(p, "span_exporter") or hasattr(p, "_batch_processor") for p in processors)
    assert list(core._meter_provider._metric_readers) == []
    config = agentops.get_client().config
    for url in (config.endpoint, config.app_url, config.exporter_endpoint):
        assert url.startswith(LOCAL_AGENTOPS_ENDPOINT)


def test_agentops_tracer_is_lazy_and_local_by_default() -> None:
    tracer = AgentOpsTracer()
    assert tracer.enable_agentops_service is False
    assert AgentOpsTracer(enable_agentops_service=True).enable_agentops_service is True
