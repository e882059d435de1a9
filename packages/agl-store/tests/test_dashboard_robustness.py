"""The dashboard against awkward data: span parent cycles, long prompt templates, nested secrets, framing.

The browser tests import the page's own modules (``/dashboard/*.js``) in headless Chromium (any that
``agl.testing.browser`` finds; none: they are skipped) from an in-process store server.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from agl.store import LightningStoreClient, LightningStoreServer
from agl.store.dashboard import dashboard_files
from agl.testing.browser import CHROMIUM_ARGS, find_chromium
from agl.testing.spans import make_span
from agl.testing.store.http import running_server
from agl.types import LLM, PromptTemplate

NESTED_SECRET = "sk-nested-secret"


class Data:
    """What the store holds: rollouts whose spans form parent cycles."""

    plain_cycle: str = ""
    shared_id_cycle: str = ""


async def _fill(endpoint: str) -> Data:
    client = LightningStoreClient(endpoint)
    data = Data()
    try:
        # Two spans, each the other's parent: neither hangs from a root.
        first = await client.start_rollout({"task": "plain cycle"})
        a = first.attempt.attempt_id
        data.plain_cycle = first.rollout_id
        await client.add_many_spans(
            [
                make_span(first.rollout_id, a, 1, name="root", span_id="r1", start_time=1.0),
                make_span(first.rollout_id, a, 2, name="child", span_id="c1", parent_id="r1", start_time=1.1),
                make_span(
                    first.rollout_id, a, 3, name="loop-a", span_id="la", parent_id="lb", start_time=1.2
                ),
                make_span(
                    first.rollout_id, a, 4, name="loop-b", span_id="lb", parent_id="la", start_time=1.3
                ),
            ]
        )
        # A span id used by two attempts closes a loop under a real root: shared → middle → shared-again → ...
        second = await client.start_rollout({"task": "shared id"})
        retry = await client.start_attempt(second.rollout_id)
        rid, a1, a2 = second.rollout_id, second.attempt.attempt_id, retry.attempt.attempt_id
        data.shared_id_cycle = rid
        await client.add_many_spans(
            [
                make_span(rid, a1, 1, name="shared", span_id="sh", start_time=1.0),
                make_span(rid, a2, 2, name="middle", span_id="md", parent_id="sh", start_time=1.1),
                make_span(rid, a2, 3, name="shared-again", span_id="sh", parent_id="md", start_time=1.2),
            ]
        )
        await client.add_resources(
            {
                "llm": LLM(
                    endpoint="http://127.0.0.1:1/v1",
                    model="m",
                    sampling_parameters={"temperature": 0.5, "max_tokens": 64, "api_key": NESTED_SECRET},
                ),
                "prompt": PromptTemplate(template="hello"),
            }
        )
    finally:
        await client.close()
    return data


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LightningStoreServer, Data]]:
    with running_server() as srv:
        # Filled before Playwright starts: its sync API keeps an event loop on this thread.
        with ThreadPoolExecutor(1) as pool:
            data = pool.submit(asyncio.run, _fill(srv.endpoint)).result()
        yield srv, data


@pytest.fixture(scope="module")
def browser(server: tuple[LightningStoreServer, Data]) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=find_chromium(pw), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any, server: tuple[LightningStoreServer, Data]) -> Iterator[Any]:
    context = browser.new_context()  # the served CSP applies: the modules load under it
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: (
            errors.append(msg.text)
            if msg.type == "error" and not msg.location.get("url", "").endswith("/favicon.ico")
            else None
        ),
    )
    try:
        yield page
    finally:
        context.close()
    assert not errors, errors


# -- (a) span parent cycles ------------------------------------------------------------------------


def _tree(page: Any, endpoint: str, rollout_id: str) -> list[str]:
    """The span tree's entries, as "depth:name", in page order."""
    page.goto(f"{endpoint}/dashboard#/rollout/{rollout_id}")
    page.wait_for_selector("#span-tree, #view-error", timeout=15_000)
    assert page.locator("#view-error").count() == 0, page.inner_text("#view-error")
    return page.evaluate(
        """() => [...document.querySelectorAll('#span-tree details')].map((d) => {
            let depth = 0;
            for (let n = d.parentElement; n.id !== 'span-tree'; n = n.parentElement) if (n.tagName === 'UL') depth++;
            return `${depth - 1}:${d.querySelector('summary').childNodes[1].textContent}`;
        })"""
    )


