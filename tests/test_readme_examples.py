"""The examples in the package READMEs run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _first_python_block(readme: Path) -> str:
    match = re.search(r"```python\n(.*?)```", readme.read_text(), re.S)
    assert match, f"no python example in {readme}"
    return match.group(1)


def _run(code: str, tmp_path: Path) -> str:
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.timeout(150)
def test_runner_readme_example(tmp_path: Path) -> None:
    out = _run(_first_python_block(ROOT / "packages/agl-runner/README.md"), tmp_path)
    assert "2 rollouts" in out and "succeeded=2" in out and "mean reward 0.5000" in out


@pytest.mark.timeout(150)
def test_algorithms_readme_example(tmp_path: Path) -> None:
    out = _run(_first_python_block(ROOT / "packages/agl-algorithms/README.md"), tmp_path)
    assert "best prompt: Hi {name}!" in out


@pytest.mark.timeout(150)
def test_root_readme_example_against_a_local_model(tmp_path: Path) -> None:
    from agl.testing.openai_standin import StandinBackend, serve_standin

    code = _first_python_block(ROOT / "README.md")
    assert "http://127.0.0.1:8000/v1" in code
    with serve_standin(StandinBackend(script=lambda body: "It is 4.")) as server:
        out = _run(code.replace("http://127.0.0.1:8000/v1", server.base_url), tmp_path)
        assert len(server.backend.requests) == 8
    assert "8 rollouts" in out and "succeeded=8" in out and "mean reward 1.0000" in out


def test_types_readme_example(tmp_path: Path) -> None:
    out = _run(_first_python_block(ROOT / "packages/agl-types/README.md"), tmp_path)
    lines = out.splitlines()
    assert lines[0] == "3 True False"
    assert '"reward":1.0' in lines[1]
