"""APO's POML prompts: every variant renders, with the template, the runs and the critique intact."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from agl.algorithms.apo import EDIT_VARIANTS, GRADIENT_VARIANTS, PROMPTS_DIR, RolloutResultForAPO, render_poml
from agl.algorithms.apo._prompts import edit_context, gradient_context, message_text

pytest.importorskip("poml")

TEMPLATE = (
    "You book rooms for {attendees} people.\n"
    "  Keep <tags> & {{literal braces}} as they are.\n"
    "Answer with one room."
)
ROWS = [{"name": "Aspen", "capacity": 4, "equipment": ["whiteboard"], "accessible": True, "distance_m": 10}]
RESULTS = [
    RolloutResultForAPO(
        rollout_id="ro-1",
        status="succeeded",
        final_reward=0.0,
        messages=[
            {"role": "system", "content": "You book rooms for 9 people."},
            {"role": "user", "content": "Meeting request: date=2026-03-02; attendees=9"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "list_free_rooms", "arguments": '{"date": "2026-03-02"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps(ROWS)},
            {"role": "assistant", "content": "Final answer: Aspen\nbecause it is near"},
        ],
    ),
    RolloutResultForAPO(rollout_id="ro-2", status="failed", final_reward=None, messages=[]),
]
CRITIQUE = "- Critique: say that capacity must cover the attendees.\n- Critique: say what to answer when nothing fits."


@pytest.fixture(scope="module", params=GRADIENT_VARIANTS)
def gradient_render(request: pytest.FixtureRequest) -> tuple[str, str]:
    messages = render_poml(request.param, gradient_context(TEMPLATE, RESULTS))
    assert [m["role"] for m in messages] == ["user"]
    return request.param, messages[0]["content"]


@pytest.fixture(scope="module", params=EDIT_VARIANTS)
def edit_render(request: pytest.FixtureRequest) -> tuple[str, str]:
    messages = render_poml(request.param, edit_context(TEMPLATE, CRITIQUE))
    assert [m["role"] for m in messages] == ["user"]
    return request.param, messages[0]["content"]


def test_variant_files_exist_and_differ() -> None:
    files = [PROMPTS_DIR / name for name in (*GRADIENT_VARIANTS, *EDIT_VARIANTS)]
    assert all(f.is_file() for f in files)
    assert len({f.read_text() for f in files}) == len(files)
    assert len(GRADIENT_VARIANTS) >= 3 and len(EDIT_VARIANTS) >= 2


def test_gradient_variant_shows_template_verbatim_in_a_fence(gradient_render: tuple[str, str]) -> None:
    _, text = gradient_render
    assert f"```text\n{TEMPLATE}\n```" in text


def test_gradient_variant_shows_every_run(gradient_render: tuple[str, str]) -> None:
    _, text = gradient_render
    # status and reward of both runs, and each message of the first with its role
    assert "succeeded" in text and "failed" in text
    assert "reward 0" in text or "score 0" in text
    assert "none" in text  # the missing reward of the second run
    assert "Meeting request: date=2026-03-02; attendees=9" in text
    assert 'calls list_free_rooms({"date": "2026-03-02"})' in text
    assert json.dumps(ROWS) in text
    assert re.search(r"Final answer: Aspen\n\s*because it is near", text)  # line breaks kept
    assert text.index("system") < text.index("Meeting request") < text.index("Final answer")


# What each prompt variant asks for (the variants of one kind differ in it).
_VARIANT_ASKS = {
    "critique_diagnose.poml": "bulleted list",
    "critique_failures.poml": 'starting with "Critique:"',
    "critique_checklist.poml": "under 300 words",
    "edit_rewrite.poml": "addresses every point of the critique",
    "edit_minimal.poml": "single most important point",
    "edit_add_rules.poml": "word for word",
}


def test_gradient_variants_ask_for_different_critiques(gradient_render: tuple[str, str]) -> None:
    variant, text = gradient_render
    assert _VARIANT_ASKS[variant] in text


def test_edit_variant_shows_template_and_critique_verbatim(edit_render: tuple[str, str]) -> None:
    _, text = edit_render
    assert f"```text\n{TEMPLATE}\n```" in text
    assert CRITIQUE in text
    assert text.index(TEMPLATE) < text.index(CRITIQUE)
    assert "placeholder" in text  # every variant asks to keep {placeholders}


def test_edit_variants_ask_for_different_edits(edit_render: tuple[str, str]) -> None:
    variant, text = edit_render
    assert _VARIANT_ASKS[variant] in text


def test_render_unknown_variant_names_the_file() -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.poml"):
        render_poml("nope.poml", {})


def test_render_rejects_context_that_is_not_json() -> None:
    with pytest.raises(TypeError, match="JSON-serialisable"):
        render_poml(GRADIENT_VARIANTS[0], {"prompt_template": object(), "experiments": []})


@pytest.mark.parametrize(
    ("message", "text"),
    [
        ({"role": "user", "content": "hi"}, "hi"),
        ({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, "a b"),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}],
            },
            "calls f({})",
        ),
        ({"role": "assistant", "content": "  ok  "}, "ok"),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "[image_url]"),
        (
            {"role": "tool", "content": [{"name": "Aspen", "capacity": 4}]},
            '[{"name": "Aspen", "capacity": 4}]',
        ),
        ({"role": "tool", "content": {"error": "bad"}}, '{"error": "bad"}'),
    ],
)
def test_message_text(message: dict[str, Any], text: str) -> None:
    assert message_text(message) == text


def test_message_text_cuts_long_messages_in_the_middle() -> None:
    text = message_text({"role": "tool", "content": "a" * 5000 + "END"})
    assert len(text) < 4100 and text.endswith("END") and "characters cut" in text
