"""The dashboard's files as the store server serves them (the browser tests are in tests/test_dashboard.py)."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from agl.store import LightningStoreServer
from agl.store.dashboard import dashboard_files
from agl.testing.store.http import running_server


@pytest.fixture
def server() -> Iterator[LightningStoreServer]:
    with running_server(token="s3cret") as srv:
        yield srv


def _get(url: str, method: str = "GET") -> tuple[int, bytes, Any]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers


@pytest.mark.parametrize("path", ["/", "/dashboard", "/dashboard/"])
def test_the_page_is_served_without_the_token_and_holds_no_data(
    server: LightningStoreServer, path: str
) -> None:
    status, body, headers = _get(server.endpoint + path)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'<script type="module" src="/dashboard/app.js">' in body
    csp = headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
    # The data itself still needs the token.
    assert _get(server.endpoint + "/v1/agl/rollouts")[0] == 401


def test_every_file_is_served_with_its_type_and_nothing_else(server: LightningStoreServer) -> None:
    files = dashboard_files()
    for name, content in files.items():
        status, body, headers = _get(f"{server.endpoint}/dashboard/{name}")
        assert status == 200 and body == content, name
        kind = {"html": "text/html", "js": "text/javascript", "css": "text/css"}[name.rsplit(".", 1)[1]]
        assert headers["Content-Type"].startswith(kind)
    assert _get(server.endpoint + "/dashboard/app.js", "HEAD")[1] == b""
    for missing in ("/dashboard/nope.js", "/dashboard/../server.py", "/dashboard/static/app.js"):
        assert _get(server.endpoint + missing)[0] in (401, 404), missing
    assert _get(server.endpoint + "/dashboard", "POST")[0] in (401, 404, 405)


def test_every_module_import_resolves_to_a_shipped_file_and_nothing_comes_from_elsewhere() -> None:
    files = dashboard_files()
    for name, content in files.items():
        text = content.decode()
        for target in re.findall(r"""from\s+["']\./([\w.]+)["']|import\(["']\./([\w.]+)["']\)""", text):
            module = next(t for t in target if t)
            assert module in files, f"{name} imports ./{module}, which is not shipped"
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text, (
            name
        )
        assert "innerHTML" not in text, f"{name}: data goes into the page as text only"
