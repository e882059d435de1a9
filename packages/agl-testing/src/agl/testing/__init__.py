"""What the agl-* tests share (workspace only: never published, see the package's README).

Modules, each imported on its own (this package imports nothing, so its pytest plugins load fast):

- :mod:`agl.testing.clock` -- :class:`~agl.testing.clock.ManualClock`, a clock that moves only when told to;
- :mod:`agl.testing.spans` -- span builders (``make_span``, ``span_for``) and ``claim`` (an attempt to add to);
- :mod:`agl.testing.threads` -- ``run_in_threads``, async work in several threads with their own loops;
- :mod:`agl.testing.postgres` -- ``POSTGRES_URL``, ``require_postgres`` and fresh PostgreSQL schemas;
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
- :mod:`agl.testing.isolated_env` -- the plugin that clears ``AGL_*`` variables for every test.

The pytest plugins (:mod:`agl.testing.isolated_env`, :mod:`agl.testing.store.fixtures`) are registered by the
package's ``pytest11`` entry points: installing agl-testing (it is in the workspace's dev group) enables them.
"""

__version__ = "0.0.0"
