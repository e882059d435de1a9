"""LocalGRPO checkpoints (``agl.algorithms.local.checkpoint``): whole or absent, the newest named, a bounded
number kept, and a kill -9 during a save leaves the previous one usable (issue 31, resume)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from agl.testing.processes import wait_until
from hypothesis import given, settings
from hypothesis import strategies as st

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")

from agl.algorithms.local.checkpoint import (
    SUPERSEDED,
    Checkpoint,
    latest_checkpoint,
    read_pending,
    restore_optimizer,
    supersede_later_steps,
    take_pending,
    write_checkpoint,
    write_pending,
)
from agl.store import InMemoryLightningStore


def _model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()  # the optimizer now has state (moments) to save
    return model, optimizer


def _save_weights(model: torch.nn.Module) -> Callable[[Path], None]:
    def save(folder: Path) -> None:
        torch.save(model.state_dict(), folder / "weights.pt")

    return save


def test_a_checkpoint_restores_step_sampler_history_and_optimizer(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer()
    sampler = random.Random(7)
    sampler.random()
    history = [{"step": 1, "reward": 0.5}]
    written = write_checkpoint(
        tmp_path,
        Checkpoint(1, sampler.getstate(), history, [{"step": 0}]),
        _save_weights(model),
        optimizer,
        2,
    )
    expected_next = sampler.random()

    loaded = latest_checkpoint(tmp_path)
    assert loaded is not None and loaded.path == written and loaded.step == 1
    assert loaded.history == history and loaded.validations == [{"step": 0}]
    assert loaded.sampler().random() == expected_next  # the same tasks are drawn next
    _, fresh = _model_and_optimizer()
    restore_optimizer(loaded, fresh)
    saved, restored = optimizer.state_dict()["state"][0], fresh.state_dict()["state"][0]
    assert torch.equal(saved["exp_avg"], restored["exp_avg"])
    assert (written / "weights.pt").is_file()


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(st.integers(1, 30), min_size=1, max_size=8), keep_last=st.integers(1, 4))
def test_the_newest_is_named_and_at_most_keep_last_are_kept(
    tmp_path_factory: pytest.TempPathFactory, steps: list[int], keep_last: int
) -> None:
    root = tmp_path_factory.mktemp("ckpt")
    model, optimizer = _model_and_optimizer()
    for step in steps:
        write_checkpoint(
            root, Checkpoint(step, random.Random(step).getstate()), _save_weights(model), optimizer, keep_last
        )
        loaded = latest_checkpoint(root)
        assert loaded is not None and loaded.step == step
        kept = sorted(int(p.name[5:]) for p in root.glob("step-*"))
        assert step in kept and len(kept) <= keep_last and max(kept) == step  # later steps: a superseded run
        assert not list(root.glob(".step-*"))  # no partial folder left behind


def test_a_failed_save_leaves_the_previous_checkpoint_named_and_whole(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer()
    write_checkpoint(tmp_path, Checkpoint(1, random.Random(1).getstate()), _save_weights(model), optimizer, 2)

    def broken(folder: Path) -> None:
        (folder / "half.bin").write_bytes(b"x" * 10)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_checkpoint(tmp_path, Checkpoint(2, random.Random(2).getstate()), broken, optimizer, 2)
    loaded = latest_checkpoint(tmp_path)
    assert loaded is not None and loaded.step == 1 and loaded.path is not None
    assert (loaded.path / "weights.pt").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".latest")) == [
        "latest",
        "step-1",
    ]


_SAVING_CHILD = textwrap.dedent(
    """
    import random, sys, time
    from pathlib import Path
    import torch
    from agl.algorithms.local.checkpoint import Checkpoint, write_checkpoint

    root = Path(sys.argv[1])
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    write_checkpoint(root, Checkpoint(1, random.Random(1).getstate()), lambda f: torch.save(model.state_dict(), f / "w.pt"), optimizer, 3)

    def slow(folder):
        (folder / "w.pt").write_bytes(b"partial")
        (root / "saving").write_text("now")
        time.sleep(600)  # killed here, in the middle of the save

    write_checkpoint(root, Checkpoint(2, random.Random(2).getstate()), slow, optimizer, 3)
    """
)


def test_a_kill_9_during_a_save_leaves_the_previous_checkpoint_usable(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", _SAVING_CHILD, str(tmp_path)])
    try:
        assert wait_until(lambda: (tmp_path / "saving").exists() or child.poll() is not None, 120)
        assert child.poll() is None, "the child ended before its save"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    loaded = latest_checkpoint(tmp_path)
    assert loaded is not None and loaded.step == 1
    assert loaded.path is not None and (loaded.path / "w.pt").stat().st_size > len(b"partial")
    assert json.loads((loaded.path / "state.json").read_text())["step"] == 1
    model, optimizer = _model_and_optimizer()  # the next save cleans the killed one's partial folder up
    write_checkpoint(tmp_path, Checkpoint(2, random.Random(2).getstate()), _save_weights(model), optimizer, 3)
    assert not list(tmp_path.glob(".step-*"))
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-1", "step-2"]


def test_pending_rollouts_are_read_back_only_for_their_step(tmp_path: Path) -> None:
    write_pending(tmp_path, 3, ["ro-a", "ro-b"])
    pending = read_pending(tmp_path, 3)
    assert pending is not None and pending.rollout_ids == ["ro-a", "ro-b"]
    assert read_pending(tmp_path, 4) is None
    assert read_pending(tmp_path / "elsewhere", 3) is None


def test_a_checkpoint_forgets_the_rollouts_noted_for_the_steps_it_holds(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        write_pending(tmp_path, step, [f"ro-{step}"])
    model, optimizer = _model_and_optimizer()
    write_checkpoint(tmp_path, Checkpoint(2, random.Random(2).getstate()), _save_weights(model), optimizer, 3)
    assert [read_pending(tmp_path, s) is not None for s in (1, 2, 3)] == [False, False, True]
    write_pending(tmp_path, 3, ["ro-3b"])  # a step redone after a resume replaces its note
    redone = read_pending(tmp_path, 3)
    assert redone is not None and redone.rollout_ids == ["ro-3b"]


async def test_a_resume_takes_the_first_redone_step_and_marks_the_later_ones(tmp_path: Path) -> None:
    """Killed in step 5 with the checkpoint of step 2: the rollouts of step 3 came from the checkpoint's weights
    and are taken; those of steps 4 and 5 came from lost weights and are marked (not deleted), the unfinished
    ones cancelled, so that every step's rollouts count once."""
    store = InMemoryLightningStore()
    tasks = {step: [{"q": step, "i": i} for i in range(2)] for step in (3, 4, 5)}
    noted: dict[int, list[str]] = {}
    for step, inputs in tasks.items():
        noted[step] = [(await store.enqueue_rollout(input=t, mode="train")).rollout_id for t in inputs]
        write_pending(tmp_path, step, noted[step])
    for rid in [*noted[3], *noted[4], noted[5][0]]:
        await store.update_rollout(rid, status="succeeded")
    await store.update_rollout(noted[4][0], metadata={"kept": True})

    assert await supersede_later_steps(store, tmp_path, 3) == 4
    later = {r.rollout_id: r for r in await store.query_rollouts(rollout_id_in=[*noted[4], *noted[5]])}
    assert all((r.metadata or {})[SUPERSEDED] == {"resumed_after_step": 2} for r in later.values())
    assert (later[noted[4][0]].metadata or {})["kept"] is True
    assert [later[i].status for i in noted[5]] == ["succeeded", "cancelled"]
    assert read_pending(tmp_path, 4) is None and read_pending(tmp_path, 5) is None
    assert await take_pending(store, tmp_path, 3, tasks[3], "rs-1") == noted[3]
    assert await supersede_later_steps(store, tmp_path, 3) == 0  # done once
