"""The ``agl`` command and its ``agl store`` subcommand.

Subcommands come from the ``agl.commands`` entry-point group: each entry point names a callable that
takes the remaining arguments (``list[str]``) and returns an exit status. ``agl-store`` registers
``store``; later packages add theirs the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from agl.types.env import STORE_BACKEND

from ._open import open_store
from ._open import redact_url as _redact
from .base import LightningStore

if TYPE_CHECKING:
    from .http.server._settings import ServerSettings

__all__ = [
    "add_log_level",
    "add_token_options",
    "configure_logging",
    "main",
    "open_store_backend",
    "read_token",
    "store_command",
]

Command = Callable[[list[str]], "int | None"]


def _commands() -> dict[str, Callable[[], Command]]:
    found: dict[str, Callable[[], Command]] = {"store": lambda: store_command}
    for ep in entry_points(group="agl.commands"):
        found[ep.name] = ep.load
    return found


def _summary(load: Callable[[], Command]) -> str:
    """The first line of a command's docstring, without its ``agl <name>:`` prefix."""
    try:
        doc = (load().__doc__ or "").strip().splitlines()
    except Exception as exc:  # a broken plugin must not break `agl --help`
        return f"(cannot be loaded: {exc})"
    return doc[0].split(": ", 1)[-1] if doc else ""


