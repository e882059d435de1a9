"""LLM proxy for agl: OpenAI-compatible endpoint over LiteLLM that records every call with token ids."""
