"""Collecting the whole suite touches no database, socket or child process: tests make those in fixtures.

A store opened at import (as the schemathesis module once did) ran before any fixture, outside every test's
teardown, and aborted the whole session where its database was missing. An audit hook (PEP 578) sees every
socket, SQLite connection and child process the collection makes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

AUDIT_PLUGIN = """
import sys

EVENTS = {"socket.connect", "socket.bind", "sqlite3.connect", "subprocess.Popen", "os.fork", "os.posix_spawn"}
seen = []


def _hook(event, args):
    if event in EVENTS:
        seen.append(f"{event} {args!r:.200}")


def pytest_configure(config):
    sys.addaudithook(_hook)


def pytest_collection_finish(session):
    print("AUDIT", len(seen))
    for line in seen:
        print("AUDIT-EVENT", line)
"""


def test_collecting_every_test_opens_nothing(tmp_path: Path) -> None:
    (tmp_path / "collection_audit.py").write_text(textwrap.dedent(AUDIT_PLUGIN))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        "PYTHONPATH": str(tmp_path),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    done = subprocess.run(
        # one process (-n 0): the audit watches the process that collects
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "collection_audit"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    events = [line for line in done.stdout.splitlines() if line.startswith("AUDIT-EVENT")]
    assert "AUDIT 0" in done.stdout, "\n".join(events)
