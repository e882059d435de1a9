"""``AlgorithmMetrics``: one call writes the Prometheus gauges and a ``metrics.jsonl`` line."""

from __future__ import annotations

import json
import math
import os
import textwrap
import threading
from pathlib import Path

from agl.algorithms.metrics import AlgorithmMetrics
from agl.testing.child import run_python
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families


def test_log_writes_a_line_and_sets_a_gauge_per_number(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = AlgorithmMetrics("local_grpo", tmp_path / "out" / "metrics.jsonl", registry=registry)
    metrics.log(
        "train", {"step": 1, "reward": 0.25, "tokens_per_s": 120.5, "model_version": "v1", "ok": True}
    )
    metrics.log("train", {"step": 2, "reward": 0.75, "loss": math.nan})
    metrics.log("validation", {"step": 2, "accuracy": 0.5})
    metrics.close()
    lines = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert lines[0] == {
        "kind": "train",
        "step": 1,
        "reward": 0.25,
        "tokens_per_s": 120.5,
        "model_version": "v1",
        "ok": True,
    }
    assert [line["kind"] for line in lines] == ["train", "train", "validation"]
    train = {"algorithm": "local_grpo", "kind": "train"}
    assert registry.get_sample_value("agl_algorithm_reward", train) == 0.75
    assert registry.get_sample_value("agl_algorithm_tokens_per_s", train) == 120.5
    assert registry.get_sample_value("agl_algorithm_records_total", train) == 2
    assert (
        registry.get_sample_value("agl_algorithm_accuracy", {"algorithm": "local_grpo", "kind": "validation"})
        == 0.5
    )
    assert registry.get_sample_value("agl_algorithm_loss", train) is None  # NaN is not reported
    assert registry.get_sample_value("agl_algorithm_ok", train) is None  # nor booleans
    # The exposition parses.
    names = {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert {"agl_algorithm_reward", "agl_algorithm_records"} <= names


def test_without_a_path_nothing_is_written_and_two_instances_share_the_gauges(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    a = AlgorithmMetrics("apo", registry=registry)
    b = AlgorithmMetrics("apo", registry=registry)
    a.log("round", {"best_score": 0.1})
    b.log("round", {"best_score": 0.2})
    assert registry.get_sample_value("agl_algorithm_best_score", {"algorithm": "apo", "kind": "round"}) == 0.2
    assert (
        registry.get_sample_value("agl_algorithm_records_total", {"algorithm": "apo", "kind": "round"}) == 2
    )
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=25, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=12), st.floats(allow_nan=False, allow_infinity=False), max_size=6
    )
)
def test_any_figure_names_become_valid_metric_names(figures: dict[str, float]) -> None:
    registry = CollectorRegistry()
    AlgorithmMetrics("x", registry=registry).log("k", figures)
    families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    assert all(f.name.startswith("agl_algorithm_") for f in families)


def test_concurrent_logs_write_whole_lines(tmp_path: Path) -> None:
    metrics = AlgorithmMetrics("t", tmp_path / "m.jsonl", registry=CollectorRegistry())
    threads = [
        threading.Thread(target=lambda i=i: [metrics.log("train", {"i": i, "j": j}) for j in range(50)])
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    metrics.close()
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert len(lines) == 200


def test_multiprocess_mode_keeps_the_most_recent_value(tmp_path: Path) -> None:
    child = textwrap.dedent(
        """
        import sys
        from agl.algorithms.metrics import AlgorithmMetrics
        AlgorithmMetrics("grpo").log("train", {"reward": float(sys.argv[1])})
        """
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for reward in ("0.1", "0.9"):
        run_python(child, reward, env=env, timeout=60)
    reader = textwrap.dedent(
        """
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        print(generate_latest(registry).decode())
        """
    )
    exposition = run_python(reader, env=env, timeout=60)
    samples = {
        (s.name, s.labels.get("kind")): s.value
        for f in text_string_to_metric_families(exposition)
        for s in f.samples
    }
    assert samples[("agl_algorithm_reward", "train")] == 0.9
    assert samples[("agl_algorithm_records_total", "train")] == 2


def test_a_figure_named_like_the_records_counter_gets_its_own_gauge() -> None:
    registry = CollectorRegistry()
    AlgorithmMetrics("x", registry=registry).log("k", {"records": 3.0, "Records_Total": 4.0})
    labels = {"algorithm": "x", "kind": "k"}
    assert registry.get_sample_value("agl_algorithm_records_total", labels) == 1
    assert registry.get_sample_value("agl_algorithm_records_value", labels) == 3.0
    assert registry.get_sample_value("agl_algorithm_records_total_value", labels) == 4.0


def test_a_new_registry_gets_its_own_metrics_even_at_a_collected_registrys_address() -> None:
    """Regression: metrics were shared by ``id(registry)``; a new registry at a collected one's address got
    the old one's metrics, so its own stayed empty."""
    import gc

    for _ in range(20):  # CPython reuses the address of a freed registry for the next one, mostly at once
        registry = CollectorRegistry()
        AlgorithmMetrics("apo", registry=registry).log("round", {"best_score": 0.5})
        labels = {"algorithm": "apo", "kind": "round"}
        assert registry.get_sample_value("agl_algorithm_records_total", labels) == 1
        assert registry.get_sample_value("agl_algorithm_best_score", labels) == 0.5
        del registry
        gc.collect()


def test_a_histogram_figure_gives_a_gauge_per_entry_and_zero_for_entries_gone() -> None:
    registry = CollectorRegistry()
    metrics = AlgorithmMetrics("local_grpo", registry=registry)
    train = {"algorithm": "local_grpo", "kind": "train"}
    metrics.log("train", {"step": 1, "staleness": {0: 12, 2: 4}, "names": {"a": "text"}})
    assert registry.get_sample_value("agl_algorithm_staleness_0", train) == 12
    assert registry.get_sample_value("agl_algorithm_staleness_2", train) == 4
    assert registry.get_sample_value("agl_algorithm_names_a", train) is None  # not a number
    metrics.log("train", {"step": 2, "staleness": {0: 10, 1: 6}})
    assert registry.get_sample_value("agl_algorithm_staleness_1", train) == 6
    assert registry.get_sample_value("agl_algorithm_staleness_2", train) == 0  # none this step
    metrics.log("validation", {"staleness": {5: 1}})  # another kind keeps its own entries
    assert registry.get_sample_value("agl_algorithm_staleness_1", train) == 6
