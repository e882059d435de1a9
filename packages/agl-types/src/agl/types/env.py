"""Every ``AGL_*`` environment variable agl reads, and the one parser that reads them.

Each variable is an :class:`EnvVar` constant with its name, meaning and default; :data:`ENV_VARS` lists them
all and :class:`LightningEnvVar` names them (the reference system's enum). Values are stripped; an empty or
blank value counts as unset. Explicit arguments always win over the environment (``override``).

================================  ===========================================================  ==============
Variable                          Meaning                                                      Default
================================  ===========================================================  ==============
``AGL_CURRENT_ROLE``              which side this process runs under the client-server         ``both``
                                  strategy: ``algorithm``, ``runner`` or ``both``
``AGL_MANAGED_STORE``             whether the strategy serves/wraps the store itself; with     true
                                  false a Trainer without a store connects to
                                  ``AGL_SERVER_HOST:AGL_SERVER_PORT``
``AGL_SERVER_HOST``               where the store server listens or is reached                 ``127.0.0.1``
``AGL_SERVER_PORT``               its port                                                     ``4747``
``AGL_STORE_TOKEN``               bearer token of the store server (server and client)         none
``AGL_STORE_BACKEND``             backend URL of ``agl store`` (see ``agl.store.open_store``)  ``memory``
``AGL_PROXY_TOKEN``               bearer token of the LLM proxy                                none
``AGL_AGENTOPS_SERVICE``          let ``AgentOpsTracer`` use AgentOps' hosted service          false
``AGL_EMITTER_DEBUG``             kept for the reference system's enum; nothing reads it       false
``AGL_CPU_SERVER_THREADS``        torch threads of each model server of verl's CPU rollout     ``2``
                                  (``agl.algorithms.verl.cpu``)
================================  ===========================================================  ==============

Booleans accept ``1/true/yes/on`` and ``0/false/no/off`` in any case; anything else is a ``ValueError`` that
names the variable, as is a malformed number or a value outside an enumeration.

This module is the only place in ``packages/*/src`` that reads ``os.environ`` for agl's own variables.
Documented exceptions, which are other libraries' variables and not agl's: ``agl.proxy`` sets LiteLLM's
``LITELLM_LOCAL_MODEL_COST_MAP`` (``setdefault``) before importing LiteLLM, so that it does not fetch its
cost map over the network; ``agl.tracer``'s AgentOps tracer sets AgentOps' ``AGENTOPS_LOGGING_TO_FILE``
(``setdefault`` to false) before importing AgentOps, so that it writes no ``agentops.log`` into the working
directory.

One other library's variable is read here, through the same parser: ``PROMETHEUS_MULTIPROC_DIR``
(:data:`PROMETHEUS_MULTIPROC_DIR`), prometheus-client's directory for multi-process metrics; when it is set,
the store server, the LLM proxy and the algorithms' metrics run in multi-process mode.

Other libraries' variables that agl only looks at are read through :func:`read_env` (and set, when agl sets
them, through :func:`export_env`), so that this module stays the one place that touches ``os.environ``:
the ``mlflow`` tracker (``agl.algorithms.trackers``) reads MLflow's ``MLFLOW_TRACKING_URI`` and
``MLFLOW_EXPERIMENT_NAME`` and, for its default file store, sets ``MLFLOW_ALLOW_FILE_STORE`` to true when
absent; the ``wandb`` tracker reads W&B's ``WANDB_DIR``, ``WANDB_MODE`` and ``WANDB_PROJECT``; verl's CPU
support (``agl.algorithms.verl.cpu``) reads verl's ``VERL_PLATFORM``, and its rollout reads
``torch.distributed``'s ``RANK``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar, overload

__all__ = [
    "AGENTOPS_SERVICE",
    "CPU_SERVER_THREADS",
    "CURRENT_ROLE",
    "DEFAULT_STORE_HOST",
    "DEFAULT_STORE_PORT",
    "EMITTER_DEBUG",
    "ENV_VARS",
    "MANAGED_STORE",
    "PROMETHEUS_MULTIPROC_DIR",
    "PROXY_TOKEN",
    "SERVER_HOST",
    "SERVER_PORT",
    "STORE_BACKEND",
    "STORE_TOKEN",
    "EnvResolver",
    "EnvVar",
    "LightningEnvVar",
    "export_env",
    "parse_bool",
    "parse_choice",
    "parse_float",
    "parse_int",
    "parse_str",
    "read_env",
    "resolve_bool_env_var",
    "resolve_int_env_var",
    "resolve_str_env_var",
]

T = TypeVar("T")

DEFAULT_STORE_PORT = 4747
"""Port of a store server when none is given (``agl store``, the client-server strategy, ``agl runner``)."""
DEFAULT_STORE_HOST = "127.0.0.1"
"""Interface a store server binds and clients reach when none is given."""

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class LightningEnvVar(str, Enum):
    """The names of agl's environment variables (each value is the variable's name)."""

    AGL_CURRENT_ROLE = "AGL_CURRENT_ROLE"
    AGL_MANAGED_STORE = "AGL_MANAGED_STORE"
    AGL_SERVER_HOST = "AGL_SERVER_HOST"
    AGL_SERVER_PORT = "AGL_SERVER_PORT"
    AGL_EMITTER_DEBUG = "AGL_EMITTER_DEBUG"
    AGL_STORE_TOKEN = "AGL_STORE_TOKEN"
    AGL_STORE_BACKEND = "AGL_STORE_BACKEND"
    AGL_PROXY_TOKEN = "AGL_PROXY_TOKEN"
    AGL_AGENTOPS_SERVICE = "AGL_AGENTOPS_SERVICE"
    AGL_CPU_SERVER_THREADS = "AGL_CPU_SERVER_THREADS"


# -- the parser -------------------------------------------------------------------------------


def _key(name: str | LightningEnvVar) -> str:
    return name.value if isinstance(name, LightningEnvVar) else name


def read_env(name: str | LightningEnvVar) -> str | None:
    """The stripped value of the variable, or ``None`` when it is unset, empty or blank."""
    value = os.environ.get(_key(name))
    return None if value is None or not value.strip() else value.strip()


def export_env(name: str | LightningEnvVar, value: str | None, *, keep_existing: bool = False) -> None:
    """Set the variable in this process's environment (``None``: remove it), so that the libraries that read
    it later and the processes it starts from now on see it. With ``keep_existing`` a variable that is already
    present, even blank, is left as it is (``os.environ.setdefault``)."""
    key = _key(name)
    if value is None:
        if not keep_existing:
            os.environ.pop(key, None)
    elif keep_existing:
        os.environ.setdefault(key, value)
    else:
        os.environ[key] = value


def parse_str(name: str, value: str) -> str:
    """``value`` as is (already stripped)."""
    return value


def parse_bool(name: str, value: str) -> bool:
    """``1/true/yes/on`` → ``True``, ``0/false/no/off`` → ``False`` (any case); else ``ValueError``."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"{name}={value!r} is not a boolean; use one of 1/true/yes/on or 0/false/no/off")


