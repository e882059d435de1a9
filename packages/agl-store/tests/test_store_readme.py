"""The usage example in the agl-store README runs as written and prints what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_usage_example_runs(tmp_path: Path) -> None:
    section = README.read_text().split("## Using the store", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "no python example under '## Using the store'"
    script = tmp_path / "example.py"
    script.write_text(match.group(1))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "succeeded ['failed', 'succeeded'] 1"
