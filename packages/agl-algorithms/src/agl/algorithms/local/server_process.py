"""A :class:`~agl.algorithms.local.server.ModelServer` in a process of its own.

    python -m agl.algorithms.local.server_process MODEL_DIR [--port 0] [--served-model-name NAME]

In the training process the model server's decoding competes for one interpreter lock with the runners,
the LLM proxy and the store; in its own process it has a core of its own. :class:`ModelServerProcess`
starts it, and offers what the trainer uses of an in-process server: ``url``, ``version``, ``stats``,
``update_weights`` (the weights travel as a safetensors file in memory, and are loaded between two
generation batches as in process), ``as_llm``, ``start`` and ``stop``.
The child serves until its parent closes its standard input (or dies), so it never outlives the run.

On Linux that file is an anonymous memory file (``memfd_create``) that the child inherits: it has no name,
so a trainer killed with SIGKILL leaves nothing behind in ``/dev/shm``; it is emptied after each update.
Elsewhere it is a file in a temporary folder, removed by :meth:`ModelServerProcess.stop`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._serving import ServedModel

__all__ = ["ModelServerProcess"]

_READY = "agl-model-server listening on port "


class ModelServerProcess(ServedModel):
    """Serve ``model`` (a model directory, or a hub id where the network allows) from a child process.

    Args:
        model: What :func:`~agl.algorithms.local.server.load_model` loads in the child.
        served_model_name: The name clients ask for (default: the directory name).
        max_batch_size: The engine's running batch bound.
        device: Where the child puts the model (``cpu``, ``cuda``...).
        torch_threads: Torch threads of the child (default 1: decoding a small model gains nothing from more).
        start_timeout: Seconds the child has to load the model and listen.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        served_model_name: str | None = None,
        max_batch_size: int = 256,
        device: str = "cpu",
        torch_threads: int = 1,
        start_timeout: float = 120.0,
    ) -> None:
        self.model = str(model)
        self.served_model_name = served_model_name or Path(self.model).name
        self.max_batch_size = max_batch_size
        self.device = device
        self.torch_threads = torch_threads
        self.start_timeout = start_timeout
        self.port: int | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._token = secrets.token_hex(16)
        self._version = 0
        self._weights_fd: int | None = None
        self._weights_dir: tempfile.TemporaryDirectory[str] | None = None
        self._reader: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> ModelServerProcess:
        """Start the child and return once it accepts connections (``RuntimeError`` if it cannot)."""
        if self._proc is not None:
            return self
        command = [sys.executable, "-m", __name__, self.model, "--served-model-name", self.served_model_name]
        command += ["--max-batch-size", str(self.max_batch_size), "--device", self.device]
        command += ["--torch-threads", str(self.torch_threads), "--admin-token-from-stdin"]
        if hasattr(os, "memfd_create"):
            self._weights_fd = os.memfd_create("agl-weights", os.MFD_CLOEXEC)
        else:
            self._weights_dir = tempfile.TemporaryDirectory(prefix="agl-weights-")
        try:
            self._proc = proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                pass_fds=() if self._weights_fd is None else (self._weights_fd,),
            )
        except BaseException:
            self.stop()  # releases the weights file
            raise
        assert proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(BrokenPipeError):  # it died at once: told below, with what it said
            proc.stdin.write(self._token + "\n")  # not on the command line, where any user could read it
            proc.stdin.flush()
        lines: list[str] = []
        ports: list[int] = []
        found = threading.Event()

        def read_stdout() -> None:  # to the end, so that the child never blocks on a full pipe
            assert proc.stdout is not None
            for line in proc.stdout:
                if not found.is_set():
                    lines.append(line)
                    if line.startswith(_READY):
                        ports.append(int(line[len(_READY) :]))
                        found.set()

        reader = self._reader = threading.Thread(
            target=read_stdout, name="agl-model-server-stdout", daemon=True
        )
        reader.start()
        deadline = time.monotonic() + self.start_timeout
        while not found.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                said = "".join(lines[-20:])
                raise RuntimeError(f"the model server process did not start for {self.model!r}: {said}")
        self.port = ports[0]
        return self

    def stop(self) -> None:
        """Stop the child (closing its standard input asks it to; it is killed after 30 s)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            if self._reader is not None:
                self._reader.join(10)  # it reads to the end of the child's output, then the pipe is closed
                self._reader = None
            if proc.stdout is not None:
                proc.stdout.close()
        if self._weights_fd is not None:
            os.close(self._weights_fd)
            self._weights_fd = None
        if self._weights_dir is not None:
            self._weights_dir.cleanup()
            self._weights_dir = None
        self.port = None

    # -- what the trainer uses -----------------------------------------------------------------

    @property
    def version(self) -> int:
        """How many weight updates have been applied."""
        return self._version

    @property
    def stats(self) -> dict[str, Any]:
        """The child engine's counters (see :attr:`GenerationEngine.stats`), as of now."""
        return dict(self._admin("GET", "/agl/stats")["stats"])

    def process_cpu_seconds(self) -> float:
        """CPU seconds the child has used so far (user + system; 0.0 where ``/proc`` cannot tell)."""
        if self._proc is None:
            return 0.0
        try:
            with open(f"/proc/{self._proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def update_weights(self, state_dict: Mapping[str, Any]) -> int:
        """Swap in new weights (between two generation batches of the child); returns the new version."""
        from .server import safetensors_torch

        tensors = _unshared({name: tensor.detach().contiguous() for name, tensor in state_dict.items()})
        if self._weights_fd is not None:
            fd = self._weights_fd
            _write_all(fd, safetensors_torch().save(tensors))
            try:  # the child inherited the descriptor under the same number
                answer = self._admin("POST", "/agl/weights", {"path": f"/proc/self/fd/{fd}"})
            finally:
                os.ftruncate(fd, 0)  # the child has copied the tensors: free the memory
        elif self._weights_dir is not None:
            path = Path(self._weights_dir.name) / "weights.safetensors"
            safetensors_torch().save_file(tensors, str(path))
            answer = self._admin("POST", "/agl/weights", {"path": str(path)})
        else:
            raise RuntimeError("the model server process is not started")
        self._version = int(answer["version"])
        return self._version

    def _admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        if self.port is None:
            raise RuntimeError("the model server process is not started")
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"the model server process refused {method} {path}: {exc.read()!r}") from exc


