"""The dashboard in a real browser, and the metrics of a real run.

``agl store`` (a subprocess, token required) serves a SQLite file; a short Baseline run of a calculator agent
(the OpenAI stand-in behind the agl LLM proxy) fills it while ``/metrics`` of the store and of the proxy are
scraped; then headless Chromium (any that ``agl.testing.browser`` finds, driven by Playwright; none: the browser
tests are skipped) opens every page and the test checks what is shown against the store's own answers. Screenshots go to a temporary folder; with
``AGL_TEST_UPDATE_SCREENSHOTS=1`` they replace the README's pictures in ``packages/agl-store/docs/``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agl.algorithms import Baseline
from agl.algorithms.adapter import NoDataReason
from agl.algorithms.adapter.diagnosis import no_data_note
from agl.proxy import LLMProxy
from agl.runner import Trainer
from agl.store import InMemoryLightningStore, LightningStoreClient, LightningStoreServer
from agl.testing.browser import CHROMIUM_ARGS, find_chromium
from agl.testing.e2e.dashboard_run import PROMPT_V1, PROMPT_V2, agl_store, calculator_agent
from agl.testing.e2e.proxy_harness import calculator_script
from agl.testing.openai_standin import StandinBackend, free_port, serve_standin
from agl.tracer import find_final_reward
from agl.types import PromptTemplate, ProxyLLM
from agl.types.semconv import AGL_LLM_CALL
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "packages" / "agl-store" / "docs"
SCREENSHOTS = (
    DOCS
    if os.environ.get("AGL_TEST_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "agl-dashboard"
)
"""Where ``shoot`` writes: the committed pictures are only replaced on request."""
TOKEN = "dash-secret-token"
N_TASKS = 12
EXPECTED_STATUS = re.compile(r"status of (401|422)")
"""Console errors the tests provoke on purpose (a wrong token, a bad sort field)."""


def scrape(url: str, token: str | None = TOKEN) -> dict[str, float]:
    """``/metrics`` parsed with prometheus_client: ``name{label=value,...}`` → value."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
        text = resp.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def total(values: dict[str, float], name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    out = 0.0
    for key, value in values.items():
        metric, _, rest = key.partition("{")
        have = dict(p.split("=", 1) for p in rest.rstrip("}").split(",") if p)
        if metric == name and all(have.get(k) == v for k, v in labels.items()):
            out += value
    return out


def api(endpoint: str, path: str, token: str | None = TOKEN) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(endpoint + path, headers=headers), timeout=10) as resp:
        return json.loads(resp.read())