def test_spans_on_a_parent_cycle_are_shown_once_as_a_tree_of_their_own(
    page: Any, server: tuple[LightningStoreServer, Data]
) -> None:
    srv, data = server
    assert _tree(page, srv.endpoint, data.plain_cycle) == ["0:root", "1:child", "0:loop-a", "1:loop-b"]


def test_a_span_id_shared_by_two_attempts_cannot_loop_the_tree(
    page: Any, server: tuple[LightningStoreServer, Data]
) -> None:
    srv, data = server
    assert _tree(page, srv.endpoint, data.shared_id_cycle) == ["0:shared", "1:middle", "2:shared-again"]


# -- (b) the prompt template diff ------------------------------------------------------------------

LINE_DIFF = """async ([before, after]) => {
    const { lineDiff } = await import('/dashboard/diff.js');
    const started = performance.now();
    const out = lineDiff(before, after);
    return { out, ms: performance.now() - started };
}"""


def _diff(page: Any, endpoint: str, before: list[str], after: list[str]) -> list[tuple[str, str]]:
    page.goto(f"{endpoint}/dashboard/")
    result = page.evaluate(LINE_DIFF, ["\n".join(before), "\n".join(after)])
    print(f"\nlineDiff of {len(before)} / {len(after)} lines: {result['ms']:.1f} ms")
    out = [(op, line) for op, line in result["out"]]
    assert [line for op, line in out if op != "+"] == before
    assert [line for op, line in out if op != "-"] == after
    return out


def _lines(n: int) -> list[str]:
    return [f"line {i}" for i in range(n)]


def test_line_diff_of_small_texts_is_minimal(page: Any, server: tuple[LightningStoreServer, Data]) -> None:
    srv, _ = server
    assert _diff(page, srv.endpoint, ["a", "b", "c"], ["a", "x", "c", "d"]) == [
        ("=", "a"),
        ("-", "b"),
        ("+", "x"),
        ("=", "c"),
        ("+", "d"),
    ]
    assert _diff(page, srv.endpoint, [""], [""]) == [("=", "")]
    assert _diff(page, srv.endpoint, ["same"], ["new", "same"]) == [("+", "new"), ("=", "same")]


def test_line_diff_of_long_templates_with_a_few_close_edits_is_minimal(
    page: Any, server: tuple[LightningStoreServer, Data]
) -> None:
    srv, _ = server
    before = _lines(20_000)
    after = [*before[:10_000], "changed", "line 10001", "line 10003", "line 10004", "new", *before[10_005:]]
    out = _diff(page, srv.endpoint, before, after)
    middle = [("-", "line 10000"), ("+", "changed"), ("=", "line 10001"), ("-", "line 10002")]
    middle += [("=", "line 10003"), ("=", "line 10004"), ("+", "new")]
    assert out == [("=", x) for x in before[:10_000]] + middle + [("=", x) for x in before[10_005:]]


def test_line_diff_beyond_the_budget_shows_the_changed_middle_as_one_block(
    page: Any, server: tuple[LightningStoreServer, Data]
) -> None:
    srv, _ = server
    before = _lines(20_000)
    after = [*before[:100], "first change", *before[101:19_900], "last change", *before[19_901:]]
    out = _diff(page, srv.endpoint, before, after)
    expected = [("=", x) for x in before[:100]]
    expected += [("-", x) for x in before[100:19_901]] + [("+", x) for x in after[100:19_901]]
    assert out == expected + [("=", x) for x in before[19_901:]]


