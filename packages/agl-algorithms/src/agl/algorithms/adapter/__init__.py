"""Adapters: turn the spans of an attempt into training data (RL triplets, OpenAI message lists)."""

from ._llm_call import LLMCall, extract_llm_call
from .base import Adapter, OtelTraceAdapter, TraceAdapter, TraceToTripletBase
from .messages import OpenAIMessages, TraceToMessages, group_genai_dict
from .tree import RewardMatchPolicy, TraceTree
from .triplet import LlmProxyTraceToTriplet, TracerTraceToTriplet, span_to_triplet

__all__ = [
    "Adapter",
    "LLMCall",
    "LlmProxyTraceToTriplet",
    "OpenAIMessages",
    "OtelTraceAdapter",
    "RewardMatchPolicy",
    "TraceAdapter",
    "TraceToMessages",
    "TraceToTripletBase",
    "TraceTree",
    "TracerTraceToTriplet",
    "extract_llm_call",
    "group_genai_dict",
    "span_to_triplet",
]
