"""The answers' wire format: token ids in both places clients read them.

vLLM returns a choice's token ids at ``choices[i].token_ids``; LiteLLM (the reference's proxy) moves them to
``choices[i].provider_specific_fields.token_ids``, where the reference's clients and instrumentation read them.
The proxy answers with both, whichever the backend used.
"""

from __future__ import annotations

import json
from typing import Any

from agl.types.narrow import as_dict, as_list

__all__ = ["mirror_token_ids", "mirrored_body"]


def mirror_token_ids(payload: dict[str, Any]) -> bool:
    """Copy each choice's token ids to the place it lacks them (in place); whether anything changed."""
    changed = False
    for item in as_list(payload.get("choices")) or ():
        choice = as_dict(item)
        if choice is None:
            continue
        ids = as_list(choice.get("token_ids"))
        fields = as_dict(choice.get("provider_specific_fields"))
        nested = as_list(fields.get("token_ids")) if fields is not None else None
        if ids is not None and nested is None:
            choice["provider_specific_fields"] = {**(fields or {}), "token_ids": ids}
            changed = True
        elif ids is None and nested is not None:
            choice["token_ids"] = nested
            changed = True
    return changed


def mirrored_body(data: bytes, payload: dict[str, Any] | None = None) -> bytes:
    """A JSON answer's bytes with :func:`mirror_token_ids` applied; anything else as it is. ``payload``: the
    answer already parsed (by the call's recording), so that it is not parsed twice."""
    if b"token_ids" not in data:
        return data
    if payload is None:
        try:
            payload = as_dict(json.loads(data))
        except (ValueError, RecursionError):
            return data
    if payload is None or not mirror_token_ids(payload):
        return data
    return json.dumps(payload).encode()
