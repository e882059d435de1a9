"""Checks of a completion request's fields, done before it reaches LiteLLM's Router.

A request LiteLLM cannot handle (``"stream": "yes"``, a message that is not an object...) fails inside the
Router as if the backend had failed, and the Router then cools the deployment down: every other client
gets 429 for a client's mistake. So the fields the proxy, LiteLLM and OpenAI-compatible backends interpret
are checked here, and a wrong one is a 400 that names it. Fields not listed are passed on untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agl.types.narrow import as_dict, list_of_any

__all__ = ["check_litellm_kwargs", "check_request"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_str_list(v: Any) -> bool:
    items = list_of_any(v)
    return items is not None and all(isinstance(x, str) for x in items)


def _is_int_list(v: Any) -> bool:
    items = list_of_any(v)
    return items is not None and all(_is_int(x) for x in items)


def _is_prompt(v: Any) -> bool:
    if isinstance(v, str) or _is_str_list(v) or _is_int_list(v):
        return True
    items = list_of_any(v)
    return items is not None and all(_is_int_list(x) for x in items)


def _is_object_list(v: Any) -> bool:
    items = list_of_any(v)
    return items is not None and all(isinstance(x, dict) for x in items)


_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "stream": (lambda v: isinstance(v, bool), "true or false"),
    "stream_options": (lambda v: isinstance(v, dict), "an object"),
    "n": (_is_int, "an integer"),
    "max_tokens": (_is_int, "an integer"),
    "max_completion_tokens": (_is_int, "an integer"),
    "seed": (_is_int, "an integer"),
    "top_logprobs": (_is_int, "an integer"),
    "temperature": (_is_number, "a number"),
    "top_p": (_is_number, "a number"),
    "presence_penalty": (_is_number, "a number"),
    "frequency_penalty": (_is_number, "a number"),
    "stop": (lambda v: isinstance(v, str) or _is_str_list(v), "a string or a list of strings"),
    "tools": (_is_object_list, "a list of objects"),
    "tool_choice": (lambda v: isinstance(v, (str, dict)), "a string or an object"),
    "response_format": (lambda v: isinstance(v, dict), "an object"),
    "logit_bias": (lambda v: isinstance(v, dict), "an object"),
    "user": (lambda v: isinstance(v, str), "a string"),
    "extra_body": (lambda v: isinstance(v, dict), "an object"),
}

_CONTENT_OK = (str, list)


def _check_messages(value: Any) -> str | None:
    messages = list_of_any(value)
    if not messages:
        return "'messages' must be a non-empty list of chat messages"
    for i, item in enumerate(messages):
        message = as_dict(item)
        if message is None:
            return f"messages[{i}] must be an object with a 'role', got {type(item).__name__}"
        if not isinstance(message.get("role"), str) or not message["role"]:
            return f"messages[{i}].role must be a non-empty string ('system', 'user', 'assistant', 'tool'...)"
        content = message.get("content")
        if content is not None and not isinstance(content, _CONTENT_OK):
            return f"messages[{i}].content must be a string, a list of content parts or null"
        if isinstance(content, list) and not _is_object_list(content):
            return f"messages[{i}].content must list content parts as objects ({{'type': 'text', ...}})"
    return None


def check_request(request: dict[str, Any], endpoint: str) -> str | None:
    """What is wrong with a chat or text completion request, or ``None``."""
    if not isinstance(request.get("model"), str) or not request["model"]:
        return "'model' is required: the model name as listed by GET /v1/models"
    if endpoint == "chat.completions":
        problem = _check_messages(request.get("messages"))
        if problem is not None:
            return problem
        logprobs = request.get("logprobs")
        if logprobs is not None and not isinstance(logprobs, bool):
            return "'logprobs' must be true or false for chat completions"
    else:
        if "prompt" not in request:
            return "'prompt' is required for /v1/completions"
        if not _is_prompt(request["prompt"]):
            return "'prompt' must be a string, a list of strings, or token ids"
        logprobs = request.get("logprobs")
        if logprobs is not None and not _is_int(logprobs):
            return "'logprobs' must be an integer for text completions"
    for name, (valid, expected) in _FIELDS.items():
        value = request.get(name)
        if value is not None and not valid(value):
            return f"'{name}' must be {expected}, got {type(value).__name__}"
    return None


# LiteLLM reads these from the call's keyword arguments: a client must not pick the backend's address or
# credentials, replace the model list, or fake the answer.
_LITELLM_ONLY = frozenset(
    {
        "api_base",
        "base_url",
        "api_key",
        "api_version",
        "organization",
        "custom_llm_provider",
        "model_list",
        "mock_response",
        "mock_tool_calls",
        "mock_timeout",
        "fallbacks",
        "context_window_fallbacks",
        "content_policy_fallbacks",
        "num_retries",
        "max_retries",
        "specific_deployment",
        "deployment_id",
        "input_cost_per_token",
        "output_cost_per_token",
        "extra_headers",
        "headers",
    }
)


def check_litellm_kwargs(kwargs: dict[str, Any]) -> str | None:
    """A field of the request that LiteLLM would take as its own setting (refused), or ``None``."""
    for name in kwargs:
        if name in _LITELLM_ONLY or name.startswith(("litellm_", "mock_")):
            return (
                f"'{name}' is a LiteLLM setting, not a request field; the proxy's model list decides "
                "where and how a model is called"
            )
    return None
