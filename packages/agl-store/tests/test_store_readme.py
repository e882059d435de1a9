"""The examples in the agl-store README run as written and print what they say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _run_example(heading: str, tmp_path: Path) -> str:
    """Run the first python block under ``## heading`` as a script; its standard output."""
    section = README.read_text().split(f"## {heading}", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"no python example under '## {heading}'"
    script = tmp_path / "example.py"
    script.write_text(match.group(1))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_usage_example_runs(tmp_path: Path) -> None:
    assert _run_example("Using the store", tmp_path) == "succeeded ['failed', 'succeeded'] 1"


def test_sql_example_runs(tmp_path: Path) -> None:
    assert _run_example("The SQL store", tmp_path) == "{'question': '2 + 2'} preparing"
