"""``GET /metrics`` of the store server: request counts by route, the store's figures, auth, multi-process mode."""

from __future__ import annotations

import asyncio
import os
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agl.store import InMemoryLightningStore, LightningStoreClient, LightningStoreServer
from agl.store.cli import _store_parser
from agl.store.metrics import API_ROUTE_TEMPLATES, route_template
from agl.testing.child import run_python
from agl.testing.prometheus import metric_value, parse_metrics
from agl.testing.store.http import running_server
from agl.types import RolloutConfig
from hypothesis import given, settings
from hypothesis import strategies as st


def _get(url: str, token: str | None = None) -> tuple[int, str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
            return resp.status, resp.read().decode(), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), err.headers


@pytest.fixture
def server() -> Iterator[LightningStoreServer]:
    with running_server(token="s3cret") as srv:
        yield srv


@pytest.mark.parametrize(
    ("path", "template"),
    [
        ("/v1/agl/rollouts", "/v1/agl/rollouts"),
        ("/v1/agl/rollouts/search", "/v1/agl/rollouts/search"),
        ("/v1/agl/rollouts/ro-1", "/v1/agl/rollouts/{id}"),
        ("/v1/agl/rollouts/ro-1/attempts/latest", "/v1/agl/rollouts/{id}/attempts/latest"),
        ("/v1/agl/rollouts/ro-1/attempts/at-2", "/v1/agl/rollouts/{id}/attempts/{id}"),
        ("/v1/agl/workers/host/worker-3", "/v1/agl/workers/{id}"),
        ("/v1/agl/resources/latest", "/v1/agl/resources/latest"),
        ("/v1/agl/resources/rs/with/slashes", "/v1/agl/resources/{id}"),
        ("/v1/agl/queues/rollouts/dequeue", "/v1/agl/queues/rollouts/dequeue"),
        ("/v1/agl/queues/rollouts/claim", "/v1/agl/queues/rollouts/claim"),
        ("/v1/agl/spans/next/batch", "/v1/agl/spans/next/batch"),
        ("/dashboard/app.js", "/dashboard"),
        ("/v1/traces", "/v1/traces"),
        ("/anything/else", "other"),
    ],
)
def test_route_templates_keep_ids_out_of_the_labels(path: str, template: str) -> None:
    assert route_template(path) == template


def test_metrics_count_requests_by_route_and_report_the_store(server: LightningStoreServer) -> None:
    async def work() -> None:
        client = LightningStoreClient(server.endpoint, token="s3cret")
        try:
            await client.enqueue_rollout(input=1)
            await client.enqueue_rollout(input=2)
            claimed = await client.dequeue_rollout(worker_id="w1")
            assert claimed is not None
            await client.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="timeout")
            await client.get_rollout_by_id(claimed.rollout_id)
            await client.get_rollout_by_id("ro-missing")
            await client.add_resources({})
        finally:
            await client.close()

    asyncio.run(work())
    status, text, headers = _get(server.endpoint + "/metrics", "s3cret")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    samples = parse_metrics(text)
    stats = asyncio.run(server.statistics())
    assert (
        metric_value(samples, "agl_store_http_requests_total", route="/v1/agl/rollouts/{id}", method="GET")
        == 2
    )
    assert (
        metric_value(samples, "agl_store_http_requests_total", route="/v1/agl/queues/rollouts/enqueue") == 2
    )
    assert (
        metric_value(samples, "agl_store_http_request_duration_seconds_count", route="/v1/agl/rollouts/{id}")
        == 2
    )
    assert "total_rollouts" in stats and "total_attempts" in stats
    assert "total_resources" in stats and "total_workers" in stats
    assert metric_value(samples, "agl_store_rollouts_created_total") == stats["total_rollouts"] == 2
    assert metric_value(samples, "agl_store_attempts_started_total") == stats["total_attempts"] == 1
    assert metric_value(samples, "agl_store_resources_versions") == stats["total_resources"] == 1
    assert metric_value(samples, "agl_store_attempts_timed_out_total") == 1
    assert metric_value(samples, "agl_store_attempts", status="timeout") == 1
    assert metric_value(samples, "agl_store_queue_depth") == 1
    assert metric_value(samples, "agl_store_rollouts", status="queuing") == 1
    assert metric_value(samples, "agl_store_rollouts", status="failed") == 1  # no retries configured
    assert metric_value(samples, "agl_store_rollouts") == 2
    assert metric_value(samples, "agl_store_workers") == stats["total_workers"]