def parse_int(name: str, value: str) -> int:
    """``value`` as an integer; else ``ValueError`` naming the variable."""
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} must be an integer") from None


def parse_float(name: str, value: str) -> float:
    """``value`` as a number; else ``ValueError`` naming the variable."""
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} must be a number") from None


def parse_choice(choices: Sequence[str]) -> Callable[[str, str], str]:
    """A parser accepting only ``choices`` (compared case-insensitively, answered in their spelling)."""
    by_lower = {c.lower(): c for c in choices}

    def parse(name: str, value: str) -> str:
        try:
            return by_lower[value.lower()]
        except KeyError:
            allowed = ", ".join(repr(c) for c in choices)
            raise ValueError(f"{name}={value!r} is not one of {allowed}") from None

    return parse


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    """One environment variable: its name, what it means, its default and how its text is parsed."""

    name: str
    meaning: str
    default: T
    parse: Callable[[str, str], T]

    def get(self, override: T | None = None) -> T:
        """``override`` if not ``None``, else the parsed variable, else :attr:`default`."""
        if override is not None:
            return override
        value = read_env(self.name)
        return self.default if value is None else self.parse(self.name, value)

    def is_set(self) -> bool:
        """Whether the variable has a non-blank value."""
        return read_env(self.name) is not None

    def export(self, value: str | None) -> None:
        """Set the variable in this process's environment (``None``: remove it), so that the processes it
        starts from now on see it (e.g. ``agl store --workers N`` giving its workers a metrics directory)."""
        export_env(self.name, value)


