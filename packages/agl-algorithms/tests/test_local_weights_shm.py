"""Issue 27, defect 9: a trainer killed with SIGKILL leaves no ``/dev/shm/agl-weights-*`` behind. A real
trainer-side process starts a model server process and sends it weights the way the trainer does, is
killed with SIGKILL, and then no weights file of it is left in shared memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from agl.testing.processes import alive, wait_until
from agl.testing.tiny_model import build_tiny_model

SHM = Path("/dev/shm")

pytestmark = pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm here")


def _weights_names() -> set[str]:
    return {p.name for p in SHM.iterdir() if p.name.startswith("agl-weights")}


@pytest.mark.timeout(180)
def test_a_trainer_killed_with_sigkill_leaves_no_weights_in_shared_memory(tmp_path: Path) -> None:
    model_dir = build_tiny_model(tmp_path / "tiny")
    script = tmp_path / "trainer.py"
    script.write_text(
        "import sys, time\n"
        "from agl.algorithms.local import load_model\n"
        "from agl.algorithms.local.server_process import ModelServerProcess\n"
        f"server = ModelServerProcess({str(model_dir)!r}).start()\n"
        f"policy, _ = load_model({str(model_dir)!r})\n"
        "assert server.update_weights(policy.state_dict()) == 1\n"
        "print(server._proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    before = _weights_names()
    trainer = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    leaked: set[str] = set()
    try:
        assert trainer.stdout is not None
        child_pid = int(trainer.stdout.readline())
        trainer.kill()  # SIGKILL: no finally, no atexit
        trainer.wait(30)
        assert wait_until(lambda: not alive(child_pid), 30), "the model server outlived its trainer"
        # Other tests' servers may hold names for a while; ours must go (or never have been).
        wait_until(lambda: not (_weights_names() - before), 10)
        leaked = _weights_names() - before
        assert not leaked, f"left in /dev/shm after the trainer was killed: {sorted(leaked)}"
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(10)
        if trainer.stdout is not None:
            trainer.stdout.close()
        for name in leaked:  # do not leave what the old code leaked
            subprocess.run(["rm", "-rf", str(SHM / name)], check=False)
