"""Programs as a user of the reference writes them, with ``import agl.compat as agl`` as the only change."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import agl.compat as agl
import openai
import pytest
from agl.testing.openai_standin import StandinBackend, serve_standin
from prometheus_client import CollectorRegistry, Counter


def _answer(request: dict[str, Any]) -> str:
    question = str(request["messages"][-1]["content"])
    left, right = question.removeprefix("What is ").removesuffix("?").split(" + ")
    return str(int(left) + int(right))


@agl.rollout
def math_agent(task: dict[str, Any], llm: agl.LLM) -> None:
    with openai.OpenAI(base_url=llm.endpoint, api_key="dummy", max_retries=0) as client:
        reply = client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task["question"]}]
        )
    agl.emit_reward(1.0 if reply.choices[0].message.content == task["answer"] else 0.0)


def test_a_dev_run_over_a_tiny_dataset_with_the_old_keywords() -> None:
    dataset = [{"question": f"What is {i} + 2?", "answer": str(i + 2)} for i in range(3)]
    dataset.append({"question": "What is 1 + 1?", "answer": "3"})  # a wrong expectation: reward 0
    with serve_standin(StandinBackend(script=_answer)) as server:
        baseline = agl.Baseline()
        with pytest.warns(DeprecationWarning, match="n_runners"):
            trainer = agl.Trainer(
                n_workers=2,
                strategy="shm",
                algorithm=baseline,
                initial_resources={"main_llm": agl.LLM(endpoint=server.base_url, model="stand-in")},
                progress=False,
            )
        trainer.dev(math_agent, train_dataset=dataset)
    summary = baseline.summary
    assert summary.total == 4 and summary.by_status == {"succeeded": 4}
    assert sorted(summary.rewards) == [0.0, 1.0, 1.0, 1.0]


def test_a_runner_with_a_threaded_store_and_the_tracer_provider() -> None:
    async def main() -> list[agl.Span]:
        store = agl.LightningStoreThreaded(agl.InMemoryLightningStore())
        tracer = agl.OtelTracer()
        rollout = await store.start_rollout(input={"origin": "user-style test"})
        with tracer.lifespan(store):
            async with tracer.trace_context(
                "trace-1", rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id
            ):
                assert agl.get_tracer_provider(inspect=True) is tracer.provider
                with agl.get_tracer().start_as_current_span("my-step"):
                    agl.emit_reward(0.5)
        spans = await store.query_spans(rollout.rollout_id)
        await store.close()
        return list(spans)

    spans = asyncio.run(main())
    assert agl.find_final_reward(spans) == 0.5
    assert "my-step" in {s.name for s in spans}
    with pytest.raises(RuntimeError, match="lifespan"):
        agl.get_tracer_provider()


def test_the_threaded_store_is_shared_by_threads() -> None:
    store = agl.LightningStoreThreaded(agl.InMemoryLightningStore())
    ids: list[str] = []

    def enqueue(i: int) -> None:
        ids.append(asyncio.run(store.enqueue_rollout(input={"i": i})).rollout_id)

    threads = [threading.Thread(target=enqueue, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    capabilities = store.capabilities
    assert len(set(ids)) == 4 and "thread_safe" in capabilities and capabilities["thread_safe"]
    asyncio.run(store.close())


def test_setup_logging_configures_the_agl_loggers(tmp_path: Path) -> None:
    log_file = tmp_path / "agl.log"
    agl.setup_logging(
        "DEBUG",
        color=False,
        files=str(log_file),
        apply_to=["my_app"],
        submodule_levels={"agentlightning.store": "WARNING"},
    )
    agl.setup_logging("DEBUG", color=False, files=str(log_file), apply_to=["my_app"])  # again: not stacked
    try:
        logging.getLogger("agl.runner.trainer").debug("from the runner")
        logging.getLogger("my_app").info("from the app")
        base = logging.getLogger("agl")
        assert base.level == logging.DEBUG and not base.propagate
        assert len(base.handlers) == 2  # console and file, once each
        assert logging.getLogger("agl.store").level == logging.WARNING
        for handler in base.handlers:
            handler.flush()
        assert "from the runner" in log_file.read_text()
        logger = agl.setup_module_logging("INFO", name="my_module", color=False)
        assert logger.name == "my_module" and logger.level == logging.INFO
        with pytest.warns(DeprecationWarning, match="setup_logging"):
            assert agl.configure_logger(logging.WARNING).name == "agl"
    finally:
        for name in ("agl", "my_app", "my_module", "agl.store"):
            target = logging.getLogger(name)
            for handler in list(target.handlers):
                target.removeHandler(handler)
                handler.close()
            target.setLevel(logging.NOTSET)
            target.propagate = True


def test_metrics_backends_count_and_observe() -> None:
    registry = CollectorRegistry()
    console = agl.ConsoleMetricsBackend(window_seconds=60.0, log_interval_seconds=3600.0, group_level=1)
    prometheus = agl.PrometheusMetricsBackend(registry=registry)
    backend = agl.MultiMetricsBackend([console, prometheus])
    assert backend.has_prometheus() and not console.has_prometheus()
    backend.register_counter("requests_total", ["operation", "status"])
    backend.register_histogram("latency_seconds", ["operation"], buckets=[0.1, 0.5, 1.0])

    async def emit() -> None:
        for latency, status in [(0.05, "200"), (0.2, "200"), (0.7, "500")]:
            await backend.inc_counter("requests_total", labels={"operation": "search", "status": status})
            await backend.observe_histogram("latency_seconds", latency, labels={"operation": "search"})

    asyncio.run(emit())
    value = registry.get_sample_value
    assert value("requests_total", {"operation": "search", "status": "200"}) == 2.0
    assert value("latency_seconds_bucket", {"operation": "search", "le": "0.5"}) == 2.0
    assert value("latency_seconds_count", {"operation": "search"}) == 3.0
    lines = console.summary()
    assert any(line.startswith("latency_seconds{operation=search} ") and "p50=0.2" in line for line in lines)
    assert any(line.startswith("requests_total{operation=search} rate=") for line in lines)
    with pytest.raises(ValueError, match="labels"):
        asyncio.run(backend.inc_counter("requests_total", labels={"operation": "x"}))
    with pytest.raises(ValueError, match="already registered"):
        backend.register_histogram("requests_total", ["operation", "status"])
    with pytest.raises(ValueError, match="not registered"):
        asyncio.run(console.observe_histogram("unknown", 1.0))


def test_multi_feeds_a_backend_written_to_the_reference_interface() -> None:
    seen: list[tuple[object, ...]] = []

    class Recording(agl.MetricsBackend):
        """A user's backend as the reference has them: public methods overridden, left unannotated as in user
        code (a type checker takes the parameters' types from ``agl.MetricsBackend``)."""

        def register_counter(self, name, label_names=None, group_level=None):
            seen.append(("counter", name, tuple(label_names or ())))

        def register_histogram(self, name, label_names=None, buckets=None, group_level=None):
            seen.append(("histogram", name, tuple(buckets or ())))

        async def inc_counter(self, name, amount=1.0, labels=None):
            seen.append(("inc", name, amount))

    backend = agl.MultiMetricsBackend([Recording()])
    backend.register_counter("calls", ["tool"])
    backend.register_counter("calls", ["tool"])  # again, the same: registered once
    backend.register_histogram("seconds", buckets=[1.0, 2.0])
    asyncio.run(backend.inc_counter("calls", 2.0, labels={"tool": "search"}))
    assert seen == [
        ("counter", "calls", ("tool",)),
        ("histogram", "seconds", (1.0, 2.0)),
        ("inc", "calls", 2.0),
    ]


def test_a_registration_prometheus_refuses_leaves_the_name_free() -> None:
    registry = CollectorRegistry()
    Counter("taken", "registered before the backend", registry=registry)
    prometheus = agl.PrometheusMetricsBackend(registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        prometheus.register_counter("taken")
    with pytest.raises(ValueError, match="not registered"):
        asyncio.run(prometheus.inc_counter("taken"))


async def test_a_store_server_started_from_launcher_args() -> None:
    """As the reference's parallelisation guide writes it: ``launcher_args=PythonServerLauncherArgs(...)``."""
    from agl.testing.openai_standin import free_port

    port = free_port()
    args = agl.PythonServerLauncherArgs(port=port, host="127.0.0.1", launch_mode="thread")
    with pytest.warns(DeprecationWarning, match="launcher_args"):
        server = agl.LightningStoreServer(agl.InMemoryLightningStore(), launcher_args=args)
    await server.start()
    try:
        client = agl.LightningStoreClient(f"http://127.0.0.1:{port}")
        try:
            rollouts = await client.enqueue_many_rollouts(
                rollouts=[agl.EnqueueRolloutRequest(input={"q": 1})]
            )
            assert [r.status for r in rollouts] == ["queuing"]
        finally:
            await client.close()
    finally:
        await server.stop()


def test_openai_messages_is_the_adapters_message_list_type() -> None:
    messages: agl.OpenAIMessages = {"messages": [{"role": "user", "content": "hi"}], "tools": None}
    assert messages["messages"][0]["content"] == "hi"


def test_trainer_components_named_by_the_references_import_paths() -> None:
    """``Trainer(adapter="agentlightning.adapter.TraceToMessages")``, as the parallelisation guide writes it."""
    trainer = agl.Trainer(
        adapter="agentlightning.adapter.TraceToMessages",
        tracer={"type": "agentlightning.tracer.otel.OtelTracer"},
        strategy="shm",
        n_runners=1,
    )
    assert isinstance(trainer.adapter, agl.TraceToMessages)
    assert isinstance(trainer.tracer, agl.OtelTracer)
    with pytest.raises(ValueError, match=r"cannot import 'agentlightning\.adapter'"):
        agl.Trainer(adapter="agentlightning.adapter.NoSuchAdapter")
