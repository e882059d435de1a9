"""The embedded model's chat template and conversation builders (hermes-style tool calls).

A tool call is rendered as ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` in the
assistant turn, and a tool's answer as a user turn wrapped in ``<tool_response>`` tags, as in the
Hermes / Qwen2.5 templates, so the same parsing works for this model and for real ones.
"""

from __future__ import annotations

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: Added (not special) tokens: kept when decoding with ``skip_special_tokens=True``.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

DEFAULT_SYSTEM = "You are a helpful assistant."

# Written with explicit '\n' strings so that Jinja whitespace control cannot change the rendering.
CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system_message = messages[0]['content'] -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set system_message = '" + DEFAULT_SYSTEM + "' if tools else none -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- if system_message is not none -%}"
    "{{- '<|im_start|>system\\n' + system_message -}}"
    "{%- if tools -%}"
    "{{- '\\n<tools>' -}}"
    "{%- for tool in tools -%}"
    "{{- '\\n' + ((tool['function'] if tool['function'] is defined else tool) | tojson) -}}"
    "{%- endfor -%}"
    "{{- '\\n</tools>' -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') -}}"
    "{%- if message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{%- if (message['content'] or '') or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{%- set args = fn['arguments'] if fn['arguments'] is string else (fn['arguments'] | tojson) -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' + args + '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
