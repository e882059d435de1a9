"""``agl.algorithms.verl``'s lazy face: every exported name resolves, ``dir()`` lists them, an unknown name is an
``AttributeError``, and a missing ``verl`` extra is reported as such (not as a bare ``No module named``)."""

from __future__ import annotations

import json

import agl.algorithms.verl as verl_package
import pytest
from agl.testing.child import run_python


def test_dir_lists_every_export_and_an_unknown_name_is_an_attribute_error() -> None:
    assert set(verl_package.__all__) <= set(dir(verl_package))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = verl_package.NoSuchThing  # type: ignore[attr-defined]


def test_the_pure_exports_resolve_without_importing_verl() -> None:
    code = (
        "import json, sys\n"
        "import agl.algorithms.verl as v\n"
        "names = [v.VERL, v.check_requirements, v.convert_rollout, v.turns_from_triplets,\n"
        "         v.LoopSample, v.ConversionStats, v.read_task, v.write_tasks]\n"
        "print(json.dumps({'verl_loaded': 'verl' in sys.modules, 'cached': 'VERL' in vars(v)}))\n"
    )
    assert json.loads(run_python(code)) == {"verl_loaded": False, "cached": True}


def test_a_verl_export_without_the_verl_extra_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['verl'] = None  # as if the verl extra were not installed\n"
        "import agl.algorithms.verl as v\n"
        "from agl.types.extras import MissingExtraError\n"
        "try:\n"
        "    v.AglBridgeAgentLoop\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    out = run_python(code)
    assert out.startswith("agl.algorithms.verl.AglBridgeAgentLoop needs 'verl")
    assert "the 'verl' extra: pip install 'agl-algorithms[verl]'" in out
