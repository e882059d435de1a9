"""A leak fails the test that made it, never a later, innocent one (agl.testing.plugin collects after each test).

The suite below leaks a socket inside a reference cycle (only the cyclic garbage collector frees it, whenever it
next runs), then runs a test that does nothing wrong but whose work triggers a collection. Without the plugin
the ``ResourceWarning`` is raised while the innocent test runs and fails it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SUITE = """
import gc
import socket


def test_leaks_a_socket_in_a_cycle():
    holder = {"socket": socket.socket()}
    holder["self"] = holder  # a cycle: only the collector frees it


def test_innocent():
    gc.collect()  # what any allocation-heavy test eventually does
"""


def _run(suite: Path, *plugins: str) -> str:
    (suite.parent / "pytest.ini").write_text(
        "[pytest]\nfilterwarnings = error\nasyncio_default_fixture_loop_scope = function\n"
    )
    args = [arg for plugin in plugins for arg in ("-p", plugin)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *args, str(suite)],
        cwd=suite.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


def test_the_leaking_test_fails_and_the_innocent_one_passes(tmp_path: Path) -> None:
    suite = tmp_path / "test_leaky.py"
    suite.write_text(textwrap.dedent(SUITE))
    with_plugin = _run(suite, "agl.testing.plugin")
    # reported at the leaking test's teardown, where the plugin collects
    assert "ERROR test_leaky.py::test_leaks_a_socket_in_a_cycle" in with_plugin, with_plugin
    assert "test_innocent" not in with_plugin.split("short test summary")[-1], with_plugin
    assert "2 passed, 1 error" in with_plugin, with_plugin


def test_without_the_plugin_the_innocent_test_is_blamed(tmp_path: Path) -> None:
    """The failure mode the plugin exists for (what made test_emit_message_takes_only_text flaky)."""
    suite = tmp_path / "test_leaky.py"
    suite.write_text(textwrap.dedent(SUITE))
    without = _run(suite)
    assert "FAILED test_leaky.py::test_innocent" in without, without
