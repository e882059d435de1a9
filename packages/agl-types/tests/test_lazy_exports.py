"""``lazy_exports``: names a package offers at its top but imports on first use, then keeps."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agl.types.extras import MissingExtraError

PACKAGE = "agl_lazy_demo_pkg"


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A real package on disk whose ``Heavy`` lives in ``_heavy`` and ``NeedsExtra`` in a module that imports a
    third-party module that is not installed."""
    root = tmp_path / PACKAGE
    root.mkdir()
    (root / "__init__.py").write_text(
        "from agl.types.lazy import lazy_exports\n"
        "__all__ = ['Heavy', 'NeedsExtra', 'light']\n"
        "light = 1\n"
        "__getattr__, __dir__ = lazy_exports(\n"
        "    __name__, {'Heavy': '._heavy', 'NeedsExtra': '._extra'}, globals()\n"
        ")\n"
    )
    (root / "_heavy.py").write_text("class Heavy:\n    pass\n")
    (root / "_extra.py").write_text("import zz_not_installed_anywhere\nNeedsExtra = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(PACKAGE)
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def test_dir_lists_lazy_names_before_they_are_imported(demo: object) -> None:
    assert f"{PACKAGE}._heavy" not in sys.modules
    names = dir(demo)
    assert {"Heavy", "NeedsExtra", "light"} <= set(names)
    assert names == sorted(names)
    assert f"{PACKAGE}._heavy" not in sys.modules  # dir() imported nothing


def test_a_name_is_imported_on_first_use_and_then_cached_in_the_module_globals(demo: object) -> None:
    assert "Heavy" not in vars(demo)
    heavy = demo.Heavy  # pyright: ignore[reportAttributeAccessIssue]
    assert f"{PACKAGE}._heavy" in sys.modules
    assert heavy is sys.modules[f"{PACKAGE}._heavy"].Heavy
    assert vars(demo)["Heavy"] is heavy  # later lookups no longer go through __getattr__
    assert getattr(demo, "Heavy") is heavy  # noqa: B009
    from agl_lazy_demo_pkg import Heavy  # pyright: ignore[reportMissingImports]

    assert Heavy is heavy


def test_an_unknown_name_raises_attribute_error(demo: object) -> None:
    with pytest.raises(AttributeError, match=f"module '{PACKAGE}' has no attribute 'Nope'"):
        demo.Nope  # pyright: ignore[reportAttributeAccessIssue]  # noqa: B018
    assert not hasattr(demo, "Nope")


def test_a_name_whose_module_needs_a_missing_extra_names_it(demo: object) -> None:
    with pytest.raises(MissingExtraError, match=f"{PACKAGE}.NeedsExtra needs 'zz_not_installed_anywhere'"):
        demo.NeedsExtra  # pyright: ignore[reportAttributeAccessIssue]  # noqa: B018
