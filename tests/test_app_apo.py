"""``uv run apps/train_apo.py`` end to end against the offline stand-in models, and without credentials."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agl.testing.apo_standin import ApoStandinBackend, serve_apo_standin
from room_selector.tasks import load_tasks, split_tasks
from room_selector.world import ROOMS, RoomRequest, best_room, extract_choice, list_free_rooms

ROOT = Path(__file__).resolve().parents[1]


def command(*args: str) -> list[str]:
    """``uv run --no-sync apps/train_apo.py ...`` (the same environment, without re-syncing it)."""
    uv = shutil.which("uv")
    script = str(ROOT / "apps" / "train_apo.py")
    if uv is None:
        return [sys.executable, script, *args]
    return [uv, "run", "--no-sync", script, *args]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(extra)
    return env


def test_without_credentials_it_says_what_to_set_and_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        command("--rounds", "1", "--runs-dir", str(tmp_path)),
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    for needed in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OpenAI-compatible", "vLLM", "Ollama", "--model"):
        assert needed in done.stderr
    assert not any(tmp_path.iterdir())


def test_a_dead_endpoint_fails_loudly_without_a_log_line_per_request(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    done = subprocess.run(
        command("--rounds", "1", "--runs-dir", str(tmp_path)),
        cwd=ROOT,
        env=clean_env(OPENAI_API_KEY="test", OPENAI_BASE_URL=dead),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    failed = re.search(r"none of the (\d+) val rollouts of v0 succeeded \((\d+) failed\)", done.stderr)
    assert failed is not None and failed.group(1) == failed.group(2), done.stderr[-2000:]
    assert f"at {dead}" in done.stderr
    assert "Best prompt found" not in done.stdout
    assert "HTTP Request:" not in done.stdout + done.stderr


@pytest.mark.slow
def test_two_rounds_against_the_standin_improve_on_the_seed(tmp_path: Path) -> None:
    backend = ApoStandinBackend()
    with serve_apo_standin(backend) as server:
        done = subprocess.run(
            command("--rounds", "2", "--runs-dir", str(tmp_path), "--logger", "jsonl,tensorboard"),
            cwd=ROOT,
            env=clean_env(OPENAI_API_KEY="test", OPENAI_BASE_URL=server.base_url),
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    # the per-round table and the final prompt
    assert "== initial validation" in out and "== round 1" in out and "== round 2" in out
    assert re.search(r"^candidate\s+parent\s+edited\s+val score", out, re.MULTILINE)
    scores = re.search(r"Seed prompt val score: ([\d.]+); best prompt (v\d+) val score: ([\d.]+)", out)
    assert scores is not None, out
    assert float(scores.group(3)) > float(scores.group(1))
    best_prompt = out.split("Best prompt found:\n", 1)[1].strip()
    assert best_prompt.startswith("You are a scheduling assistant.") and "\n" in best_prompt

    # the cost of every round matches the formula (defaults: beam 2, branch 2, batches 4 and 10)
    costs = re.findall(
        r"cost: (\d+) train rollouts \(formula (\d+)\), (\d+) val rollouts \(formula (\d+)"
        r"(?:, or (\d+) without the skipped children)?\), (\d+) critic/editor requests \(formula (\d+)\), "
        r"(\d+) children skipped",
        out,
    )
    assert len(costs) == 3
    for train, train_f, val, val_f, val_made, llm, llm_f, skipped in costs:
        assert train == train_f and llm == llm_f  # the stand-in never fails, so no retries
        assert val == (val_made or val_f) and (val_made == "") == (skipped == "0")
    assert backend.calls["critic"] + backend.calls["editor"] == sum(int(c[5]) for c in costs)

    # the history: every candidate with its parent and critique, every score
    histories = list(tmp_path.glob("*/apo.jsonl"))
    assert len(histories) == 1 and (histories[0].parent / "apo.log").is_file()
    events = [json.loads(line) for line in histories[0].read_text().splitlines()]
    candidates = {e["version"]: e for e in events if e["event"] == "candidate"}
    assert scores.group(2) in candidates and candidates["v0"]["parent"] is None
    for version, event in candidates.items():
        if version != "v0":
            assert event["parent"] in candidates and event["critique"]
    scored = {e["version"] for e in events if e["event"] == "score"}
    assert scored == set(candidates)  # each candidate is scored in the round that made it
    assert events[-1]["event"] == "published" and events[-1]["version"] == scores.group(2)

    # --logger: each round's scores in metrics.jsonl and in TensorBoard event files, read back by its own reader
    rounds = [json.loads(line) for line in (histories[0].parent / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds if r["kind"] == "round"] == [0, 1, 2]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events_dir = histories[0].parent / "tensorboard"
    accumulator: Any = EventAccumulator(str(events_dir))
    accumulator.Reload()
    best = [e.value for e in accumulator.Scalars("round/best_score")]
    assert len(best) == 3 and best[-1] == pytest.approx(float(scores.group(3)), abs=1e-3)


def test_the_task_set_is_consistent_with_the_world() -> None:
    tasks = load_tasks()
    train, val = split_tasks(tasks)
    assert len(tasks) == 60 and len(train) == len(val) == 30
    assert len({t["id"] for t in tasks}) == 60
    no_room = [t for t in tasks if t["expected_choice"] == "No Room"]
    assert 5 <= len(no_room) <= 15 and any(t in val for t in no_room) and any(t in train for t in no_room)
    for task in tasks:
        request = RoomRequest.from_dict(task["task_input"])
        assert best_room(request) == task["expected_choice"]
        rows = list_free_rooms(request.date, request.time, request.duration_min)
        assert [r["distance_m"] for r in rows] == sorted(r["distance_m"] for r in rows)
    # the seed's "nearest free room" habit is right only on a few tasks
    nearest = sum(
        list_free_rooms(**{k: t["task_input"][k] for k in ("date", "time", "duration_min")})[0]["name"]
        == t["expected_choice"]
        for t in tasks
    )
    assert nearest <= 12
    assert {r.name for r in ROOMS} >= {t["expected_choice"] for t in tasks} - {"No Room"}


@pytest.mark.parametrize(
    ("answer", "choice"),
    [
        ("Final answer: Oak", "Oak"),
        ("I would book the oak room.", "Oak"),
        ("Maple is taken, so: Final answer: Cedar", "Cedar"),
        ("No room fits these needs.", "No Room"),
        ("Final answer: No Room", "No Room"),
        ("Oak or Maple", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_choice(answer: str | None, choice: str | None) -> None:
    assert extract_choice(answer) == choice
