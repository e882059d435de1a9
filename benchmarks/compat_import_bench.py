"""What ``import agl.compat`` costs against ``import agl.runner``: ``python -X importtime``, in fresh interpreters.

Run: ``uv run python benchmarks/compat_import_bench.py [--repeat 7]``. For each module it starts ``--repeat``
interpreters with ``-X importtime -c 'import <module>'`` and reports the median cumulative microseconds of the
module's own line (everything its import ran) and the number of modules it loaded. ``agl.compat`` must be no
slower than ``agl.runner`` (it imports its names on first use); the script exits 1 when it is.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys

MODULES = ("agl.compat", "agl.runner")
LINE = re.compile(r"^import time:\s+(?P<self>\d+) \|\s+(?P<cumulative>\d+) \|(?P<indent>\s*)(?P<name>\S+)$")


def measure(module: str) -> tuple[int, int]:
    """Cumulative microseconds of importing ``module`` (top-level line) and the count of modules it imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [m for m in map(LINE.match, done.stderr.splitlines()) if m]
    total = next(int(m.group("cumulative")) for m in lines if m.group("name") == module)
    return total, len(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    results: dict[str, float] = {}
    for module in MODULES:
        runs = [measure(module) for _ in range(args.repeat)]
        results[module] = statistics.median(t for t, _ in runs)
        print(f"import {module:<11} median {results[module] / 1000:8.1f} ms  ({runs[0][1]} modules)")
    ratio = results["agl.compat"] / results["agl.runner"]
    print(f"agl.compat / agl.runner = {ratio:.3f}")
    return 0 if ratio <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