def _usage(commands: dict[str, Callable[[], Command]]) -> str:
    width = max(map(len, commands))
    lines = ["usage: agl <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {_summary(load)}" for name, load in sorted(commands.items())]
    lines += ["", "Run 'agl <command> --help' for the options of a command."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agl`` console script: ``agl <command> ...``; no command prints the help and exits 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    commands = _commands()
    if not args:
        print(_usage(commands), file=sys.stderr)
        return 2
    if args[0] in ("-h", "--help"):
        print(_usage(commands))
        return 0
    name, rest = args[0], args[1:]
    if name not in commands:
        print(f"agl: unknown command {name!r}\n\n{_usage(commands)}", file=sys.stderr)
        return 2
    return int(commands[name]()(rest) or 0)


def open_store_backend(
    backend: str,
    *,
    watchdog_interval: float | None = None,
    memory_max_bytes: int | None = None,
    memory_max_rollouts: int | None = None,
) -> LightningStore:
    """The store ``backend`` names (see :func:`agl.store.open_store`), for the ``agl store`` command.

    ``memory_max_bytes`` / ``memory_max_rollouts`` cap a ``memory`` backend (``0``: no cap; ``None``: the
    default cap, :data:`agl.store.DEFAULT_MEMORY_MAX_BYTES`); other backends refuse them."""
    options: dict[str, Any] = {}
    if memory_max_bytes is not None:
        options["max_bytes"] = memory_max_bytes or None
    if memory_max_rollouts is not None:
        options["max_rollouts"] = memory_max_rollouts or None
    if options and backend.strip() not in ("", "memory"):
        raise ValueError("--memory-max-bytes and --memory-max-rollouts apply to --backend memory only")
    return open_store(backend, scan_debounce_seconds=watchdog_interval, **options)


def _store_parser() -> argparse.ArgumentParser:
    from .http.server.store import DEFAULT_MAX_BODY_BYTES, DEFAULT_PORT

    parser = argparse.ArgumentParser(
        prog="agl store",
        description="Serve a LightningStore over HTTP (REST under /v1/agl, OTLP/HTTP traces at /v1/traces).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default: {DEFAULT_PORT})")
    parser.add_argument(
        "--backend",
        default=STORE_BACKEND.get(),
        help="memory | sqlite:///path/to/file.db | postgresql://user:pw@host/db (default: memory, or AGL_STORE_BACKEND)",
    )
    add_token_options(parser, "bearer token required on every route but /v1/agl/health", "AGL_STORE_TOKEN")
    parser.add_argument(
        "--cors-origin", action="append", default=[], help="allow this CORS origin (repeatable; '*' for any)"
    )
    parser.add_argument(
        "--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="largest accepted request body"
    )
    parser.add_argument(
        "--watchdog-interval",
        type=float,
        default=None,
        help="seconds between scans for timed-out and unresponsive attempts (default: the store's)",
    )
    parser.add_argument(
        "--memory-max-bytes",
        type=int,
        default=None,
        help="memory backend: evict the oldest finished rollouts past about this many bytes (default: 1 GiB; "
        "0: no cap)",
    )
    parser.add_argument(
        "--memory-max-rollouts",
        type=int,
        default=None,
        help="memory backend: keep at most this many rollouts, evicting the oldest finished ones (0: no cap)",
    )
    parser.add_argument(
        "--metrics-public",
        action="store_true",
        help="serve Prometheus metrics at /metrics without the bearer token (default: token required)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port (default: 1); more than 1 needs a SQL backend, and the "
        "workers share long polls, the watchdog, idempotent replays and /metrics through it",
    )
    parser.add_argument(
        "--plain-http",
        action="store_true",
        help="serve with uvicorn's own HTTP protocol (slower; for a uvicorn release the faster one does not "
        "support yet)",
    )
    parser.add_argument("--debug", action="store_true", help="include tracebacks in 500 answers")
    add_log_level(parser)
    return parser


def add_token_options(parser: argparse.ArgumentParser, what: str, env: str) -> None:
    """``--token`` and ``--token-file`` (one of them); :func:`read_token` gives the token they name."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help=f"file holding the {what} (its first line); preferred, with {env}, to --token",
    )
    group.add_argument(
        "--token",
        default=None,
        help=f"{what} (default: {env}; none if unset). Visible to every user of this machine in 'ps': "
        f"prefer {env} or --token-file",
    )


def read_token(args: argparse.Namespace) -> str | None:
    """The token of ``--token`` or ``--token-file`` (``None``: neither given, the environment decides).

    Raises ``ValueError`` naming the file when it cannot be read or holds no token.
    """
    path = getattr(args, "token_file", None)
    if path is None:
        return args.token
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the token file {path!r}: {exc}") from None
    if not token:
        raise ValueError(f"the token file {path!r} is empty; put the token on its first line")
    return token


def add_log_level(parser: argparse.ArgumentParser) -> None:
    """The ``--log-level`` option every ``agl`` command has; :func:`configure_logging` applies it."""
    parser.add_argument("--log-level", default="INFO", help="logging level (default: INFO)")


def configure_logging(args: argparse.Namespace) -> None:
    """Log to stderr at the ``--log-level`` of ``args``, in the format of every ``agl`` command."""
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def store_command(argv: list[str]) -> int:
    """``agl store``: serve a LightningStore over HTTP (REST, OTLP traces, dashboard, metrics) until stopped."""
    args = _store_parser().parse_args(argv)
    configure_logging(args)
    try:
        settings = _server_settings(args)
    except ValueError as exc:
        print(f"agl store: {exc}", file=sys.stderr)
        return 2
    if args.workers != 1:
        return _serve_workers(args, settings)
    try:
        store = open_store_backend(
            args.backend,
            watchdog_interval=args.watchdog_interval,
            memory_max_bytes=args.memory_max_bytes,
            memory_max_rollouts=args.memory_max_rollouts,
        )
    except (ValueError, ImportError) as exc:
        print(f"agl store: {exc}", file=sys.stderr)
        return 2
    server = settings.server(store)

    def announce() -> None:
        print(
            f"agl store: serving {_redact(args.backend)} at {server.endpoint} "
            f"(API {server.endpoint}/v1/agl, OTLP {server.otlp_traces_endpoint()}, "
            f"dashboard {server.endpoint}/dashboard, metrics {server.endpoint}/metrics; {settings.auth})",
            flush=True,
        )

    try:
        server.run_forever(on_started=announce)
    except OSError as exc:
        print(f"agl store: {exc}", file=sys.stderr)
        return 1
    finally:
        asyncio.run(store.close())
    print("agl store: stopped", flush=True)
    return 0


def _server_settings(args: argparse.Namespace) -> ServerSettings:
    """What the server process (or each worker) needs, from the command line; one place for both, so that
    ``--token-file`` guards either. ``ValueError`` says what is wrong (an unreadable token file)."""
    from agl.types.env import STORE_TOKEN

    from .http.server._settings import ServerSettings

    return ServerSettings(
        backend=args.backend,
        host=args.host,
        port=args.port,
        token=STORE_TOKEN.get(read_token(args)),
        cors_allow_origins=list(args.cors_origin),
        max_body_bytes=args.max_body_bytes,
        debug=args.debug,
        metrics_public=args.metrics_public,
        plain_http=args.plain_http,
        watchdog_interval=args.watchdog_interval,
        log_level=args.log_level,
    )


def _serve_workers(args: argparse.Namespace, settings: ServerSettings) -> int:
    from .http.server._workers import check_backend, serve_workers

    try:
        check_backend(args.backend, args.workers)
    except ValueError as exc:
        print(f"agl store: {exc}", file=sys.stderr)
        return 2

    def announce(endpoint: str) -> None:
        print(
            f"agl store: serving {_redact(args.backend)} at {endpoint} with {args.workers} workers "
            f"(API {endpoint}/v1/agl, OTLP {endpoint}/v1/traces, dashboard {endpoint}/dashboard, "
            f"metrics {endpoint}/metrics; {settings.auth})",
            flush=True,
        )

    try:
        status = serve_workers(settings, args.workers, on_started=announce)
    except (OSError, ValueError, ImportError, RuntimeError) as exc:
        print(f"agl store: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, OSError) else 2
    print("agl store: stopped", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
