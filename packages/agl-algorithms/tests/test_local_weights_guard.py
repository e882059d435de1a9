"""Issue 27, defect 7: the model server refuses weights that do not fully and finitely match the served
model (400 naming what is wrong; version and model unchanged), refuses a non-regular file before opening
it, and still takes what the trainer sends (a full state dict) and what ``save_pretrained`` writes (tied
weights left out). Real tiny models, a real server (in process, and in a child process for the FIFO)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from agl.algorithms.local import GenerationEngine, ModelServer, SamplingParams, load_model
from agl.algorithms.local.server import safetensors_torch
from agl.algorithms.local.server_process import ModelServerProcess

MODEL = "tiny"
TOKEN = "s3cret-admin-token"
PROMPT = "What is 12 + 30?"


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[ModelServer]:
    torch.set_num_threads(1)
    with ModelServer(model_dir, served_model_name=MODEL, admin_token=TOKEN) as s:
        yield s


def _post(port: int, path: str, body: Any, token: str = TOKEN, timeout: float = 60) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        json.dumps(body).encode(),
        {"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def _get(port: int, path: str, timeout: float = 10) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def _greedy(server: ModelServer) -> list[int]:
    prompt_ids: list[int] = server.tokenizer.encode(PROMPT, add_special_tokens=False)
    (result,) = server.engine.generate([prompt_ids], _params())
    return result.token_ids


def _params() -> SamplingParams:
    return SamplingParams(max_tokens=8, temperature=0.0)


def _snapshot(server: ModelServer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in server.engine.model.state_dict().items()}


def _save(tmp_path: Path, name: str, tensors: dict[str, torch.Tensor]) -> str:
    path = tmp_path / name
    unique: dict[str, torch.Tensor] = {k: v.detach().clone().contiguous() for k, v in tensors.items()}
    safetensors_torch().save_file(unique, str(path))
    return str(path)


def _assert_refused(
    server: ModelServer, tmp_path: Path, tensors: dict[str, torch.Tensor], *words: str
) -> str:
    before_state, before_version, before_answer = _snapshot(server), server.version, _greedy(server)
    status, text = _post(
        server.port or 0, "/agl/weights", {"path": _save(tmp_path, "w.safetensors", tensors)}
    )
    assert status == 400, text
    for word in words:
        assert word in text, text
    assert server.version == before_version
    after = _snapshot(server)
    assert all(torch.equal(after[k], v) for k, v in before_state.items()), (
        "a refused update changed the model"
    )
    assert _greedy(server) == before_answer
    return text


def test_prefixed_names_that_match_nothing_are_refused(server: ModelServer, tmp_path: Path) -> None:
    """Old code: 200, version 0 -> 1, model unchanged (what a DDP ``module.`` state dict does)."""
    state = {f"module.{k}": v + 0.5 for k, v in _snapshot(server).items()}
    text = _assert_refused(server, tmp_path, state, "missing", "unexpected", "module.")
    assert "model.norm.weight" in text or "lm_head.weight" in text or "model.embed_tokens.weight" in text


def test_one_tensor_of_many_is_refused(server: ModelServer, tmp_path: Path) -> None:
    """Old code: 200 (the one tensor loaded, the rest silently kept)."""
    one = {"model.norm.weight": _snapshot(server)["model.norm.weight"] + 1.0}
    missing = len(_snapshot(server)) - 1  # all but the norm
    _assert_refused(server, tmp_path, one, "missing", str(missing))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weights_are_refused(server: ModelServer, tmp_path: Path, bad: float) -> None:
    """Old code: 200, and every answer was empty afterwards."""
    state = _snapshot(server)
    state["model.layers.0.mlp.up_proj.weight"] = torch.full_like(
        state["model.layers.0.mlp.up_proj.weight"], bad
    )
    _assert_refused(server, tmp_path, state, "non-finite", "model.layers.0.mlp.up_proj.weight")


def test_a_shape_mismatch_is_refused_by_name(server: ModelServer, tmp_path: Path) -> None:
    state = _snapshot(server)
    state["model.norm.weight"] = torch.ones(7)
    _assert_refused(server, tmp_path, state, "shape", "model.norm.weight")


def test_the_engine_refuses_a_partial_state_dict_without_a_new_version(server: ModelServer) -> None:
    engine: GenerationEngine = server.engine
    before = engine.version
    with pytest.raises(ValueError, match="missing"):
        engine.update_weights({"model.norm.weight": torch.ones(32)})
    assert engine.version == before


def test_what_the_trainer_sends_and_what_save_pretrained_writes_are_taken(
    server: ModelServer, model_dir: Path, tmp_path: Path
) -> None:
    original = _snapshot(server)
    try:
        policy, _ = load_model(model_dir)
        with torch.no_grad():
            for parameter in policy.parameters():
                parameter.add_(0.3)
        version = server.version
        assert server.update_weights(policy.state_dict()) == version + 1  # the in-process sender: full
        policy.save_pretrained(tmp_path / "saved")  # leaves lm_head.weight out: tied to the embeddings
        status, text = _post(
            server.port or 0, "/agl/weights", {"path": str(tmp_path / "saved/model.safetensors")}
        )
        assert status == 200, text
        assert json.loads(text)["version"] == version + 2
        served = server.engine.model
        assert torch.equal(served.lm_head.weight, served.model.embed_tokens.weight)
        assert torch.allclose(served.model.norm.weight, original["model.norm.weight"] + 0.3)
    finally:
        server.update_weights(original)


def test_a_fifo_is_refused_and_health_keeps_answering(model_dir: Path, tmp_path: Path) -> None:
    """Old code: opening the FIFO blocked the child holding the interpreter lock: /health froze too."""
    fifo = tmp_path / "weights.fifo"
    os.mkfifo(fifo)
    with ModelServerProcess(model_dir, served_model_name=MODEL) as served:
        port = served.port or 0
        token = served._token
        answers: list[tuple[int, str]] = []
        poster = threading.Thread(
            target=lambda: answers.append(_post(port, "/agl/weights", {"path": str(fifo)}, token, 20))
        )
        poster.start()
        try:
            assert _get(port, "/health", timeout=10)["version"] == 0
            poster.join(30)
            assert answers and answers[0][0] == 400, answers
            assert "regular file" in answers[0][1]
        finally:
            # Unblock a reader stuck in open() (the old code), so that the child can stop.
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            poster.join(30)
        assert served.version == 0
        assert _get(port, "/health")["version"] == 0
