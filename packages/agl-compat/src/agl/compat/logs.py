"""``setup_logging``, ``setup_module_logging`` and ``configure_logger``: the reference's logging set-up, for agl.

The agl packages log under ``agl.*`` (``agl.runner.trainer``, ``agl.store.server``...), so the logger these set
up is ``agl`` where the reference's was ``agentlightning``; a ``name`` (or a ``submodule_levels`` key) spelled
``agentlightning[.x]`` is read as ``agl[.x]``. Handlers these functions add are marked, and replaced (not
stacked) when they are called again.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BASE_LOGGER",
    "DATE_FORMAT",
    "DEFAULT_FORMAT",
    "configure_logger",
    "setup_logging",
    "setup_module_logging",
]

BASE_LOGGER = "agl"
"""The logger every agl package logs under."""
DEFAULT_FORMAT = "%(asctime)s [%(levelname)s] (Process-%(process)d %(name)s)   %(message)s"
DATE_FORMAT = "%H:%M:%S"
_MARK = "_agl_compat_handler"


def _logger_name(name: str) -> str:
    """``agentlightning[.x]`` -> ``agl[.x]``; other names as given."""
    if name == "agentlightning" or name.startswith("agentlightning."):
        return BASE_LOGGER + name[len("agentlightning") :]
    return name


def _level(level: int | str) -> int:
    if isinstance(level, int):
        return level
    value = {
        "CRITICAL": 50,
        "FATAL": 50,
        "ERROR": 40,
        "WARN": 30,
        "WARNING": 30,
        "INFO": 20,
        "DEBUG": 10,
        "NOTSET": 0,
    }.get(level.upper())
    if value is None:
        raise ValueError(f"unknown logging level {level!r}")
    return value


def _console_handler(color: bool | Mapping[str, Any], formatter: logging.Formatter | None) -> logging.Handler:
    handler: logging.Handler
    if color:
        from rich.logging import RichHandler

        options = dict(color) if isinstance(color, Mapping) else {}
        options.setdefault("rich_tracebacks", False)
        handler = RichHandler(**options)
        handler.setFormatter(formatter or logging.Formatter("(Process-%(process)d %(name)s)   %(message)s"))
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(formatter or logging.Formatter(DEFAULT_FORMAT, DATE_FORMAT))
    return handler


def _install(logger: logging.Logger, handlers: list[logging.Handler], level: int, propagate: bool) -> None:
    """Replace the handlers this module added to ``logger`` before with ``handlers``."""
    for old in [h for h in logger.handlers if getattr(h, _MARK, False)]:
        logger.removeHandler(old)
        old.close()
    for handler in handlers:
        setattr(handler, _MARK, True)
        logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = propagate


def setup_module_logging(
    level: int | str = "INFO",
    *,
    name: str = "agentlightning",
    console: bool = True,
    color: bool | dict[str, Any] = True,
    propagate: bool = False,
    disable_existing_loggers: bool = False,
    formatter: logging.Formatter | None = None,
) -> logging.Logger:
    """Set up and return the logger ``name`` (``agentlightning`` means ``agl``): its level, and a console handler
    (``rich`` when ``color``, a dict of ``RichHandler`` options allowed; plain text otherwise).

    Args:
        level: A level number or name.
        name: The logger.
        console: Whether to add a console handler.
        color: Rich output (or ``RichHandler`` keyword arguments); ``False``: plain text.
        propagate: Whether records also go to the parent loggers.
        disable_existing_loggers: Disable every other logger that exists now (as ``logging.config`` does).
        formatter: The console handler's formatter (default: time, level, process, logger name).
    """
    logger = logging.getLogger(_logger_name(name))
    if disable_existing_loggers:
        for other_name, other in logging.root.manager.loggerDict.items():
            if isinstance(other, logging.Logger) and not other_name.startswith(logger.name):
                other.disabled = True
    handlers = [_console_handler(color, formatter)] if console else []
    _install(logger, handlers, _level(level), propagate)
    return logger


def _file_handlers(files: str | Mapping[str, str] | None, level: int) -> dict[str, logging.FileHandler]:
    """Logger name -> file handler, from ``files`` (one path for the base logger, or logger name -> path)."""
    if files is None:
        return {}
    targets = (
        {BASE_LOGGER: files} if isinstance(files, str) else {_logger_name(k): v for k, v in files.items()}
    )
    found: dict[str, logging.FileHandler] = {}
    for logger_name, path in targets.items():
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setLevel(level)
        handler.setFormatter(logging.Formatter(DEFAULT_FORMAT, DATE_FORMAT))
        found[logger_name] = handler
    return found


def setup_logging(
    level: int | str = "INFO",
    *,
    console: bool = True,
    color: bool | dict[str, Any] = True,
    propagate: bool = False,
    disable_existing_loggers: bool = False,
    capture_warnings: bool = False,
    submodule_levels: dict[str, int | str] | None = None,
    extra_handlers: list[logging.Handler] | None = None,
    formatter: logging.Formatter | None = None,
    apply_to: list[str] | None = None,
    files: str | dict[str, str] | None = None,
) -> None:
    """Configure the ``agl`` loggers (the reference's ``setup_logging``); the root logger is left alone.

    Args:
        level: The level of ``agl`` (and of the ``apply_to`` loggers).
        console, color, propagate, disable_existing_loggers, formatter: As in :func:`setup_module_logging`.
        capture_warnings: Route ``warnings.warn`` through logging (``py.warnings``, with the same handlers).
        submodule_levels: Logger name -> level (``"agl.store"``, or the reference's ``"agentlightning.store"``).
        extra_handlers: Further handlers for ``agl``.
        apply_to: Other loggers (your application's) given the same handlers and level.
        files: A path that ``agl`` also writes to, or logger name -> path.
    """
    base = setup_module_logging(
        level,
        name=BASE_LOGGER,
        console=console,
        color=color,
        propagate=propagate,
        disable_existing_loggers=disable_existing_loggers,
        formatter=formatter,
    )
    numeric = _level(level)
    shared = [h for h in base.handlers if getattr(h, _MARK, False)]
    for handler in extra_handlers or []:
        setattr(handler, _MARK, True)
        base.addHandler(handler)
        shared.append(handler)
    per_logger = _file_handlers(files, numeric)
    if BASE_LOGGER in per_logger:
        setattr(per_logger[BASE_LOGGER], _MARK, True)
        base.addHandler(per_logger.pop(BASE_LOGGER))
    for name in apply_to or []:
        target = logging.getLogger(_logger_name(name))
        extra = [per_logger.pop(target.name)] if target.name in per_logger else []
        _install(target, [*shared, *extra], numeric, propagate)
    for name, handler in per_logger.items():
        target = logging.getLogger(name)
        for previous in [
            h for h in target.handlers if getattr(h, _MARK, False) and isinstance(h, logging.FileHandler)
        ]:
            target.removeHandler(previous)
            previous.close()
        setattr(handler, _MARK, True)
        target.addHandler(handler)
    for name, sub_level in (submodule_levels or {}).items():
        logging.getLogger(_logger_name(name)).setLevel(_level(sub_level))
    if capture_warnings:
        logging.captureWarnings(True)
        _install(logging.getLogger("py.warnings"), shared, numeric, False)


def configure_logger(level: int = logging.INFO, name: str = "agentlightning") -> logging.Logger:
    """Deprecated (in the reference too): :func:`setup_module_logging` with a console handler."""
    warnings.warn(
        "configure_logger() is deprecated: use setup_logging() (or setup_module_logging())",
        DeprecationWarning,
        stacklevel=2,
    )
    return setup_module_logging(level, name=name, console=True, color=True, propagate=False)