def post(endpoint: str, path: str, body: Any) -> Any:
    """A write through the REST API (the browser tests run inside Playwright's event loop: no asyncio.run)."""
    request = urllib.request.Request(
        endpoint + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


@dataclass
class Run:
    endpoint: str
    db: Path
    proxy_scrapes: list[dict[str, float]] = field(default_factory=list)
    store_scrapes: list[dict[str, float]] = field(default_factory=list)
    mid_run_scrapes: int = 0
    proxy_final: dict[str, float] = field(default_factory=dict)
    spans: dict[str, list[Any]] = field(default_factory=dict)
    rollouts: list[Any] = field(default_factory=list)
    resources_ids: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    db = tmp_path_factory.mktemp("dash") / "run.db"
    with serve_standin(StandinBackend(script=calculator_script)) as standin, agl_store(db, TOKEN) as endpoint:
        proxy_port = free_port()
        client = LightningStoreClient(endpoint, token=TOKEN)
        proxy = LLMProxy(
            [
                {
                    "model_name": "calc-model",
                    "litellm_params": {"model": "hosted_vllm/standin", "api_base": standin.base_url},
                }
            ],
            store=client,
            port=proxy_port,
            auth_token=TOKEN,
        )
        result = Run(endpoint=endpoint, db=db)
        done = threading.Event()

        def scrape_while_running() -> None:
            while not done.is_set():
                try:
                    result.store_scrapes.append(scrape(endpoint + "/metrics"))
                    result.proxy_scrapes.append(scrape(f"http://127.0.0.1:{proxy_port}/metrics"))
                    if not done.is_set():
                        result.mid_run_scrapes += 1
                except (urllib.error.URLError, ConnectionError):
                    pass  # the proxy is not up yet
                done.wait(0.2)

        scraper = threading.Thread(target=scrape_while_running, daemon=True)
        scraper.start()
        trainer = Trainer(
            algorithm=Baseline(polling_interval=0.2),
            n_runners=2,
            strategy="shm",
            store=client,
            llm_proxy=proxy,
            initial_resources={
                "main_llm": ProxyLLM(
                    endpoint=f"http://127.0.0.1:{proxy_port}/v1", model="calc-model", api_key=TOKEN
                ),
                "instructions": PromptTemplate(template=PROMPT_V1),
            },
            progress=False,
        )
        # Started here (not by the Baseline) so that it can be scraped once more after the run.
        asyncio.run(proxy.start())
        try:
            trainer.fit(calculator_agent, [{"a": i, "b": 2 * i} for i in range(N_TASKS)])
            done.set()
            scraper.join(10)
            result.proxy_final = scrape(f"http://127.0.0.1:{proxy_port}/metrics")
        finally:
            asyncio.run(proxy.stop())

        async def read() -> None:
            client = LightningStoreClient(endpoint, token=TOKEN)
            second = await client.add_resources(
                {
                    "main_llm": ProxyLLM(endpoint=f"http://127.0.0.1:{proxy_port}/v1", model="calc-model"),
                    "instructions": PromptTemplate(template=PROMPT_V2),
                }
            )
            result.rollouts = list(await client.query_rollouts(sort_by="rollout_id"))
            for r in result.rollouts:
                result.spans[r.rollout_id] = list(await client.query_spans(r.rollout_id))
            result.resources_ids = [r.resources_id for r in await client.query_resources()]
            assert second.resources_id in result.resources_ids
            await client.close()

        asyncio.run(read())
        yield result


# -- metrics ------------------------------------------------------------------------------------


def test_metrics_scraped_during_the_run_agree_with_the_store(run: Run) -> None:
    assert run.mid_run_scrapes >= 1, "no scrape happened while the run was going on"
    final = scrape(run.endpoint + "/metrics")
    stats = api(run.endpoint, "/v1/agl/statistics")
    assert total(final, "agl_store_rollouts_created_total") == stats["total_rollouts"] == N_TASKS
    assert total(final, "agl_store_attempts_started_total") == stats["total_attempts"]
    assert total(final, "agl_store_spans_ingested_total") == stats["total_spans"] > 0
    assert total(final, "agl_store_rollouts", status="succeeded") == N_TASKS
    assert total(final, "agl_store_rollouts") == N_TASKS
    assert total(final, "agl_store_queue_depth") == 0
    assert total(final, "agl_store_attempts", status="succeeded") == stats["total_attempts"]
    assert total(final, "agl_store_attempts_retried_total") == 0
    assert total(final, "agl_store_resources_versions") == stats["total_resources"]
    # Requests by route template: every rollout was finished in one request (its last spans and outcome),
    # and claimed (with its resources) by a claim of its own or by the finish of the runner's previous one.
    finishes = total(
        final, "agl_store_http_requests_total", route="/v1/agl/rollouts/{id}/attempts/{id}/finish"
    )
    assert finishes == N_TASKS
    assert total(final, "agl_store_http_requests_total", route="/v1/agl/queues/rollouts/claim") >= 1
    assert total(final, "agl_store_http_request_duration_seconds_count") > 0
    # Counters only grow between scrapes.
    seen = [total(s, "agl_store_spans_ingested_total") for s in run.store_scrapes]
    assert seen == sorted(seen)


def test_proxy_metrics_count_every_llm_call_and_its_tokens(run: Run) -> None:
    llm_spans = [s for spans in run.spans.values() for s in spans if s.name == AGL_LLM_CALL]
    assert len(llm_spans) == 2 * N_TASKS
    assert run.proxy_scrapes, "the proxy's /metrics was never scraped during the run"
    last = run.proxy_final
    assert total(last, "agl_proxy_llm_calls_total", model="calc-model", outcome="ok") == len(llm_spans)
    tokens_in = sum(s.attributes["gen_ai.usage.input_tokens"] for s in llm_spans)
    tokens_out = sum(s.attributes["gen_ai.usage.output_tokens"] for s in llm_spans)
    assert total(last, "agl_proxy_llm_tokens_total", model="calc-model", direction="input") == tokens_in
    assert total(last, "agl_proxy_llm_tokens_total", model="calc-model", direction="output") == tokens_out
    assert total(last, "agl_proxy_llm_call_duration_seconds_count", model="calc-model") == len(llm_spans)
    routed = "/rollout/{id}/attempt/{id}/v1/chat/completions"
    assert total(last, "agl_proxy_http_requests_total", route=routed, status="200") == len(llm_spans)


def test_metrics_need_the_token(run: Run) -> None:
    for token in (None, "wrong"):
        with pytest.raises(urllib.error.HTTPError) as err:
            scrape(run.endpoint + "/metrics", token=token)
        err.value.close()  # the error holds the response and its socket
        assert err.value.code == 401


# -- the browser -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(run: Run) -> Iterator[Any]:
    # After the run: Playwright's sync API keeps an event loop on this thread, where asyncio.run() then fails.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=find_chromium(pw), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, run: Run) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    page = context.new_page()
    errors: list[str] = []
    requests: list[tuple[str, str]] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: (
            errors.append(msg.text) if msg.type == "error" and not EXPECTED_STATUS.search(msg.text) else None
        ),
    )
    page.on("request", lambda req: requests.append((req.method, req.url)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, errors
    # Nothing but the page's own files, the store's public GET routes and its /metrics (the algorithm's figures):
    # no second query path, no CDN.
    for method, url in requests:
        path = urllib.parse.urlsplit(url).path
        assert url.startswith(run.endpoint), url
        assert method == "GET", url
        assert path in ("/", "/dashboard", "/metrics") or path.startswith(("/dashboard/", "/v1/agl/")), url


def login(page: Any, endpoint: str, hash: str = "#/rollouts") -> None:
    page.goto(f"{endpoint}/dashboard{hash}")
    page.wait_for_selector("#token-input", state="visible")
    page.fill("#token-input", TOKEN)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#view:not([hidden])")


def shoot(page: Any, name: str, full_page: bool = False) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"dashboard-{name}.png"), full_page=full_page)


