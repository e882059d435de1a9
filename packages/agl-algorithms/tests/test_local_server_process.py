"""The model server in a process of its own: the same answers as in process, weight swaps, its admin
routes, and a child that never outlives its parent. Real child processes on 127.0.0.1, a tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from agl.algorithms.local import ModelServer, load_model
from agl.algorithms.local.server_process import ModelServerProcess
from agl.testing.processes import alive
from openai import OpenAI

MODEL = "tiny"
QUESTIONS = ["What is 12 + 30?", "What is 7 * 6?", "Say something."]


@pytest.fixture(scope="module")
def served(model_dir: Path) -> Iterator[ModelServerProcess]:
    with ModelServerProcess(model_dir, served_model_name=MODEL) as server:
        yield server


def _greedy(url: str) -> list[list[int]]:
    with OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60) as client:
        out = []
        for question in QUESTIONS:
            r = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": question}],
                temperature=0,
                max_tokens=12,
                extra_body={"return_token_ids": True},
            )
            extra = r.choices[0].model_extra
            assert extra is not None
            out.append(list(extra["token_ids"]))
        return out


def _perturbed(model_dir: Path, seed: int) -> dict[str, torch.Tensor]:
    model, _ = load_model(model_dir)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model.state_dict()


def test_it_answers_as_the_in_process_server_does_before_and_after_a_weight_swap(
    served: ModelServerProcess, model_dir: Path
) -> None:
    torch.set_num_threads(1)
    with ModelServer(model_dir, served_model_name=MODEL) as here:
        assert _greedy(served.url) == _greedy(here.url)
        weights = _perturbed(model_dir, seed=1)
        before = served.version
        assert served.update_weights(weights) == before + 1
        here.update_weights(weights)
        swapped = _greedy(served.url)
        assert swapped == _greedy(here.url)
    stats = served.stats
    assert stats["requests"] >= 2 * len(QUESTIONS)
    assert stats["generated_tokens"] >= len(QUESTIONS)
    assert served.as_llm(temperature=1.0).endpoint == served.url
    assert served.process_cpu_seconds() > 0.5  # it loaded torch and a model, and generated


def _admin(
    served: ModelServerProcess, method: str, path: str, body: Any = None, token: str | None = None
) -> int:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{served.port}{path}", data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_admin_routes_need_the_token_and_refuse_bad_weights(
    served: ModelServerProcess, tmp_path: Path
) -> None:
    assert _admin(served, "GET", "/agl/stats") == 401
    assert _admin(served, "GET", "/agl/stats", token="wrong") == 401
    assert _admin(served, "POST", "/agl/weights", {"path": str(tmp_path / "none")}) == 401
    token = served._token
    assert _admin(served, "GET", "/agl/stats", token=token) == 200
    assert _admin(served, "POST", "/agl/weights", {"path": str(tmp_path / "none")}, token=token) == 400
    (tmp_path / "junk").write_bytes(b"not safetensors")
    assert _admin(served, "POST", "/agl/weights", {"path": str(tmp_path / "junk")}, token=token) == 400
    assert _admin(served, "POST", "/agl/weights", {"file": 1}, token=token) == 400
    assert _greedy(served.url)  # still serving


def test_a_model_that_cannot_load_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="did not start"):
        ModelServerProcess(tmp_path / "no-such-model", start_timeout=120).start()


def test_the_child_ends_with_its_parent(model_dir: Path, tmp_path: Path) -> None:
    """A parent killed without stopping it (kill -9) closes the child's standard input: the child exits."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "from agl.algorithms.local.server_process import ModelServerProcess\n"
        f"server = ModelServerProcess({str(model_dir)!r}).start()\n"
        "print(server._proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        parent.kill()
        parent.wait(30)
        deadline = time.monotonic() + 30
        while alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child_pid), "the model server process outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        if parent.stdout is not None:
            parent.stdout.close()
