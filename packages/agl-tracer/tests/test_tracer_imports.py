"""``import agl.tracer`` stays light, and OpenAI is instrumented only once the application imports it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def run_python(code: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], check=True, capture_output=True, text=True, timeout=120
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_pulls_in_no_heavy_library() -> None:
    result = run_python(
        """
        import json, sys, time
        t = time.perf_counter()
        import agl.tracer
        elapsed = time.perf_counter() - t
        heavy = [m for m in ("openai", "agentops", "opentelemetry.sdk.trace", "litellm", "aiohttp", "fastapi")
                 if m in sys.modules]
        print(json.dumps({"elapsed": elapsed, "heavy": heavy}))
        """
    )
    assert result["heavy"] == []
    assert (
        isinstance(result["elapsed"], float) and result["elapsed"] < 5.0
    )  # mostly pydantic (agl.types); ~0.2 s of it is ours


def test_openai_is_patched_when_the_application_imports_it() -> None:
    result = run_python(
        """
        import json, sys
        from agl.tracer import OtelTracer
        tracer = OtelTracer()
        tracer.init_worker(0)
        before = "openai" in sys.modules
        from agl.tracer.instrumentation import is_openai_instrumented
        patched_before = is_openai_instrumented()
        import openai
        print(json.dumps({"before": before, "patched_before": patched_before, "after": is_openai_instrumented()}))
        """
    )
    assert result == {"before": False, "patched_before": False, "after": True}


def test_every_public_name_is_listed_by_dir_and_resolves() -> None:
    result = run_python(
        """
        import json, agl.tracer
        listed = sorted(set(agl.tracer.__all__) - set(dir(agl.tracer)))
        missing = [n for n in agl.tracer.__all__ if getattr(agl.tracer, n, None) is None]
        cached = "OtelTracer" in vars(agl.tracer)
        print(json.dumps({"unlisted": listed, "missing": missing, "cached": cached}))
        """
    )
    assert result == {"unlisted": [], "missing": [], "cached": True}