def test_token_prompt_wrong_token_refused_and_token_kept_out_of_the_url(page: Any, run: Run) -> None:
    page.goto(f"{run.endpoint}/")
    page.wait_for_selector("#token-input", state="visible")
    assert page.is_hidden("#view")
    shoot(page, "token")
    page.fill("#token-input", "not-the-token")
    page.click("#login-form button[type=submit]")
    page.wait_for_function("document.getElementById('login-error').textContent.includes('Wrong token')")
    assert page.is_hidden("#view")
    assert page.evaluate("sessionStorage.getItem('agl.store.token')") is None
    page.fill("#token-input", TOKEN)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#rollouts-table")
    assert TOKEN not in page.url
    assert page.evaluate("sessionStorage.getItem('agl.store.token')") == TOKEN
    # Kept for the session: a reload goes straight to the data.
    page.reload()
    page.wait_for_selector("#rollouts-table")
    assert page.is_hidden("#login")


def test_rollouts_page_shows_the_store_rows_sorts_filters_and_refreshes_live(page: Any, run: Run) -> None:
    login(page, run.endpoint, "#/rollouts?sort=rollout_id&order=asc")
    page.wait_for_selector("#rollouts-table tbody tr")
    rows = page.query_selector_all("#rollouts-table tbody tr")
    expected = sorted(run.rollouts, key=lambda r: r.rollout_id)
    assert [r.get_attribute("data-rollout-id") for r in rows] == [r.rollout_id for r in expected]
    assert page.inner_text("#range") == f"1\u2013{N_TASKS} of {N_TASKS}"
    first = expected[0]
    row = page.locator(f"tr[data-rollout-id='{first.rollout_id}']")
    assert row.locator("[data-col=status]").inner_text() == first.status
    assert row.locator("[data-col=mode]").inner_text() == "train"
    assert row.locator("[data-col=attempts]").inner_text() == "1"
    reward = find_final_reward(run.spans[first.rollout_id])
    assert reward == 1.0
    assert float(row.locator("[data-col=reward]").inner_text()) == reward
    shoot(page, "rollouts")

    # Sorted the other way by the server.
    page.click("th[data-sort=rollout_id]")
    page.wait_for_function("location.hash.includes('order=desc')")
    page.wait_for_selector(
        f"#rollouts-table tbody tr:first-child[data-rollout-id='{expected[-1].rollout_id}']"
    )

    # Filtered by status on the server: nothing is queuing yet.
    page.select_option("#status-filter", "queuing")
    page.wait_for_selector("#range[data-total='0']")

    # Live refresh: a rollout enqueued after the page loaded shows up without a reload.
    new_id = post(
        run.endpoint,
        "/v1/agl/queues/rollouts/enqueue",
        {"rollouts": [{"input": {"a": 100, "b": 1}, "mode": "val"}]},
    )[0]["rollout_id"]
    page.wait_for_selector(f"tr[data-rollout-id='{new_id}']", timeout=15_000)
    assert page.locator(f"tr[data-rollout-id='{new_id}'] [data-col=mode]").inner_text() == "val"

    # Filtered by mode on the server, together with the status filter.
    page.select_option("#mode-filter", "train")
    page.wait_for_selector("#range[data-total='0']")
    page.select_option("#mode-filter", "val")
    page.wait_for_selector("#range[data-total='1']")
    assert page.locator("#rollouts-table tbody tr").get_attribute("data-rollout-id") == new_id
    page.select_option("#mode-filter", "")
    post(run.endpoint, f"/v1/agl/rollouts/{new_id}", {"status": "cancelled"})
    page.wait_for_selector(f"tr[data-rollout-id='{new_id}']", state="detached", timeout=15_000)


