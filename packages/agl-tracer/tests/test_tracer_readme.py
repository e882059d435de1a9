"""The README's quick start runs as written and prints what the README says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_runs_as_written(tmp_path: Path) -> None:
    text = README.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    expected = re.search(r"It prints `(.*?)`", text)
    assert code and expected
    script = tmp_path / "quick_start.py"
    script.write_text(code.group(1))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected.group(1)
