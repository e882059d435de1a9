"""LLM proxy for agl: an OpenAI-compatible endpoint over LiteLLM's Router that records every call.

``import agl.proxy`` is light: LiteLLM is imported when a proxy starts.
"""

from ._router import DIRECT_PROVIDERS
from .proxy import LLMProxy

__version__ = "0.1.0"

__all__ = ["DIRECT_PROVIDERS", "LLMProxy"]
