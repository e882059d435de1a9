"""Python code run in a fresh interpreter: for tests of what importing something, or a process-wide setting, does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Mapping

__all__ = ["run_python"]


def run_python(code: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> str:
    """The standard output of ``python -c code args`` (``code`` dedented) run with this interpreter.

    A non-zero exit fails the calling test with the child's standard error.
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"python -c exited with {done.returncode}:\n{done.stderr}")
    return done.stdout