def _write_all(fd: int, data: bytes) -> None:
    """Make the file ``fd`` hold exactly ``data`` (a write moves at most about 2 GiB)."""
    os.ftruncate(fd, 0)
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        offset += os.pwrite(fd, view[offset:], offset)


def _unshared(tensors: dict[str, Any]) -> dict[str, Any]:
    """Tensors that share storage (tied embeddings) as copies: safetensors refuses shared storage."""
    seen: set[int] = set()
    out: dict[str, Any] = {}
    for name, tensor in tensors.items():
        key = tensor.untyped_storage().data_ptr()
        out[name] = tensor.clone() if key in seen else tensor
        seen.add(key)
    return out


# -- the child ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agl.algorithms.local.server_process",
        description="Serve a model over OpenAI's chat API on 127.0.0.1 until standard input closes.",
    )
    parser.add_argument("model", help="model directory (or hub id)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--max-batch-size", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument(
        "--admin-token-from-stdin",
        action="store_true",
        help="read a token from the first line of standard input and enable the admin routes for it",
    )
    args = parser.parse_args(argv)
    token = sys.stdin.readline().strip() if args.admin_token_from_stdin else None

    import torch

    from .server import ModelServer

    torch.set_num_threads(args.torch_threads)
    server = ModelServer(
        args.model,
        served_model_name=args.served_model_name,
        port=args.port,
        max_batch_size=args.max_batch_size,
        device=args.device,
        admin_token=token or None,
    )
    with server:
        print(f"{_READY}{server.port}", flush=True)
        sys.stdin.read()  # until the parent closes it, or dies
    return 0


if __name__ == "__main__":
    sys.exit(main())
