"""Installing agl-testing changes no other test suite: its fixtures and hooks load only where a suite opts in."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# A suite of someone else's: its own ``store``, ``backend`` and ``clock``, and ``backend`` parametrized by a
# marker and by its conftest's ``pytest_generate_tests``. With agl-testing's fixtures loaded into every pytest
# run (as its old ``pytest11`` entry points did), the generated ``backend`` is parametrized twice (a collection
# error: "duplicate parametrization of 'backend'"), and agl's plugin clears the suite's ``AGL_*`` variables.
FOREIGN_CONFTEST = """
def pytest_generate_tests(metafunc):
    if "engine" in metafunc.fixturenames:
        metafunc.parametrize("backend", ["sqlite", "duckdb"])
"""

FOREIGN_SUITE = """
import os

import pytest


@pytest.fixture
def clock():
    return "their clock"


@pytest.fixture
def store(backend):
    return {"backend": backend}


@pytest.mark.parametrize("backend", ["redis", "s3"])
def test_their_store(store, backend, clock):
    assert store == {"backend": backend}
    assert clock == "their clock"


@pytest.fixture
def engine(backend):
    return f"engine-{backend}"


def test_their_generated_backends(engine, backend):
    assert engine == f"engine-{backend}"


def test_their_environment_is_theirs():
    assert os.environ["AGL_STORE"] == "theirs"  # agl's plugin would clear AGL_* variables
"""


def test_a_foreign_suite_collects_and_runs_unchanged(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(FOREIGN_CONFTEST))
    (tmp_path / "test_foreign.py").write_text(textwrap.dedent(FOREIGN_SUITE))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env={**_environment(), "AGL_STORE": "theirs"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout, result.stdout


def test_a_suite_that_opts_in_gets_the_store_fixtures(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["agl.testing.store.fixtures"]\n')
    (tmp_path / "test_opted_in.py").write_text(
        textwrap.dedent("""
        import pytest

        @pytest.mark.parametrize("backend", ["memory"])
        async def test_memory_store(store):
            rollout = await store.enqueue_rollout(input={"x": 1})
            assert (await store.get_rollout_by_id(rollout.rollout_id)).input == {"x": 1}
        """)
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=auto",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout, result.stdout


def _environment() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "AGL_"))}