def test_line_diff_of_unchanged_templates_is_not_computed_again(
    page: Any, server: tuple[LightningStoreServer, Data]
) -> None:
    srv, _ = server
    page.goto(f"{srv.endpoint}/dashboard/")
    same, seconds = page.evaluate(
        """async () => {
            const { lineDiff } = await import('/dashboard/diff.js');
            const a = Array.from({ length: 20000 }, (_, i) => `line ${i}`).join('\\n');
            const b = a.replace('line 5000\\n', 'line five thousand\\n');
            const first = lineDiff(a, b);
            const started = performance.now();
            // Equal texts that are not the same objects: a refresh parses the templates anew.
            const again = lineDiff(a.slice(0, 10) + a.slice(10), b.slice(0, 10) + b.slice(10));
            return [first === again, (performance.now() - started) / 1000];
        }"""
    )
    print(f"\nlineDiff of unchanged 20,000-line templates, again: {seconds * 1000:.2f} ms")
    assert same


# -- (c) secrets in resources ----------------------------------------------------------------------


def test_secrets_are_masked_at_every_depth(page: Any, server: tuple[LightningStoreServer, Data]) -> None:
    srv, _ = server
    resource: dict[str, Any] = {
        "resource_type": "llm",
        "model": "m",
        "api_key": "sk-top",
        "empty_token": "",
        "sampling_parameters": {
            "temperature": 0.5,
            "max_tokens": 256,
            "api_key": "sk-nested",
            "extra_headers": {"X-Api-Key": "xk-header", "Authorization": "Bearer bt", "User-Agent": "ua"},
        },
        "fallbacks": [{"model": "m2", "client_secret": "cs-in-list", "password": "pw"}],
    }
    page.goto(f"{srv.endpoint}/dashboard/")
    text, original = page.evaluate(
        """async (resource) => {
            const { masked } = await import('/dashboard/util.js');
            // Deeper than any real resource (Playwright passes no such argument): hidden, not walked.
            let deep = { token: 'deep-token', note: 'deep-note' };
            for (let i = 0; i < 100; i++) deep = { next: deep };
            resource.deep = deep;
            const copy = JSON.stringify(resource);
            return [JSON.stringify(masked(resource)), JSON.stringify(resource) === copy];
        }""",
        resource,
    )
    assert original, "masked() changed its argument"
    for secret in ("sk-top", "sk-nested", "xk-header", "Bearer bt", "cs-in-list", '"pw"', "deep-"):
        assert secret not in text, secret
    shown = json.loads(text)
    hidden = "\u2022" * 6
    params = shown["sampling_parameters"]
    assert (
        params["api_key"] == params["extra_headers"]["X-Api-Key"] == params["extra_headers"]["Authorization"]
    )
    assert params["api_key"] == shown["fallbacks"][0]["client_secret"] == shown["api_key"] == hidden
    # What is no secret stays readable.
    assert params["temperature"] == 0.5 and params["max_tokens"] == 256 and shown["empty_token"] == ""
    assert params["extra_headers"]["User-Agent"] == "ua" and shown["fallbacks"][0]["model"] == "m2"


def test_the_resources_page_shows_no_nested_secret(
    page: Any, server: tuple[LightningStoreServer, Data]
) -> None:
    srv, _ = server
    page.goto(f"{srv.endpoint}/dashboard#/resources")
    page.wait_for_selector("#resources-detail [data-resource-name=llm]")
    detail = page.inner_text("#resources-detail")
    assert "temperature" in detail and NESTED_SECRET not in detail


# -- (d) framing -----------------------------------------------------------------------------------


def test_no_other_site_may_frame_the_dashboard(server: tuple[LightningStoreServer, Data]) -> None:
    srv, _ = server
    for path in ["/", "/dashboard", *(f"/dashboard/{name}" for name in dashboard_files())]:
        with urllib.request.urlopen(srv.endpoint + path, timeout=10) as resp:
            headers = resp.headers
        assert headers["X-Frame-Options"] == "DENY", path
        csp = [d.strip() for d in headers["Content-Security-Policy"].split(";")]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp, path
