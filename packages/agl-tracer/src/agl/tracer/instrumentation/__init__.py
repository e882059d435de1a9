"""Instrumentation of LLM client libraries: their calls become spans of the active tracer."""

from .openai import instrument_openai, is_openai_instrumented, uninstrument_openai

__all__ = ["instrument_openai", "is_openai_instrumented", "uninstrument_openai"]
