"""Each package builds into a wheel that installs and imports alone, with only its declared dependencies."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="needs the uv command")


def _uv(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    return subprocess.run(
        ["uv", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600
    )


def test_types_and_store_wheels_install_and_import_alone(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    for package in ("agl-types", "agl-store"):
        built = _uv("build", "--package", package, "--wheel", "-o", str(dist), "-q")
        assert built.returncode == 0, built.stderr
    wheels = sorted(str(p) for p in dist.glob("*.whl"))
    assert len(wheels) == 2, wheels

    venv = tmp_path / "venv"
    created = _uv("venv", "-q", "--python", f"{sys.version_info.major}.{sys.version_info.minor}", str(venv))
    assert created.returncode == 0, created.stderr
    python = venv / "bin" / "python"
    installed = _uv("pip", "install", "-q", "--python", str(python), *wheels)
    assert installed.returncode == 0, installed.stderr

    code = (
        "from agl.store import InMemoryLightningStore\n"
        "import asyncio\n"
        "async def main():\n"
        "    store = InMemoryLightningStore()\n"
        "    rollout = await store.enqueue_rollout(input={'q': 1})\n"
        "    claimed = await store.dequeue_rollout(worker_id='w')\n"
        "    assert claimed is not None and claimed.rollout_id == rollout.rollout_id\n"
        "    from agl.store.dashboard import dashboard_files\n"
        "    files = set(dashboard_files())\n"
        "    assert {'index.html', 'app.js', 'style.css', 'rollouts.js', 'charts.js'} <= files, files\n"
        "    print('ok')\n"
        "asyncio.run(main())\n"
    )
    run = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