def test_a_bad_query_is_refused_by_the_server_s_own_validation(page: Any, run: Run) -> None:
    login(page, run.endpoint, "#/rollouts?sort=no_such_field")
    page.wait_for_selector("#view-error")
    message = page.inner_text("#view-error")
    assert message.startswith("422") and "sort_by" in message
    direct = urllib.request.Request(
        run.endpoint + "/v1/agl/rollouts?sort_by=no_such_field", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(direct, timeout=10)
    assert err.value.code == 422 and json.loads(err.value.read())["detail"] in message


def test_one_rollout_page_shows_attempts_spans_llm_calls_and_rewards(page: Any, run: Run) -> None:
    target = sorted(run.rollouts, key=lambda r: r.rollout_id)[3]
    spans = run.spans[target.rollout_id]
    login(page, run.endpoint, f"#/rollout/{target.rollout_id}")
    page.wait_for_selector("#span-tree")
    assert page.inner_text("[data-testid=span-count]") == str(len(spans))
    assert float(page.inner_text("[data-testid=final-reward]")) == find_final_reward(spans)
    assert page.inner_text("[data-testid=resources-id]") == target.resources_id
    attempt_rows = page.query_selector_all("#attempts-table tbody tr")
    assert [r.get_attribute("data-attempt-id") for r in attempt_rows] == [target.attempt.attempt_id]
    assert target.attempt.worker_id and target.attempt.worker_id in attempt_rows[0].inner_text()
    # Every span is in the tree and the timeline.
    assert page.locator("#span-tree details").count() == len(spans)
    assert page.locator("#timeline rect").count() == len(spans)
    # The LLM calls, with their messages, tool call and token counts.
    llm = sorted((s for s in spans if s.name == AGL_LLM_CALL), key=lambda s: s.sequence_id)
    cards = page.locator("#llm-calls .llm-call")
    assert cards.count() == len(llm) == 2
    a, b = target.input["a"], target.input["b"]
    first_card = cards.nth(0).inner_text()
    assert f"Please add {a} and {b}." in first_card
    assert f'add({{"a": {a}, "b": {b}}})' in first_card
    tokens = llm[0].attributes
    assert (
        f"{tokens['gen_ai.usage.input_tokens']} in / {tokens['gen_ai.usage.output_tokens']} out" in first_card
    )
    assert f"The sum is {a + b}" in cards.nth(1).inner_text()
    # Per-turn and final rewards, and the annotation.
    reward_rows = page.locator("#rewards-table tbody tr")
    assert reward_rows.count() == 2
    assert "0.5" in reward_rows.nth(0).inner_text() and "1" in reward_rows.nth(1).inner_text()
    assert page.locator("#annotations > div").count() == 1  # the reward spans are listed as rewards
    assert f"{a}+{b}" in page.inner_text("#annotations")
    shoot(page, "rollout", full_page=True)
    # A span's attributes open on demand.
    page.locator("#span-tree summary").first.click()
    page.wait_for_selector("#span-tree details[open] pre")
    # Secrets in resources are not shown.
    assert TOKEN not in page.inner_text("#view")


def test_one_rollout_page_says_why_the_rollout_gave_no_training_data(page: Any, run: Run) -> None:
    target = sorted(run.rollouts, key=lambda r: r.rollout_id)[-1]
    login(page, run.endpoint, f"#/rollout/{target.rollout_id}")
    page.wait_for_selector("#span-tree")
    assert page.locator("#no-training-data").count() == 0  # it trained: nothing to say
    reason = NoDataReason.BYPASSED_PROXY
    post(
        run.endpoint,
        f"/v1/agl/rollouts/{target.rollout_id}",
        {"metadata": {**(target.metadata or {}), **no_data_note(reason)}},
    )
    try:
        page.reload()
        page.wait_for_selector("#no-training-data")
        notice = page.inner_text("#no-training-data")
        assert f"No training data: {reason.value}" in notice and f"Fix: {reason.fix}" in notice
    finally:
        post(run.endpoint, f"/v1/agl/rollouts/{target.rollout_id}", {"metadata": target.metadata})


def test_resources_page_shows_every_version_and_a_template_diff(page: Any, run: Run) -> None:
    login(page, run.endpoint, "#/resources")
    page.wait_for_selector("#resources-table")
    ids = [r.get_attribute("data-resources-id") for r in page.query_selector_all("#resources-table tbody tr")]
    assert sorted(ids) == sorted(run.resources_ids) and len(ids) == 2
    for item in api(run.endpoint, "/v1/agl/resources")["items"]:
        shown = page.inner_text(f"tr[data-resources-id='{item['resources_id']}'] [data-col=version]")
        assert shown == str(item["version"])
    diff = page.inner_text("#template-diff")
    assert "- You are a calculator." in diff and "+ You are a careful calculator." in diff
    assert "+ Answer with the sum only." in diff and "= Please add {a} and {b}." in diff
    assert "You are a careful calculator." in page.inner_text("#resources-detail")
    page.locator("tr[data-resources-id='default'] a").click()
    page.wait_for_function("document.getElementById('shown-resources').textContent === 'default'")
    assert TOKEN not in page.inner_text("#resources-detail")  # the proxy LLM's api_key is masked
    shoot(page, "resources")


def test_workers_page_shows_each_runner(page: Any, run: Run) -> None:
    workers = api(run.endpoint, "/v1/agl/workers")["items"]
    login(page, run.endpoint, "#/workers")
    page.wait_for_selector("#workers-table")
    shown = [r.get_attribute("data-worker-id") for r in page.query_selector_all("#workers-table tbody tr")]
    assert sorted(shown) == sorted(w["worker_id"] for w in workers) and shown
    for worker in workers:
        age = page.inner_text(f"tr[data-worker-id='{worker['worker_id']}'] [data-col=heartbeat-age]")
        assert age == "never" if worker["last_heartbeat_time"] is None else age.endswith(("ms", " s", "min"))
    shoot(page, "workers")


def test_training_page_draws_reward_and_throughput(page: Any, run: Run) -> None:
    stats = api(run.endpoint, "/v1/agl/statistics")
    login(page, run.endpoint, "#/training")
    page.wait_for_selector("[data-testid=chart-throughput] svg")
    assert page.inner_text("[data-testid=total-spans]") == str(stats["total_spans"])
    assert page.inner_text("[data-testid=count-succeeded]") == str(N_TASKS)
    assert page.locator("[data-testid=chart-throughput] circle").count() >= 1
    assert page.locator("[data-testid=chart-reward] circle").count() >= 1
    assert page.locator("[data-testid=chart-versions] rect").count() == 1
    version = run.rollouts[0].resources_id
    assert page.inner_text(f"#versions-table tr[data-resources-id='{version}'] td:nth-child(3)") == "1"
    shoot(page, "training")


def test_dashboard_needs_no_token_when_the_store_has_none(browser: Any, tmp_path: Path) -> None:
    with agl_store(tmp_path / "open.db", None) as endpoint:
        context = browser.new_context(bypass_csp=True)
        page = context.new_page()
        try:
            page.goto(endpoint + "/dashboard")
            page.wait_for_selector("#rollouts-table")
            assert page.is_hidden("#login")
        finally:
            context.close()
        # No token: /metrics is open too.
        assert (
            "agl_store_rollouts" in urllib.request.urlopen(endpoint + "/metrics", timeout=10).read().decode()
        )


def test_dashboard_page_open_times_on_a_large_store(browser: Any, tmp_path: Path) -> None:
    """10,000 rollouts and 100,000 spans in SQLite: time the rollouts page and a 200-span rollout (printed)."""
    from agl.testing.e2e.dashboard_pages import fill_large_store, time_pages

    db = tmp_path / "large.db"
    with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
        big_rollout = pool.submit(asyncio.run, fill_large_store(db)).result()
    with agl_store(db, TOKEN) as endpoint:
        figures = time_pages(browser, endpoint, TOKEN, big_rollout, CHROMIUM_ARGS)
    print(f"\ndashboard page-open times on 10,000 rollouts / 100,000 spans (SQLite): {figures}")
    assert figures["rollouts_rows"] == 50 and figures["rollout_spans"] == 200


def test_training_page_shows_the_algorithms_figures_from_the_stores_metrics(browser: Any) -> None:
    """An algorithm in the store's process (as under the Trainer) reports staleness, importance ratios and the
    rest through AlgorithmMetrics; the training page shows them from the store's /metrics."""
    from agl.algorithms.metrics import AlgorithmMetrics

    figures = {
        "step": 7,
        "staleness_max": 2,
        "staleness": {0: 10, 1: 4, 2: 2},
        "is_ratio_mean": 0.98,
        "is_ratio_max": 1.7,
        "clip_fraction": 0.125,
        "dropped_samples": 8,
        "loss": 0.5,
    }
    AlgorithmMetrics("dashboard_test").log("train", figures)
    server = LightningStoreServer(InMemoryLightningStore(), port=0, token=TOKEN)
    server.start()
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    try:
        login(page, server.endpoint, "#/training")
        mine = (
            "#algorithm-figures [data-algorithm=dashboard_test]"  # alone, unless other tests logged figures
        )
        page.wait_for_selector(mine)
        assert page.inner_text(f"{mine} [data-testid=algo-staleness_max]") == "2"
        assert page.inner_text(f"{mine} [data-testid=algo-is_ratio_max]") == "1.7"
        assert page.inner_text(f"{mine} [data-testid=algo-clip_fraction]") == "0.125"
        assert page.inner_text(f"{mine} [data-testid=algo-dropped_samples]") == "8"
        assert page.locator(f"{mine} [data-testid=chart-staleness] rect").count() == 3
        row = page.locator(
            "#algorithm-table tr[data-figure='dashboard_test.train.loss'] td"
        ).all_text_contents()  # inside the closed <details>
        assert row[0] == "dashboard_test" and row[-1] == "0.5"
        shoot(page, "training-algorithm")
    finally:
        context.close()
        server.stop()
