"""The pure parts of APO's beam search: parents, ranking, edit checks and matching calls to templates."""

from __future__ import annotations

import random

import pytest
from agl.algorithms.apo import PromptCandidate
from agl.algorithms.apo._beam import (
    clean_edit,
    conversations,
    edit_problem,
    fstring_fields,
    messages_using_template,
    select_parents,
    template_signature,
    top_candidates,
)
from agl.types import PromptTemplate
from hypothesis import given
from hypothesis import strategies as st


def cand(version: str, score: float | None = None) -> PromptCandidate:
    return PromptCandidate(version=version, templates={"p": PromptTemplate(template=version)}, score=score)


def test_short_beam_is_replicated_cyclically() -> None:
    beam = [cand("v0"), cand("v1")]
    parents = select_parents(beam, 5, random.Random(0))
    assert [p.version for p in parents] == ["v0", "v1", "v0", "v1", "v0"]


def test_full_beam_is_sampled_without_repetition() -> None:
    beam = [cand(f"v{i}") for i in range(6)]
    for seed in range(20):
        parents = select_parents(beam, 4, random.Random(seed))
        assert len({p.version for p in parents}) == 4


def test_select_parents_of_an_empty_beam_raises() -> None:
    with pytest.raises(ValueError, match="No beam candidates"):
        select_parents([], 2, random.Random(0))


def test_top_candidates_sorts_by_score_and_keeps_ties_in_order() -> None:
    ranked = top_candidates([cand("a", 0.5), cand("b", 0.9), cand("c", None), cand("d", 0.5)], 3)
    assert [c.version for c in ranked] == ["b", "a", "d"]
    with pytest.raises(ValueError, match="No beam candidates"):
        top_candidates([], 2)


@pytest.mark.parametrize(
    ("template", "fields"),
    [
        ("plain", set()),
        ("{a} and {b.c} and {d[0]}", {"a", "b", "d"}),
        ("{{escaped}} {x:{width}}", {"x", "width"}),
    ],
)
def test_fstring_fields(template: str, fields: set[str]) -> None:
    assert fstring_fields(template) == fields


def test_fstring_fields_rejects_unbalanced_braces() -> None:
    with pytest.raises(ValueError):
        fstring_fields("a { b")


@given(
    st.lists(st.sampled_from(["date", "time", "attendees"]), max_size=3),
    st.text(alphabet="abc .\n", max_size=30),
)
def test_fstring_fields_finds_every_placeholder(names: list[str], filler: str) -> None:
    template = filler.join("{" + n + "}" for n in names) + filler
    assert fstring_fields(template) == set(names)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("  new prompt \n", "new prompt"),
        ("```\nnew prompt\n```", "new prompt"),
        ("```text\nline 1\nline 2\n```\n", "line 1\nline 2"),
        ("keep ``` inside", "keep ``` inside"),
    ],
)
def test_clean_edit(raw: str, clean: str) -> None:
    assert clean_edit(raw) == clean


def test_template_signature_is_the_literal_text() -> None:
    template = PromptTemplate(template="Book a room for {attendees} people on {date}, please.")
    assert template_signature(template) == ["Book a room for"]  # short pieces are too common to count
    assert template_signature(PromptTemplate(template="{a} hi {b}")) == ["hi"]  # unless all are short
    jinja = PromptTemplate(template="Hello {{ name }}, you are a careful planner.", engine="jinja")
    assert template_signature(jinja) == [", you are a careful planner."]


def _record(*messages: tuple[str, str]) -> dict[str, object]:
    return {"messages": [{"role": r, "content": c} for r, c in messages], "tools": None}


def test_conversations_drop_calls_that_a_later_call_extends() -> None:
    first = _record(("system", "S"), ("user", "U"), ("assistant", "A1"))
    second = _record(("system", "S"), ("user", "U"), ("assistant", "A1"), ("tool", "T"), ("assistant", "A2"))
    other = _record(("system", "Other"), ("assistant", "B"))
    assert conversations([first, second, other]) == [second["messages"], other["messages"]]


def test_messages_using_template_keeps_the_calls_that_used_it() -> None:
    planner = PromptTemplate(template="You plan meetings for {attendees} people carefully.")
    writer = PromptTemplate(template="You write the confirmation e-mail in a friendly tone.")
    plan_call = _record(("system", "You plan meetings for 9 people   carefully."), ("assistant", "Oak"))
    mail_call = _record(
        ("system", "You write the confirmation e-mail in a friendly tone."), ("assistant", "Hi")
    )
    records = [plan_call, mail_call]
    assert messages_using_template(records, planner) == plan_call["messages"]
    assert messages_using_template(records, writer) == mail_call["messages"]
    assert messages_using_template(records, PromptTemplate(template="Something else entirely.")) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("Book for {attendees}.", "Book for {attendees}. Check capacity.", None),
        ("Book for {attendees}.", "Book a room.", None),  # dropping a placeholder is allowed
        ("Book for {attendees}.", "", "empty template"),
        ("Book for {attendees}.", "Book for {attendees}.", "changed nothing"),
        (
            "Book for {attendees}.",
            "Book for {attendees} on {weekday}.",
            "placeholders the agent does not fill: weekday",
        ),
        ("Book for {attendees}.", 'Answer as JSON: {"room": "..."}', "placeholders the agent does not fill"),
        ("Book for {attendees}.", "Book for {attendees.", "does not parse as an f-string template"),
    ],
)
def test_edit_problem(old: str, new: str, problem: str | None) -> None:
    found = edit_problem(PromptTemplate(template=old), new)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_edit_problem_leaves_other_engines_to_their_renderer() -> None:
    assert edit_problem(PromptTemplate(template="Hi {{ name }}", engine="jinja"), "Hi {{ other }}") is None
