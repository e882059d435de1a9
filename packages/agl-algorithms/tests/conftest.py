from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random model and its tokenizer (:func:`agl.testing.tiny_model.build_tiny_model`), one per module."""
    from agl.testing.tiny_model import build_tiny_model  # imports torch: only for the tests that ask for it

    return build_tiny_model(tmp_path_factory.mktemp("tiny"))
