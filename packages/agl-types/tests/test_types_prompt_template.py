"""``PromptTemplate`` renders with each of its three engines."""

from __future__ import annotations

import jinja2
import pytest
from agl.types import PromptTemplate
from hypothesis import given
from hypothesis import strategies as st

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)


@given(context=st.dictionaries(names, st.text(max_size=10) | st.integers(), min_size=1, max_size=4))
def test_f_string_is_str_format(context: dict[str, object]) -> None:
    template = " | ".join(f"{name}={{{name}}}" for name in context)
    assert PromptTemplate(template=template, engine="f-string").format(**context) == template.format(
        **context
    )


def test_f_string_is_the_default_engine_and_missing_names_raise() -> None:
    prompt = PromptTemplate(template="Solve {question}")
    assert prompt.engine == "f-string"
    assert prompt.format(question="1+1") == "Solve 1+1"
    with pytest.raises(KeyError, match="question"):
        prompt.format()


def test_jinja() -> None:
    prompt = PromptTemplate(
        template="{% for x in items %}[{{ x }}]{% endfor %} {{ name | upper }}", engine="jinja"
    )
    assert prompt.format(items=[1, 2], name="bob") == "[1][2] BOB"
    with pytest.raises(jinja2.UndefinedError):
        PromptTemplate(template="Hi {{ name }}", engine="jinja").format()


def test_jinja_does_not_escape_html() -> None:
    assert PromptTemplate(template="{{ code }}", engine="jinja").format(code="<b>&</b>") == "<b>&</b>"


def test_poml() -> None:
    prompt = PromptTemplate(template="<poml><p>Find the room for {{ guest }}.</p></poml>", engine="poml")
    assert prompt.format(guest="Ada") == "Find the room for Ada."
