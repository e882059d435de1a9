"""The reference's ``LightningStoreServer`` launch options, accepted so that its users' programs run as written.

``launch_mode``, ``launcher_args``, ``n_workers`` and ``tracker`` chose how the reference ran its server (a thread,
a process, the caller's loop; uvicorn workers; a metrics backend). This server always serves from a thread of its
own and keeps its own Prometheus figures at ``/metrics``; each option is honoured where it still means something
(the host and port of ``launcher_args``) and otherwise warns once with what to write instead.
"""

from __future__ import annotations

from typing import Any

from agl.types.caller import warn_at_caller

__all__ = ["LAUNCH_MODES", "reference_launch"]

LAUNCH_MODES = ("thread", "asyncio", "mp")


def reference_launch(
    host: str | None,
    port: int | None,
    launch_mode: str,
    launcher_args: Any,
    n_workers: int,
    tracker: Any,
) -> tuple[str | None, int | None]:
    """``(host, port)`` after the reference's launch options (``None``: the defaults), warning about those without
    effect here."""
    if launcher_args is not None:
        if host is not None or port is not None or launch_mode != "thread":
            raise ValueError("host, port and launch_mode cannot be given together with launcher_args")
        warn_at_caller(
            "LightningStoreServer(launcher_args=...) is deprecated: its host and port are used, the rest is "
            "ignored; pass host= and port= instead",
            DeprecationWarning,
        )
        host, port = getattr(launcher_args, "host", None), getattr(launcher_args, "port", None)
        launch_mode = str(getattr(launcher_args, "launch_mode", None) or launch_mode)
        n_workers = int(getattr(launcher_args, "n_workers", None) or n_workers)
    if launch_mode not in LAUNCH_MODES:
        raise ValueError(f"launch_mode must be one of {', '.join(LAUNCH_MODES)}, got {launch_mode!r}")
    if launch_mode == "mp":
        warn_at_caller(
            "LightningStoreServer(launch_mode='mp'): this server serves from a thread of this process instead "
            "(clients reach it the same way); `agl store` runs one in a process of its own"
        )
    if n_workers != 1:
        warn_at_caller(
            f"LightningStoreServer(n_workers={n_workers}) has no effect here: one server answers every call; "
            "`agl store --workers N` runs N worker processes"
        )
    if tracker is not None:
        warn_at_caller(
            "LightningStoreServer(tracker=...) has no effect here: the server keeps its own Prometheus figures "
            "at /metrics"
        )
    return host, port
