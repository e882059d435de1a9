"""``--token-file``: a token that does not show in ``ps`` (the command line is readable by every user)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from agl.testing.store.cli import AGL, check_token_guard
from agl.testing.store.cli import launch as _launch
from agl.testing.store.cli import stop as _stop


@pytest.mark.parametrize("workers", [1, 2])
def test_the_token_can_come_from_a_file_and_stays_out_of_the_command_line(
    tmp_path: Path, workers: int
) -> None:
    """With one server process or several (``--workers 2`` used to serve without the file's token)."""
    secret = tmp_path / "token"
    secret.write_text("file-tok\n")
    backend = ["--workers", "2", "--backend", f"sqlite:///{tmp_path / 'store.db'}"] if workers > 1 else []
    proc, address, banner = _launch("--port", "0", "--token-file", str(secret), *backend, command=[str(AGL)])
    assert "bearer token required" in banner
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert b"file-tok" not in cmdline
        check_token_guard(address, token="file-tok", wrong="wrong")
    finally:
        code, _, err = _stop(proc)
    assert code == 0, err


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_an_empty_or_missing_token_file_is_a_clear_error(tmp_path: Path, content: str) -> None:
    empty = tmp_path / "empty"
    empty.write_text(content)
    for path, message in ((empty, "is empty"), (tmp_path / "missing", "cannot read the token file")):
        result = subprocess.run(
            [str(AGL), "store", "--port", "0", "--token-file", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2 and message in result.stderr and str(path) in result.stderr


def test_help_prefers_the_environment_or_a_file() -> None:
    for command in ("store", "runner"):
        result = subprocess.run(
            [str(AGL), command, "--help"], capture_output=True, text=True, timeout=60, check=False
        )
        text = " ".join(result.stdout.split())
        assert result.returncode == 0, result.stderr
        assert "--token-file" in text and "prefer AGL_STORE_TOKEN or --token-file" in text


def test_token_and_token_file_exclude_each_other(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agl.store.cli", "store", "--token", "a", "--token-file", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "not allowed with argument" in result.stderr
