"""An offline OpenAI-compatible stand-in that plays every model of an APO run on the room-selector world.

It serves on 127.0.0.1 (through :mod:`agl.testing.openai_standin`) and tells its roles apart by the
request, the way one real model would be prompted for each:

* **agent** (requests with ``tools``): first calls ``list_free_rooms`` for the requested slot, then
  names a room. It applies a rule only when the *system prompt* states it (keywords below); without
  rules it takes the nearest free room. So it answers correctly only when the prompt holds the
  instructions the task needs.
* **critic** (the rendered critique prompt, which holds ``Meeting request:`` transcripts): re-derives
  the right room of every run from the transcript, and for each wrong answer reports which rule the
  prompt is missing.
* **editor** (the rendered edit prompt): adds an instruction for every rule the critique names that
  the template lacks (only the first one when the prompt asks for the single most important fix).
* **judge** (requests with ``response_format``): JSON ``{reason, score}`` from the expected choice.

Faults can be queued per role (``rate_limit``, ``server_error``, ``bad_request``, ``unauthorized``,
``empty``, ``refusal``, ``slow``) or made permanent, and every request is counted per role.

Run alone with ``python -m agl.testing.apo_standin --port 8000`` and point
``OPENAI_BASE_URL=http://127.0.0.1:8000/v1`` at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Generator
from typing import Any, Literal, cast

from agl.testing.openai_standin import Reply, StandinBackend, StandinServer, ToolCall, serve_standin
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = [
    "INSTRUCTIONS",
    "RULE_PATTERNS",
    "ApoStandinBackend",
    "Fault",
    "Role",
    "classify",
    "rules_in",
    "serve_apo_standin",
]

Role = Literal["agent", "critic", "editor", "judge"]
Fault = Literal["rate_limit", "server_error", "bad_request", "unauthorized", "empty", "refusal", "slow"]

NO_ROOM = "No Room"

RULE_PATTERNS: dict[str, re.Pattern[str]] = {
    "capacity": re.compile(r"capacity", re.IGNORECASE),
    "equipment": re.compile(r"equipment", re.IGNORECASE),
    "accessibility": re.compile(r"accessib|wheelchair", re.IGNORECASE),
    "smallest": re.compile(r"smallest", re.IGNORECASE),
    "no_room": re.compile(r"\bno room\b", re.IGNORECASE),
}
"""How the stand-in recognises that a text states (or asks for) each rule."""

INSTRUCTIONS: dict[str, str] = {
    "capacity": "Only choose a room whose capacity is at least the number of attendees.",
    "equipment": "The room must have every item of equipment listed in needs.",
    "accessibility": "When accessible_required is true, only wheelchair-accessible rooms qualify.",
    "smallest": "Among the rooms that qualify, choose the smallest one, then the shortest walk.",
    "no_room": "If no free room meets every requirement, answer exactly: No Room.",
}
"""What the editor adds for each rule the critique asks for."""

CRITIQUES: dict[str, str] = {
    "capacity": "The prompt never says that the room's capacity must be at least the number of attendees{example}.",
    "equipment": "The prompt does not require the room to have all the equipment listed in needs{example}.",
    "accessibility": "The prompt never says that accessible_required=true rules out rooms without wheelchair access{example}.",
    "smallest": "When several rooms qualify the prompt gives no tie-break; it should prefer the smallest one that fits, then the nearest{example}.",
    "no_room": "The prompt does not say what to answer when no free room meets every requirement; it should then answer exactly No Room{example}.",
}

_REQUEST = re.compile(
    r"Meeting request:\s*date=(?P<date>[\d-]+);\s*time=(?P<time>[\d:]+);\s*duration_min=(?P<duration>\d+);\s*"
    r"attendees=(?P<attendees>\d+);\s*needs=(?P<needs>[\w,]+);\s*accessible_required=(?P<acc>true|false)"
)
_FINAL = re.compile(r"Final answer:\s*([A-Za-z][A-Za-z ]*)")
_FENCE = re.compile(r"```[\w-]*\n(.*?)\n```", re.DOTALL)


def rules_in(text: str) -> list[str]:
    """Rules a text states, in the order of :data:`RULE_PATTERNS`."""
    return [rule for rule, pattern in RULE_PATTERNS.items() if pattern.search(text)]


def _rules_by_position(text: str) -> list[str]:
    found = [(m.start(), rule) for rule, p in RULE_PATTERNS.items() if (m := p.search(text))]
    return [rule for _, rule in sorted(found)]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = cast("list[Any]", content)
        return "".join(
            str(cast("dict[str, Any]", p).get("text", "")) if isinstance(p, dict) else str(p) for p in parts
        )
    return ""


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's messages that are JSON objects."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    return [cast("dict[str, Any]", m) for m in cast("list[Any]", messages) if isinstance(m, dict)]


def classify(body: dict[str, Any]) -> Role:
    """Which model a request is for."""
    if body.get("response_format"):
        return "judge"
    if body.get("tools"):
        return "agent"
    text = " ".join(_text(m.get("content")) for m in _messages(body))
    return "critic" if "Meeting request:" in text else "editor"


def _parse_request(text: str) -> dict[str, Any] | None:
    match = _REQUEST.search(text)
    if match is None:
        return None
    needs = match.group("needs")
    return {
        "date": match.group("date"),
        "time": match.group("time"),
        "duration_min": int(match.group("duration")),
        "attendees": int(match.group("attendees")),
        "needs": [] if needs == "none" else needs.split(","),
        "accessible_required": match.group("acc") == "true",
    }


def _fits(room: dict[str, Any], request: dict[str, Any], rules: set[str]) -> bool:
    if "capacity" in rules and room["capacity"] < request["attendees"]:
        return False
    if "equipment" in rules and not set(request["needs"]) <= set(room["equipment"]):
        return False
    return not ("accessibility" in rules and request["accessible_required"] and not room["accessible"])


def choose(rows: list[dict[str, Any]], request: dict[str, Any], rules: set[str]) -> str:
    """The room the stand-in agent picks from the tool's rows (nearest first) under ``rules``."""
    fitting = [room for room in rows if _fits(room, request, rules)]
    if not fitting:
        return NO_ROOM if "no_room" in rules or not rows else rows[0]["name"]
    if "smallest" in rules:
        return min(fitting, key=lambda r: (r["capacity"], r["distance_m"], r["name"]))["name"]
    return fitting[0]["name"]


