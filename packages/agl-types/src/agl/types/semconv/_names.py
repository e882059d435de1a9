"""Names of the spans, attributes and metadata keys that carry agl's meaning."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel

__all__ = [
    "AGL_ANNOTATION",
    "AGL_EXCEPTION",
    "AGL_LLM_CALL",
    "AGL_MESSAGE",
    "AGL_OBJECT",
    "AGL_OPERATION",
    "AGL_REWARD",
    "AGL_VIRTUAL",
    "FINAL_REWARD_METADATA_KEY",
    "GenAIAttributes",
    "InstrumentedLLMAttributes",
    "LLMCallAttributes",
    "LightningResourceAttributes",
    "LightningSpanAttributes",
    "LinkPydanticModel",
    "RewardPydanticModel",
]

AGL_ANNOTATION = "agentlightning.annotation"
AGL_MESSAGE = "agentlightning.message"
AGL_OBJECT = "agentlightning.object"
AGL_EXCEPTION = "agentlightning.exception"
AGL_OPERATION = "agentlightning.operation"
AGL_REWARD = "agentlightning.reward"
AGL_VIRTUAL = "agentlightning.virtual"
AGL_LLM_CALL = "agentlightning.llm_call"
"""Span name of one LLM call recorded by the agl LLM proxy."""

FINAL_REWARD_METADATA_KEY = "final_reward"
"""Key of an attempt's ``metadata`` holding the rollout's final reward (a float, or ``None`` for no reward).

