"""What the agl-* tests share (workspace only: never published, see the package's README).

Modules, each imported on its own (this package imports nothing, so its pytest plugins load fast):

- :mod:`agl.testing.clock` -- :class:`~agl.testing.clock.ManualClock`, a clock that moves only when told to;
- :mod:`agl.testing.spans` -- span builders (``make_span``, ``span_for``) and ``claim`` (an attempt to add to);
- :mod:`agl.testing.threads` -- ``run_in_threads``, async work in several threads with their own loops;
- :mod:`agl.testing.postgres` -- ``require_postgres`` (a real server: yours, or one from a wheel) and fresh schemas;
- :mod:`agl.testing.browser` -- ``find_chromium``, the browser the dashboard tests drive (or a skip);
- :mod:`agl.testing.store` -- the store-backend fixtures (a pytest plugin), stores by backend name, stores
  served over HTTP, fresh SQL databases and SQL worker processes;
- :mod:`agl.testing.openai_standin` -- the deterministic OpenAI-compatible stand-in server (vLLM style);
- :mod:`agl.testing.apo_standin` -- the stand-in playing the APO example's models;
- :mod:`agl.testing.strategies` -- Hypothesis strategies of the data model;
- :mod:`agl.testing.tiny_model` -- a tiny real Llama model and tokenizer built on the spot;
- :mod:`agl.testing.tracer`, :mod:`agl.testing.proxy` -- the tracer's and the proxy's test helpers;
- :mod:`agl.testing.prometheus` -- reading Prometheus text exposition;
- :mod:`agl.testing.child` -- ``run_python``, code run in a fresh interpreter (what importing does);
- :mod:`agl.testing.e2e` -- agents, apps and harnesses of the end-to-end tests;
- :mod:`agl.testing.plugin` -- the workspace's plugin: ``AGL_*`` variables cleared, leaks reported where made.

The pytest plugins (:mod:`agl.testing.plugin`, :mod:`agl.testing.store.fixtures`) load only where a suite opts in
with ``pytest_plugins`` (the workspace's root ``conftest.py``): installing agl-testing enables nothing.
"""

__version__ = "0.0.0"
