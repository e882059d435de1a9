"""The package's layout: every public import path still works after the memory/ and http/ move, each public
path hands out the very objects of the module that defines them, and no module grows past ~600 lines."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from agl.testing.child import run_python

SRC = Path(__file__).resolve().parents[1] / "src" / "agl" / "store"

# (public path, the module that defines its names, names that must be the same objects in both)
PUBLIC_PATHS = [
    ("agl.store.memory", "agl.store.memory.store", ["InMemoryLightningStore"]),
    (
        "agl.store.server",
        "agl.store.http.server.store",
        ["LightningStoreServer", "DEFAULT_PORT", "DEFAULT_MAX_BODY_BYTES", "TOKEN_ENV"],
    ),
    ("agl.store.client", "agl.store.http.client.store", ["LightningStoreClient"]),
    ("agl.store.serving", "agl.store.http.server._uvicorn", ["ConnectionLimits", "server_protocol_class"]),
    ("agl.store.serving", "agl.store.http.server._gc", ["SERVING_GC_THRESHOLD", "serving_gc"]),
    ("agl.store.serving", "agl.store.http.server._loop", ["run_fast"]),
    (
        "agl.store.metrics",
        "agl.store.http.server.metrics",
        ["METRICS_PATH", "MetricsMiddleware", "StoreFigures", "multiprocess_enabled", "route_template"],
    ),
    (
        "agl.store.otlp",
        "agl.store.http.server.otlp",
        ["OTLPIngestError", "install_otlp_routes", "rpc_status"],
    ),
    ("agl.store.dashboard", "agl.store.http.server.dashboard", ["DashboardMiddleware", "dashboard_files"]),
    ("agl.store.http.server", "agl.store.http.server.store", ["LightningStoreServer", "DEFAULT_PORT"]),
    ("agl.store.http.client", "agl.store.http.client.store", ["LightningStoreClient"]),
    ("agl.store.sql", "agl.store.sql.store", ["SqlLightningStore"]),
]


@pytest.mark.parametrize(
    ("path", "home", "names"), PUBLIC_PATHS, ids=[f"{p}<-{h}" for p, h, _ in PUBLIC_PATHS]
)
def test_public_paths_hand_out_the_defining_modules_objects(path: str, home: str, names: list[str]) -> None:
    public, defining = importlib.import_module(path), importlib.import_module(home)
    for name in names:
        assert getattr(public, name) is getattr(defining, name), f"{path}.{name}"


def test_every_name_of_agl_store_resolves() -> None:
    import agl.store

    missing = [name for name in agl.store.__all__ if not hasattr(agl.store, name)]
    assert not missing


def test_the_dashboard_files_ship_with_the_package() -> None:
    from agl.store.dashboard import dashboard_files

    assert {"index.html", "app.js", "style.css"} <= set(dashboard_files())


def test_importing_the_metrics_or_the_uvicorn_plumbing_does_not_import_the_server() -> None:
    """What the LLM proxy imports from the store stays cheap: not the server, not FastAPI."""
    code = (
        "import sys, agl.store.metrics, agl.store.serving\n"
        "print(sorted(m for m in ('agl.store.http.server.store', 'agl.store.http.server._app', 'fastapi')"
        " if m in sys.modules))\n"
    )
    assert run_python(code, timeout=60).strip() == "[]"


def test_no_module_is_over_600_lines() -> None:
    sizes = {str(p.relative_to(SRC)): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    assert not {name: n for name, n in sizes.items() if n > 600}
