"""Sending a request to a backend on the direct route, and telling an answer the backend cut off."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import aiohttp

__all__ = ["ABORTED_RESENDS", "post", "was_aborted"]

LARGE_BODY = 1024 * 1024
"""Bodies above this are streamed: aiohttp sends raw bytes in one write (and warns)."""

ABORTED_RESENDS = 8
"""How many times a whole answer the backend aborted is asked for again before it is passed on as it is."""


async def post(
    session: aiohttp.ClientSession, url: str, payload: bytes, headers: dict[str, str]
) -> aiohttp.ClientResponse:
    """POST ``payload`` (JSON) to ``url``; a large body goes as a stream, made anew for each call."""
    body: Any = io.BytesIO(payload) if len(payload) > LARGE_BODY else payload
    return await session.post(url, data=body, headers=headers)


def was_aborted(data: bytes) -> bool:
    """Whether a whole (not streamed) completion came back cut off: a choice with ``finish_reason`` ``"abort"``.

    vLLM answers so when generation is paused under a request, as verl's asynchronous trainer does before each
    weight update; a request sent again is held until generation resumes and is then served, whole, by the new
    weights. (LiteLLM maps the reason to ``"stop"``, which is why only the direct route can tell.)
    """
    if b'"abort"' not in data:
        return False
    try:
        payload: Any = json.loads(data)
    except ValueError:
        return False
    choices: Any = cast("dict[str, Any]", payload).get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list):
        return False
    return any(_finish_reason(choice) == "abort" for choice in cast("list[Any]", choices))


def _finish_reason(choice: Any) -> Any:
    return cast("dict[str, Any]", choice).get("finish_reason") if isinstance(choice, dict) else None
