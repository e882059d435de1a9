"""Dashboard page-open times on a large store: 10,000 rollouts and 100,000 spans in SQLite.

Fills a SQLite file through the store's API (10,000 finished rollouts; one of them has 200 spans in a
parent/child tree, the others share the remaining 99,800), serves it with ``agl store`` and opens, in
headless Chromium (Playwright; any Chromium ``agl.testing.browser`` finds), the rollouts page and the 200-span
rollout. Prints the time from navigation until the page's rows are drawn (the median of a few opens).

    uv run python benchmarks/dashboard_bench.py [--db /tmp/large.db]

``tests/test_dashboard.py`` runs the same measurement (``agl.testing.e2e.dashboard_pages``) and prints it
(no timed assertion).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from agl.testing.e2e.dashboard_pages import N_ROLLOUTS, N_SPANS, fill_large_store, time_pages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", type=Path, default=None, help="SQLite file to fill (default: a temporary one)"
    )
    args = parser.parse_args()
    from agl.testing.browser import CHROMIUM_ARGS, find_chromium
    from agl.testing.e2e.dashboard_run import agl_store
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "large.db"
        started = time.perf_counter()
        big = asyncio.run(fill_large_store(db))
        print(
            f"filled {db} with {N_ROLLOUTS} rollouts and {N_SPANS} spans in {time.perf_counter() - started:.1f} s"
        )
        with agl_store(db, "bench") as endpoint, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=find_chromium(pw), args=CHROMIUM_ARGS)
            try:
                figures = time_pages(browser, endpoint, "bench", big, CHROMIUM_ARGS)
            finally:
                browser.close()
    print(f"rollouts page: {figures['rollouts_page_s']:.3f} s ({figures['rollouts_rows']} rows)")
    print(f"200-span rollout: {figures['rollout_200_spans_s']:.3f} s ({figures['rollout_spans']} spans)")
    print(f"/metrics scrape: {figures['metrics_scrape_s']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
