"""Adapters: turn the spans of an attempt into training data (RL triplets, OpenAI message lists, token turns)."""

from ._llm_call import LLMCall, extract_llm_call
from .base import Adapter, OtelTraceAdapter, TraceAdapter, TraceToTripletBase
from .diagnosis import NO_TRAINING_DATA, NoDataReason, NoDataTally, diagnose, mark_no_data
from .messages import OpenAIMessages, TraceToMessages, group_genai_dict
from .tree import RewardMatchPolicy, TraceTree
from .triplet import LlmProxyTraceToTriplet, TracerTraceToTriplet, span_to_triplet
from .turns import Turn, TurnTrajectory, merge_turns

__all__ = [
    "NO_TRAINING_DATA",
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
    "mark_no_data",
    "merge_turns",
    "span_to_triplet",
]
