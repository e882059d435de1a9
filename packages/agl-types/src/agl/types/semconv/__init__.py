"""Names of the spans and attributes that carry agl's meaning inside OpenTelemetry traces, and the typed
LLM-call record (:class:`LLMCall`) that proxy, tracer instrumentation and adapters write and read."""

from . import _llm_call, _names
from ._llm_call import *  # noqa: F403  (each module's __all__ is the list of what it offers)
from ._names import *  # noqa: F403

__all__: list[str] = []
__all__ += _names.__all__
__all__ += _llm_call.__all__