ALL_RULES = set(RULE_PATTERNS)


def _rows_after(text: str, start: int) -> list[dict[str, Any]] | None:
    index = text.find('[{"name"', start)
    if index < 0:
        index = text.find("[]", start)
        return [] if index >= 0 else None
    try:
        rows, _ = json.JSONDecoder().raw_decode(text, index)
    except ValueError:
        return None
    return cast("list[dict[str, Any]]", rows) if isinstance(rows, list) else None


def diagnose(request: dict[str, Any], rows: list[dict[str, Any]], answer: str) -> list[tuple[str, str]]:
    """(rule, example) for each rule a wrong answer broke; empty when the answer is right."""
    expected = choose(rows, request, ALL_RULES)
    if answer == expected:
        return []
    room = next((r for r in rows if r["name"] == answer), None)
    if room is None:
        return []
    broken: list[tuple[str, str]] = []
    if room["capacity"] < request["attendees"]:
        broken.append(("capacity", f"{answer} seats {room['capacity']} for {request['attendees']} attendees"))
    missing = sorted(set(request["needs"]) - set(room["equipment"]))
    if missing:
        broken.append(("equipment", f"{answer} has no {', '.join(missing)}"))
    if request["accessible_required"] and not room["accessible"]:
        broken.append(("accessibility", f"{answer} is not accessible"))
    if expected == NO_ROOM:
        broken.append(("no_room", "no room fitted"))
    elif not broken:
        broken.append(("smallest", f"{answer} was chosen over {expected}"))
    return broken


def critique_for(text: str) -> str:
    """What the stand-in critic says about a rendered critique prompt."""
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    starts = [m.start() for m in re.finditer("Meeting request:", text)]
    for i, start in enumerate(starts):
        segment = text[start : starts[i + 1] if i + 1 < len(starts) else len(text)]
        request = _parse_request(segment)
        rows = _rows_after(segment, 0)
        final = _FINAL.search(segment)
        if request is None or rows is None or final is None:
            continue
        for rule, example in diagnose(request, rows, final.group(1).strip()):
            counts[rule] += 1
            examples.setdefault(rule, example)
    if not counts:
        return "- All runs chose the expected room; the prompt needs no change."
    order = list(RULE_PATTERNS)
    ranked = sorted(counts, key=lambda rule: (-counts[rule], order.index(rule)))
    return "\n".join(
        "- Critique: " + CRITIQUES[rule].format(example=f" (e.g. {examples[rule]})") for rule in ranked
    )


def edit_for(text: str) -> str:
    """What the stand-in editor returns for a rendered edit prompt."""
    match = _FENCE.search(text)
    if match is None:
        return ""
    template = match.group(1)
    critique = text[match.end() :]
    wanted = [rule for rule in _rules_by_position(critique) if rule not in rules_in(template)]
    if "single most important" in text:
        wanted = wanted[:1]
    return "\n".join([template, *(INSTRUCTIONS[rule] for rule in wanted)])