def test_a_retried_attempt_is_counted(server: LightningStoreServer) -> None:
    async def work() -> None:
        client = LightningStoreClient(server.endpoint, token="s3cret")
        try:
            await client.enqueue_rollout(
                input=1, config=RolloutConfig(max_attempts=2, retry_condition=["failed"])
            )
            first = await client.dequeue_rollout()
            assert first is not None
            await client.update_attempt(first.rollout_id, first.attempt.attempt_id, status="failed")
            second = await client.dequeue_rollout()
            assert second is not None and second.attempt.sequence_id == 2
            await client.update_attempt(second.rollout_id, second.attempt.attempt_id, status="succeeded")
        finally:
            await client.close()

    asyncio.run(work())
    samples = parse_metrics(_get(server.endpoint + "/metrics", "s3cret")[1])
    assert metric_value(samples, "agl_store_attempts_started_total") == 2
    assert metric_value(samples, "agl_store_attempts_retried_total") == 1
    assert metric_value(samples, "agl_store_attempts", status="failed") == 1
    assert metric_value(samples, "agl_store_attempts", status="succeeded") == 1


def test_metrics_need_the_token_unless_public(server: LightningStoreServer) -> None:
    for token in (None, "wrong"):
        status, body, headers = _get(server.endpoint + "/metrics", token)
        assert status == 401 and "--metrics-public" in body and headers["WWW-Authenticate"] == "Bearer"
    public = LightningStoreServer(InMemoryLightningStore(), port=0, token="s3cret", metrics_public=True)
    public.start()
    try:
        status, body, _ = _get(public.endpoint + "/metrics")
        assert status == 200 and "agl_store_rollouts" in body
        # Only /metrics is public: the API still needs the token.
        assert _get(public.endpoint + "/v1/agl/rollouts")[0] == 401
    finally:
        public.stop()


def test_metrics_public_is_a_cli_flag() -> None:
    assert _store_parser().parse_args(["--metrics-public"]).metrics_public is True
    assert _store_parser().parse_args([]).metrics_public is False


_CHILD = textwrap.dedent(
    """
    import sys, urllib.request
    from agl.store import InMemoryLightningStore, LightningStoreServer
    server = LightningStoreServer(InMemoryLightningStore(), port=0)
    server.start()
    for _ in range(int(sys.argv[1])):
        urllib.request.urlopen(server.endpoint + "/v1/agl/statistics").read()
    if sys.argv[2] == "scrape":
        sys.stdout.write(urllib.request.urlopen(server.endpoint + "/metrics").read().decode())
    server.stop()
    """
)


def test_multiprocess_mode_sums_the_request_counts_of_every_process(tmp_path: Path) -> None:
    """With PROMETHEUS_MULTIPROC_DIR, each process writes its counters there and /metrics adds them up."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    env.pop("AGL_STORE_TOKEN", None)
    run_python(_CHILD, "3", "quiet", env=env, timeout=60)
    assert list(tmp_path.glob("counter_*.db")), "the first process wrote no counter file"
    samples = parse_metrics(run_python(_CHILD, "2", "scrape", env=env, timeout=60))
    assert (
        metric_value(samples, "agl_store_http_requests_total", route="/v1/agl/statistics", status="200") == 5
    )
    # The store's own figures come once, from the scraping process's store.
    assert metric_value(samples, "agl_store_rollouts_created_total") == 0
    assert sum(1 for (n, _) in samples if n == "agl_store_queue_depth") == 1


# -- label values stay bounded (issue 27, defect 2) -------------------------------------------------

_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.~", min_size=1, max_size=12)
_KNOWN = st.sampled_from(
    ["rollouts", "attempts", "workers", "resources", "spans", "search", "latest", "batch"]
)


@given(st.lists(st.lists(st.one_of(_SEGMENT, _KNOWN), min_size=1, max_size=6), min_size=1, max_size=30))
@settings(max_examples=40, deadline=None)
def test_route_labels_stay_bounded_under_any_path(paths: list[list[str]]) -> None:
    labels = {route_template("/v1/agl/" + "/".join(parts)) for parts in paths}
    assert labels <= API_ROUTE_TEMPLATES | {"other"}, labels - API_ROUTE_TEMPLATES


def test_every_served_route_has_a_known_label() -> None:
    server = LightningStoreServer(InMemoryLightningStore())
    for route in server.app.routes:
        path = getattr(route, "path", "")
        if path.startswith("/v1/agl/"):
            sample = path.replace("{rollout_id}", "ro-1").replace("{attempt_id}", "at-1")
            sample = sample.replace("{resources_id:path}", "rs/1").replace("{worker_id:path}", "w/1")
            assert route_template(sample) in API_ROUTE_TEMPLATES, (path, route_template(sample))


def test_unauthenticated_probes_do_not_grow_the_metrics(server: LightningStoreServer) -> None:
    def series() -> int:
        _, text, _ = _get(server.endpoint + "/metrics", "s3cret")
        return sum(1 for line in text.splitlines() if line.startswith("agl_store_http_requests_total{"))

    def probe(i: int) -> None:
        assert _get(f"{server.endpoint}/v1/agl/probe-{i}")[0] == 401
        assert _get(f"{server.endpoint}/v1/agl/rollouts/ro-{i}/probe-{i}/x", "s3cret")[0] == 404

    probe(0)
    series()  # (a scrape is counted after its answer: the first one shows in the second)
    before = series()
    for i in range(1, 200):
        probe(i)
    assert series() == before