The runner that ran the attempt writes it once, with ``agl.tracer.find_final_reward`` over the attempt's
spans, when the attempt succeeds. Read it with ``agl.tracer.final_reward_of``.
"""


class LightningResourceAttributes(str, Enum):
    """OpenTelemetry resource attributes that attribute spans to a rollout and attempt."""

    ROLLOUT_ID = "agentlightning.rollout_id"
    ATTEMPT_ID = "agentlightning.attempt_id"
    SPAN_SEQUENCE_ID = "agentlightning.span_sequence_id"
    TRACER_NAME = "agentlightning.tracer.name"


class LightningSpanAttributes(str, Enum):
    """Span attributes written by emitters and read by adapters."""

    REWARD = "agentlightning.reward"
    """Prefix: ``.<i>.name`` / ``.<i>.value`` per dimension; the first one is primary."""
    LINK = "agentlightning.link"
    """Prefix: a list of ``{key_match, value_match}`` selecting the spans this one refers to."""
    TAG = "agentlightning.tag"
    MESSAGE_BODY = "agentlightning.message.body"
    OBJECT_TYPE = "agentlightning.object.type"
    OBJECT_LITERAL = "agentlightning.object.literal"
    OBJECT_JSON = "agentlightning.object.json"
    OPERATION_NAME = "agentlightning.operation.name"
    OPERATION_INPUT = "agentlightning.operation.input"
    OPERATION_OUTPUT = "agentlightning.operation.output"


class GenAIAttributes(str, Enum):
    """OpenTelemetry GenAI semantic-convention names used on LLM-call spans."""

    OPERATION_NAME = "gen_ai.operation.name"
    SYSTEM = "gen_ai.system"
    REQUEST_MODEL = "gen_ai.request.model"
    REQUEST_TEMPERATURE = "gen_ai.request.temperature"
    REQUEST_TOP_P = "gen_ai.request.top_p"
    REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
    REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
    REQUEST_SEED = "gen_ai.request.seed"
    REQUEST_FREQUENCY_PENALTY = "gen_ai.request.frequency_penalty"
    REQUEST_PRESENCE_PENALTY = "gen_ai.request.presence_penalty"
    REQUEST_CHOICE_COUNT = "gen_ai.request.choice.count"
    REQUEST_TYPE = "gen_ai.request.type"
    """``chat`` or ``completion`` (AgentOps' name; OpenLLMetry's is ``llm.request.type``)."""
    REQUEST_STREAMING = "gen_ai.request.streaming"
    """Whether the call streamed (AgentOps' name, also written as ``gen_ai.request.stream``)."""
    RESPONSE_ID = "gen_ai.response.id"
    RESPONSE_MODEL = "gen_ai.response.model"
    RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
    USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
    USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
    USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
    """Older name of :attr:`USAGE_INPUT_TOKENS`, still read by many tools."""
    USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
    """Older name of :attr:`USAGE_OUTPUT_TOKENS`."""
    USAGE_TOTAL_TOKENS = "gen_ai.usage.total_tokens"
    """AgentOps' name (OpenLLMetry's is ``llm.usage.total_tokens``)."""
    PROMPT = "gen_ai.prompt"
    """Prefix: ``.<i>.role`` / ``.content`` / ``.name`` / ``.tool_call_id`` / ``.tool_calls.<j>.id|name|arguments``."""
    COMPLETION = "gen_ai.completion"
    """Prefix: ``.<choice index>.role`` / ``.content`` / ``.finish_reason`` / ``.token_ids`` / ``.tool_calls...``."""
    REQUEST = "gen_ai.request"
    """Prefix: ``.<parameter>`` per scalar request parameter."""
    REQUEST_FUNCTIONS = "gen_ai.request.functions"
    """Prefix: ``.<i>.name`` / ``.description`` / ``.parameters`` (JSON text) per offered tool."""
    OPENAI_API_BASE = "gen_ai.openai.api_base"
    ERROR_TYPE = "error.type"


class InstrumentedLLMAttributes(str, Enum):
    """Attributes outside the GenAI conventions that OpenAI instrumentations write on LLM-call spans.

    ``llm.*`` are OpenLLMetry's; the token ids and logprobs are the reference's vLLM names, read by its
    adapters.
    """

    REQUEST_TYPE = "llm.request.type"
    USAGE_TOTAL_TOKENS = "llm.usage.total_tokens"
    PROMPT_TOKEN_IDS = "prompt_token_ids"
    RESPONSE_TOKEN_IDS = "response_token_ids"
    """Token ids of the first choice's completion."""
    LOGPROBS_CONTENT = "logprobs.content"
    """JSON list of the first choice's ``logprobs.content`` entries (``{token, logprob, ...}``)."""


class LLMCallAttributes(str, Enum):
    """agl attributes of an :data:`AGL_LLM_CALL` span (one per call through the LLM proxy).

    Payloads are JSON text in OpenAI's wire format; token ids and logprobs are lists.
    """

    ENDPOINT = "agentlightning.llm.endpoint"
    """``chat.completions`` or ``completions``."""
    STREAM = "agentlightning.llm.stream"
    REQUEST_MESSAGES = "agentlightning.llm.request.messages"
    """JSON list of the request's chat messages."""
    REQUEST_PROMPT = "agentlightning.llm.request.prompt"
    """JSON of the prompt of a legacy ``/completions`` request."""
    REQUEST_TOOLS = "agentlightning.llm.request.tools"
    """JSON list of the tool definitions offered to the model."""
    REQUEST_PARAMS = "agentlightning.llm.request.params"
    """JSON object of every other request field (sampling parameters and the like)."""
    RESPONSE_MESSAGES = "agentlightning.llm.response.messages"
    """JSON list of the assistant messages, one per choice, tool calls included."""
    RESPONSE_CHOICES = "agentlightning.llm.response.choices"
    """JSON list of ``{index, finish_reason, token_ids?, logprobs?}`` for calls with several choices."""
    PROMPT_TOKEN_IDS = "agentlightning.llm.prompt_token_ids"
    RESPONSE_TOKEN_IDS = "agentlightning.llm.response_token_ids"
    """Token ids of the first choice's completion."""
    RESPONSE_LOGPROBS = "agentlightning.llm.response_logprobs"
    """Per-token log-probabilities of the first choice's completion."""
    RESPONSE_SYSTEM_FINGERPRINT = "agentlightning.llm.response.system_fingerprint"
    """The backend's ``system_fingerprint``: for agl's local model server, the weights version that answered
    (``agl-local-v<N>``), so each sample knows its weights."""
    DEPLOYMENT_MODEL = "agentlightning.llm.deployment.model"
    """The backend model as configured in the proxy's model list (e.g. ``hosted_vllm/qwen``)."""
    DEPLOYMENT_API_BASE = "agentlightning.llm.deployment.api_base"
    ROUTE = "agentlightning.llm.route"
    """``direct`` (forwarded as is to an OpenAI-compatible backend) or ``litellm``."""
    HTTP_STATUS = "agentlightning.llm.http_status"
    LATENCY_MS = "agentlightning.llm.latency_ms"
    TIME_TO_FIRST_CHUNK_MS = "agentlightning.llm.time_to_first_chunk_ms"
    CLIENT_DISCONNECTED = "agentlightning.llm.client_disconnected"
    """True when the client went away before the stream ended."""
    ERROR_MESSAGE = "agentlightning.llm.error.message"


class RewardPydanticModel(BaseModel):
    """One reward dimension."""

    name: str
    value: float


class LinkPydanticModel(BaseModel):
    """Selects target spans whose attribute ``key_match`` equals ``value_match``.

    The reserved keys ``trace_id`` and ``span_id`` match the span's own ids.
    """

    key_match: str
    value_match: str
