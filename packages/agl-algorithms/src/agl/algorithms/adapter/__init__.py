"""Adapters: turn the spans of an attempt into training data (RL triplets, OpenAI message lists, token turns)."""

from ._llm_call import LLMCall, extract_llm_call
from .base import Adapter, OtelTraceAdapter, TraceAdapter, TraceToTripletBase
from .diagnosis import NoDataReason, NoDataTally, diagnose
from .messages import OpenAIMessages, TraceToMessages, group_genai_dict
from .tree import RewardMatchPolicy, TraceTree
from .triplet import LlmProxyTraceToTriplet, TracerTraceToTriplet, span_to_triplet
from .turns import Turn, TurnTrajectory, merge_turns

__all__ = [
    "Adapter",
    "LLMCall",
    "LlmProxyTraceToTriplet",
    "NoDataReason",
    "NoDataTally",
    "OpenAIMessages",
    "OtelTraceAdapter",
    "RewardMatchPolicy",
    "TraceAdapter",
    "TraceToMessages",
    "TraceToTripletBase",
    "TraceTree",
    "TracerTraceToTriplet",
    "Turn",
    "TurnTrajectory",
    "diagnose",
    "extract_llm_call",
    "group_genai_dict",
    "merge_turns",
    "span_to_triplet",
]
