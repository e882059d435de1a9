"""``warn_at_caller``: a warning points at the first line outside the agl packages, however deep the helpers."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from agl.types.caller import warn_at_caller


def _helper_chain(depth: int) -> Any:
    """A function ``depth`` calls deep in modules named ``agl.*`` whose innermost call warns."""
    inner: Any = None
    for level in range(depth):
        namespace: dict[str, Any] = {"__name__": f"agl.fake.level{level}", "inner": inner}
        source = (
            "def call(warn):\n"
            "    return inner(warn) if inner else warn('deprecated here', DeprecationWarning)\n"
        )
        exec(compile(source, f"<agl.fake.level{level}>", "exec"), namespace)
        inner = namespace["call"]
    return inner


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_the_warning_points_at_the_callers_line_past_every_agl_frame(depth: int) -> None:
    chain = _helper_chain(depth)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line_after()
        chain(warn_at_caller)
    assert [str(w.message) for w in caught] == ["deprecated here"]
    assert caught[0].category is DeprecationWarning
    assert caught[0].filename == __file__ and caught[0].lineno == line


def test_called_from_outside_agl_it_points_at_that_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line_after()
        warn_at_caller("plain")
    assert caught[0].filename == __file__ and caught[0].lineno == line
    assert caught[0].category is UserWarning


def _line_after() -> int:
    """The line number after the caller's current line."""
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno + 1
