"""``open_store(url)``: the one way to open a store from a URL (the CLI, the apps and the Trainer use it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import LightningStore

__all__ = ["DEFAULT_MEMORY_MAX_BYTES", "STORE_URL_FORMS", "is_store_url", "open_store", "redact_url"]

DEFAULT_MEMORY_MAX_BYTES = 1 << 30
"""The memory cap of a ``memory`` store opened by URL (1 GiB of rollouts, attempts and spans, as
:class:`~agl.store.InMemoryLightningStore` estimates them): past it the oldest finished rollouts are evicted,
so that a long-running ``agl store`` cannot grow without bound. ``max_bytes=None`` lifts it."""

STORE_URL_FORMS = (
    "'memory' (or empty)",
    "'sqlite:///path/to/file.db' (or a plain path ending in .db, .sqlite or .sqlite3)",
    "'postgresql://user:password@host:5432/database'",
    "'http://host:port' or 'https://host:port' (a store server)",
)
"""What :func:`open_store` accepts, as said in its error message."""

_SQL_SCHEMES = ("sqlite:", "postgresql:", "postgresql+asyncpg:", "postgres:")
_HTTP_SCHEMES = ("http://", "https://")
_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def is_store_url(text: str) -> bool:
    """Whether ``text`` has one of the forms :func:`open_store` accepts (not whether it can be opened)."""
    text = text.strip()
    return (
        text in ("", "memory")
        or text.startswith(_SQL_SCHEMES + _HTTP_SCHEMES)
        or ("://" not in text and text.lower().endswith(_SQLITE_SUFFIXES))
    )


def open_store(
    url: str | None = None,
    *,
    scan_debounce_seconds: float | None = None,
    token: str | None = None,
    **options: Any,
) -> LightningStore:
    """The store ``url`` names, not yet started (stores start lazily on first use).

    - ``memory``, empty or ``None``: an :class:`~agl.store.InMemoryLightningStore`, capped at
      :data:`DEFAULT_MEMORY_MAX_BYTES` unless ``max_bytes=`` says otherwise;
    - ``sqlite:///path/to/file.db``, or a plain path ending in ``.db``/``.sqlite``/``.sqlite3``, and
      ``postgresql://user:password@host:5432/database``: a :class:`~agl.store.SqlLightningStore`;
    - ``http://host:port`` or ``https://…``: a :class:`~agl.store.LightningStoreClient` of that server.

    Args:
        url: Where the store is.
        scan_debounce_seconds: Seconds between the watchdog's scans for timed-out attempts (local stores;
            ``None``: the store's default).
        token: Bearer token of a store server (``None``: ``AGL_STORE_TOKEN``); only for ``http(s)://``.
        options: Further keyword arguments of the store's constructor (e.g. ``retry_delays`` of the client,
            engine options of the SQL store).

    Raises:
        ValueError: ``url`` has none of these forms (the message lists them), or its options do not fit.
    """
    text = (url or "").strip()
    local: dict[str, Any] = (
        {} if scan_debounce_seconds is None else {"scan_debounce_seconds": scan_debounce_seconds}
    )
    if text.startswith(_HTTP_SCHEMES):
        if scan_debounce_seconds is not None:
            raise ValueError(
                "scan_debounce_seconds applies to local stores; the server's store runs the watchdog"
            )
        from .http.client.store import LightningStoreClient

        return LightningStoreClient(text, token=token, **options)
    if token is not None:
        raise ValueError(
            f"token= is only for a store server URL (http:// or https://), not {redact_url(text)!r}"
        )
    if text in ("", "memory"):
        from .memory.store import InMemoryLightningStore

        options.setdefault("max_bytes", DEFAULT_MEMORY_MAX_BYTES)
        return InMemoryLightningStore(**local, **options)
    if "://" not in text and text.lower().endswith(_SQLITE_SUFFIXES):
        text = f"sqlite:///{Path(text).expanduser().resolve()}"
    if text.startswith(_SQL_SCHEMES):
        from .sql import SqlLightningStore

        return SqlLightningStore(text, **local, **options)
    raise ValueError(f"unknown store backend {redact_url(text)!r}: use one of {', '.join(STORE_URL_FORMS)}")


def redact_url(url: str) -> str:
    """``url`` without its password (for messages and logs)."""
    from urllib.parse import urlsplit, urlunsplit

    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{password}@", ":***@")))
