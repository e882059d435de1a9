"""The store over HTTP: a server that serves any :class:`~agl.store.LightningStore` under ``/v1/agl``, and a
client that is a :class:`~agl.store.LightningStore` talking to one.

- ``server/``: :class:`~agl.store.LightningStoreServer` (``server/store.py``), its FastAPI app and the ASGI
  layers in front of it (hot path, middleware, idempotent replays), metrics, OTLP ingestion, the dashboard,
  the uvicorn plumbing and ``agl store --workers N``;
- ``client/``: :class:`~agl.store.LightningStoreClient` (``client/store.py``), its transport (retries,
  error mapping) and its keep-alive connection pool;
- ``_models.py``: the request and response bodies of the REST API, shared by both.

The public import paths are ``agl.store.server``, ``agl.store.client`` and ``agl.store`` itself.
"""
