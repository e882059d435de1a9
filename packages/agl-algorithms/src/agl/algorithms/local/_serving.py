"""What the trainer uses of a model server, wherever it runs (this process or a child): its address, the
``LLM`` resource pointing at it, its counters, weight updates, and its start and stop."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agl.types import LLM

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["ServedModel"]


class ServedModel(ABC):
    """A model served over OpenAI's chat API on a local port (see ``ModelServer``, ``ModelServerProcess``)."""

    served_model_name: str
    host: str = "127.0.0.1"
    port: int | None = None
    """The port it listens on while started (``None`` otherwise)."""

    @abstractmethod
    def start(self) -> Self:
        """Start serving; returns once it accepts connections."""

    @abstractmethod
    def stop(self) -> None:
        """Stop serving."""

    @property
    @abstractmethod
    def version(self) -> int:
        """How many weight updates have been applied."""

    @property
    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """The engine's counters (see ``GenerationEngine.stats``), as of now."""

    @abstractmethod
    def update_weights(self, state_dict: Mapping[str, Any]) -> int:
        """Swap in new weights between two generation batches; returns the new version."""

    def process_cpu_seconds(self) -> float:
        """CPU seconds of a process of its own, if it has one (0.0: it runs in this process)."""
        return 0.0

    @property
    def url(self) -> str:
        """The OpenAI base URL (``http://127.0.0.1:<port>/v1``)."""
        if self.port is None:
            raise RuntimeError(f"the {type(self).__name__} is not started; call start() first")
        return f"http://{self.host}:{self.port}/v1"

    def as_llm(self, **sampling_parameters: Any) -> LLM:
        """An ``LLM`` resource pointing at this server."""
        return LLM(endpoint=self.url, model=self.served_model_name, sampling_parameters=sampling_parameters)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
