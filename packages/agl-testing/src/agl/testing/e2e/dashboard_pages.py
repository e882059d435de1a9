"""A large dashboard store and the time its pages take to open (shared by tests/test_dashboard.py and
benchmarks/dashboard_bench.py).

:func:`fill_large_store` fills a SQLite file through the store's API: 10,000 finished rollouts, one of them
with 200 spans in a parent/child tree, the others sharing 99,800. :func:`time_pages` opens, in a browser
Playwright launched, the rollouts page and the 200-span rollout, and returns the time from navigation until
the page's rows are drawn (the median of a few opens), plus a ``/metrics`` scrape.
"""

from __future__ import annotations

import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from agl.types import EnqueueRolloutRequest, Span, TraceStatus, new_span_id

__all__ = ["BIG_ROLLOUT_SPANS", "N_ROLLOUTS", "N_SPANS", "fill_large_store", "time_pages"]

N_ROLLOUTS = 10_000
N_SPANS = 100_000
BIG_ROLLOUT_SPANS = 200
OPENS = 3


def _span(rollout_id: str, attempt_id: str, seq: int, t0: float, parent: str | None, span_id: str) -> Span:
    reward = seq % 10 == 9
    attributes: dict[str, Any] = {"step": seq, "note": "x" * 64}
    if reward:
        attributes.update(
            {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": seq / 1000}
        )
    return Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=seq,
        trace_id="b" * 32,
        span_id=span_id,
        parent_id=parent,
        name="agentlightning.reward" if reward else f"step-{seq % 7}",
        status=TraceStatus(status_code="OK"),
        attributes=attributes,
        start_time=t0 + seq * 0.01,
        end_time=t0 + seq * 0.01 + 0.005,
    )


async def fill_large_store(db: Path) -> str:
    """Fill ``db``; returns the id of the 200-span rollout."""
    from agl.store import SqlLightningStore

    store = SqlLightningStore(f"sqlite:///{db}")
    try:
        await store.add_resources({})
        ids: list[tuple[str, str]] = []
        for start in range(0, N_ROLLOUTS, 1000):
            batch = [
                EnqueueRolloutRequest(input={"i": i}, mode="train" if i % 5 else "val")
                for i in range(start, start + 1000)
            ]
            await store.enqueue_many_rollouts(batch)
            for r in await store.dequeue_many_rollouts(limit=1000, worker_id=f"worker-{start // 1000}"):
                ids.append((r.rollout_id, r.attempt.attempt_id))
        big_rollout, big_attempt = ids[N_ROLLOUTS // 2]
        spans: list[Span] = []
        t0 = time.time()
        root = new_span_id()
        for seq in range(1, BIG_ROLLOUT_SPANS + 1):
            span_id = root if seq == 1 else new_span_id()
            spans.append(_span(big_rollout, big_attempt, seq, t0, None if seq == 1 else root, span_id))
        others = [pair for pair in ids if pair[0] != big_rollout]
        per = (N_SPANS - BIG_ROLLOUT_SPANS) // len(others)
        extra = (N_SPANS - BIG_ROLLOUT_SPANS) - per * len(others)
        for k, (rid, aid) in enumerate(others):
            count = per + (1 if k < extra else 0)
            root = new_span_id()
            for seq in range(1, count + 1):
                spans.append(
                    _span(rid, aid, seq, t0, None if seq == 1 else root, root if seq == 1 else new_span_id())
                )
            if len(spans) >= 5000:
                await store.add_many_spans(spans)
                spans = []
        if spans:
            await store.add_many_spans(spans)
        for k, (rid, aid) in enumerate(ids):
            status = "succeeded" if k % 10 else "failed"
            await store.update_attempt(rid, aid, status=status, metadata={"final_reward": (k % 100) / 100})
        stats = await store.statistics()
        assert stats.get("total_spans") == N_SPANS and stats.get("total_rollouts") == N_ROLLOUTS, stats
        return big_rollout
    finally:
        await store.close()


def _open(page: Any, url: str, selector: str, min_count: int) -> float:
    started = time.perf_counter()
    page.goto(url)
    page.wait_for_function(
        "([sel, n]) => document.querySelectorAll(sel).length >= n", arg=[selector, min_count], timeout=60_000
    )
    return time.perf_counter() - started


def time_pages(browser: Any, endpoint: str, token: str, big_rollout: str, args: list[str]) -> dict[str, Any]:
    """Median seconds to open the rollouts page (50 rows) and the 200-span rollout (its tree drawn)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    try:
        page = context.new_page()
        page.goto(endpoint + "/dashboard")
        page.evaluate("t => sessionStorage.setItem('agl.store.token', t)", token)
        rollouts: list[float] = []
        rollout: list[float] = []
        rows = spans = 0
        for _ in range(OPENS):
            page.goto("about:blank")
            rollouts.append(_open(page, endpoint + "/dashboard#/rollouts", "#rollouts-table tbody tr", 50))
            rows = int(page.locator("#rollouts-table tbody tr").count())
            page.goto("about:blank")
            rollout.append(
                _open(
                    page,
                    f"{endpoint}/dashboard#/rollout/{big_rollout}",
                    "#span-tree details",
                    BIG_ROLLOUT_SPANS,
                )
            )
            spans = int(page.locator("#span-tree details").count())
        scrapes: list[float] = []
        for _ in range(OPENS):
            started = time.perf_counter()
            request = urllib.request.Request(
                endpoint + "/metrics", headers={"Authorization": f"Bearer {token}"}
            )
            with urllib.request.urlopen(request, timeout=60) as resp:
                resp.read()
            scrapes.append(time.perf_counter() - started)
        return {
            "rollouts_page_s": round(statistics.median(rollouts), 3),
            "metrics_scrape_s": round(statistics.median(scrapes), 3),
            "rollout_200_spans_s": round(statistics.median(rollout), 3),
            "rollouts_rows": rows,
            "rollout_spans": spans,
        }
    finally:
        context.close()