def agent_reply(body: dict[str, Any]) -> Reply:
    """The stand-in agent's next move."""
    messages = _messages(body)
    system = " ".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
    user = " ".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
    request = _parse_request(user)
    if request is None:
        return Reply(content="Final answer: I need a meeting request (date, time, duration, attendees).")
    tool_results = [m for m in messages if m.get("role") == "tool"]
    if not tool_results:
        args = {"date": request["date"], "time": request["time"], "duration_min": request["duration_min"]}
        return Reply(tool_calls=[ToolCall("list_free_rooms", args)])
    try:
        rows: Any = json.loads(_text(tool_results[-1].get("content")))
    except ValueError:
        rows = None
    if not isinstance(rows, list):
        return Reply(content="Final answer: No Room (the room list could not be read)")
    rooms = cast("list[dict[str, Any]]", rows)
    return Reply(content=f"Final answer: {choose(rooms, request, set(rules_in(system)))}")


def judge_reply(body: dict[str, Any]) -> str:
    text = " ".join(_text(m.get("content")) for m in _messages(body))
    expected = re.search(r"Expected choice:\s*(.+)", text)
    answer = re.search(r"final answer:\s*(.+)", text, re.IGNORECASE)
    exp = expected.group(1).strip() if expected else ""
    got = answer.group(1).strip() if answer else ""
    good = bool(exp) and re.search(rf"\b{re.escape(exp)}\b", got, re.IGNORECASE) is not None
    return json.dumps({"reason": f"expected {exp}, got {got}", "score": 1.0 if good else 0.0})


class ApoStandinBackend(StandinBackend):
    """The stand-in: routes each request to its role, injects queued faults, counts calls per role."""

    def __init__(self, *, slow_s: float = 2.0) -> None:
        super().__init__(script=self._script)
        self.slow_s = slow_s
        self.calls: Counter[str] = Counter()
        self.faults: dict[str, deque[Fault]] = {
            role: deque() for role in ("agent", "critic", "editor", "judge")
        }
        self.permanent_faults: dict[str, Fault] = {}
        self._fault_lock = threading.Lock()

    def queue_faults(self, role: Role, *faults: Fault) -> None:
        """Make the next requests for ``role`` fail, one fault per request, in order."""
        with self._fault_lock:
            self.faults[role].extend(faults)

    def fail_always(self, role: Role, fault: Fault | None) -> None:
        """Make every request for ``role`` fail with ``fault`` (``None`` stops it)."""
        with self._fault_lock:
            if fault is None:
                self.permanent_faults.pop(role, None)
            else:
                self.permanent_faults[role] = fault

    def _next_fault(self, role: Role) -> Fault | None:
        with self._fault_lock:
            if self.faults[role]:
                return self.faults[role].popleft()
            return self.permanent_faults.get(role)

    def _script(self, body: dict[str, Any]) -> Reply | str:
        role = classify(body)
        text = "\n".join(_text(m.get("content")) for m in _messages(body))
        if role == "agent":
            return agent_reply(body)
        if role == "critic":
            return critique_for(text)
        if role == "editor":
            return edit_for(text)
        return judge_reply(body)

    async def chat_completions(self, request: Request) -> Response:
        try:
            body: Any = json.loads(await request.body())
        except ValueError:
            body = None
        if isinstance(body, dict):
            role = classify(cast("dict[str, Any]", body))
            self.calls[role] += 1
            fault = self._next_fault(role)
            if fault is not None:
                answer = await self._fault(fault, cast("dict[str, Any]", body))
                if answer is not None:
                    return answer
        return await super().chat_completions(request)

    async def _fault(self, fault: Fault, body: dict[str, Any]) -> Response | None:
        if fault == "slow":
            await asyncio.sleep(self.slow_s)
            return None
        statuses = {"rate_limit": 429, "server_error": 500, "bad_request": 400, "unauthorized": 401}
        if fault in statuses:
            status = statuses[fault]
            return JSONResponse(
                {"error": {"message": f"stand-in fault: {fault}", "type": fault, "code": status}},
                status_code=status,
            )
        message: dict[str, Any] = {"role": "assistant", "content": "" if fault == "empty" else None}
        if fault == "refusal":
            message["refusal"] = "I can't help with that."
        return JSONResponse(
            {
                "id": f"chatcmpl-fault-{time.time_ns()}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "standin"),
                "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1},
            }
        )


@contextlib.contextmanager
def serve_apo_standin(backend: ApoStandinBackend | None = None) -> Generator[StandinServer, None, None]:
    """Serve the APO stand-in on a free port of 127.0.0.1 until the block exits."""
    with serve_standin(backend or ApoStandinBackend()) as server:
        yield server


def main() -> None:  # pragma: no cover - manual runs
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description="Serve the APO room-selector stand-in models.")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(ApoStandinBackend().app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":  # pragma: no cover
    main()
