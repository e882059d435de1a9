"""Names of the spans and attributes that carry agl's meaning inside OpenTelemetry traces, and the typed
LLM-call record (:class:`LLMCall`) that proxy, tracer instrumentation and adapters write and read.

Where each part lives: ``_names`` (span names, attribute enums, metadata keys), ``_llm_call`` (the record and
its two layouts' entry points), ``_proxy_layout`` / ``_genai_layout`` (writing and reading each layout) and
``_attribute_reader`` (decoding what is read). Import from ``agl.types.semconv``.
"""

from . import _llm_call, _names
from ._llm_call import *  # noqa: F403
from ._names import *  # noqa: F403

__all__: list[str] = []
__all__ += _names.__all__
__all__ += _llm_call.__all__