CURRENT_ROLE: EnvVar[str] = EnvVar(
    "AGL_CURRENT_ROLE",
    "which side this process runs under the client-server strategy: algorithm, runner or both",
    "both",
    parse_str,  # the strategy validates it, so that explicit arguments get the same message
)
MANAGED_STORE: EnvVar[bool] = EnvVar(
    "AGL_MANAGED_STORE",
    "whether the execution strategy serves/wraps the store itself (false: the store is used as given)",
    True,
    parse_bool,
)
SERVER_HOST: EnvVar[str] = EnvVar(
    "AGL_SERVER_HOST", "where the store server listens or is reached", DEFAULT_STORE_HOST, parse_str
)
SERVER_PORT: EnvVar[int] = EnvVar(
    "AGL_SERVER_PORT", "port of the store server", DEFAULT_STORE_PORT, parse_int
)
STORE_TOKEN: EnvVar[str | None] = EnvVar(
    "AGL_STORE_TOKEN", "bearer token of the store server (read by its server and its client)", None, parse_str
)
STORE_BACKEND: EnvVar[str] = EnvVar(
    "AGL_STORE_BACKEND", "backend URL that 'agl store' serves (see agl.store.open_store)", "memory", parse_str
)
PROXY_TOKEN: EnvVar[str | None] = EnvVar(
    "AGL_PROXY_TOKEN", "bearer token required by the LLM proxy on every route but /health", None, parse_str
)
AGENTOPS_SERVICE: EnvVar[bool] = EnvVar(
    "AGL_AGENTOPS_SERVICE", "let AgentOpsTracer use AgentOps' hosted service", False, parse_bool
)
EMITTER_DEBUG: EnvVar[bool] = EnvVar(
    "AGL_EMITTER_DEBUG", "kept for the reference system's enum; nothing reads it", False, parse_bool
)
CPU_SERVER_THREADS: EnvVar[int] = EnvVar(
    "AGL_CPU_SERVER_THREADS",
    "torch threads of each model server of verl's CPU rollout (agl.algorithms.verl.cpu)",
    2,
    parse_int,
)

PROMETHEUS_MULTIPROC_DIR: EnvVar[str | None] = EnvVar(
    "PROMETHEUS_MULTIPROC_DIR",
    "prometheus-client's directory shared by the processes of a multi-process server (not an agl variable)",
    None,
    parse_str,
)

ENV_VARS: tuple[EnvVar[Any], ...] = (
    CURRENT_ROLE,
    MANAGED_STORE,
    SERVER_HOST,
    SERVER_PORT,
    STORE_TOKEN,
    STORE_BACKEND,
    PROXY_TOKEN,
    AGENTOPS_SERVICE,
    EMITTER_DEBUG,
    CPU_SERVER_THREADS,
)
"""Every variable, in the order of the table above."""


# -- the reference system's functions ---------------------------------------------------------


class EnvResolver(Generic[T]):
    """One of the reference's ``resolve_*_env_var`` functions: ``override`` if given, else the variable
    parsed, else ``fallback`` (typed ``T`` when a ``fallback`` is given, else ``T | None``)."""

    def __init__(self, name: str, parse: Callable[[str, str], T], doc: str) -> None:
        self.__name__ = self.__qualname__ = name
        self.__doc__ = doc
        self._parse = parse

    def __repr__(self) -> str:
        return f"<env resolver {self.__name__}>"

    @overload
    def __call__(self, name: str | LightningEnvVar, override: T | None = None, *, fallback: T) -> T: ...
    @overload
    def __call__(
        self, name: str | LightningEnvVar, override: T | None = None, *, fallback: None = None
    ) -> T | None: ...
    def __call__(
        self, name: str | LightningEnvVar, override: T | None = None, *, fallback: T | None = None
    ) -> T | None:
        if override is not None:
            return override
        value = read_env(name)
        return fallback if value is None else self._parse(_key(name), value)


resolve_bool_env_var = EnvResolver(
    "resolve_bool_env_var",
    parse_bool,
    "``override`` if given, else the variable (1/true/yes/on or 0/false/no/off, any case), else ``fallback``.",
)
resolve_int_env_var = EnvResolver(
    "resolve_int_env_var",
    parse_int,
    "``override`` if given, else the variable parsed as an integer, else ``fallback``.",
)
resolve_str_env_var = EnvResolver(
    "resolve_str_env_var", parse_str, "``override`` if given, else the variable, else ``fallback``."
)
