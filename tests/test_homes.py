"""One home per shared concept: environment variables, errors, import circles, moved names.

- ``os.environ`` is read only in :mod:`agl.types.env` (plus the documented LiteLLM exception);
- every public exception class of ``packages/*/src`` is an :class:`agl.types.AglError` and keeps its other base;
- no import circles among agl modules (``if TYPE_CHECKING:`` imports included), except the reference API's
  mutual references between an agent, its runner and its trainer;
- only ``agl.tracer._context`` touches its ContextVars;
- every name that moved is still importable from its public package, as the same object (the private
  modules it left no longer re-export it).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(
    p for p in ROOT.glob("packages/*/src/agl/**/*.py") if "agl-testing" not in p.parts
)  # agl-testing is the tests' own code (it reads AGL_TEST_* settings), not part of the product

ENV_HOME = "packages/agl-types/src/agl/types/env.py"
ENV_EXCEPTIONS = {
    ("packages/agl-proxy/src/agl/proxy/_router.py", "LITELLM_LOCAL_MODEL_COST_MAP"),
    ("packages/agl-tracer/src/agl/tracer/agentops.py", "AGENTOPS_LOGGING_TO_FILE"),
}
"""(file, variable): other libraries' variables, documented in agl.types.env's docstring."""

ALLOWED_CIRCLES = [
    {"agl.runner.hooks", "agl.runner.litagent", "agl.runner.runner", "agl.runner.trainer"},
]
"""The reference API's mutual references (``LitAgent.runner``/``.trainer``, hooks taking agent and runner)."""


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _module_name(path: Path) -> tuple[str, bool]:
    src = next(p for p in path.parents if p.name == "src")
    parts = list(path.relative_to(src).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _environ_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``os.environ`` / ``os.getenv`` uses, each with the variable name when it is a literal."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "unsetenv"):
            found.append((node.lineno, ""))
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found.extend((node.lineno, "") for a in node.names if a.name in ("environ", "getenv"))
    names: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            value = node.args[0].value
            if isinstance(value, str):
                names[node.lineno] = value
    return [(line, names.get(line, "")) for line, _ in found]


def test_os_environ_is_read_only_in_agl_types_env() -> None:
    problems = []
    for path in SOURCES:
        if _rel(path) == ENV_HOME:
            continue
        for line, name in _environ_reads(ast.parse(path.read_text())):
            if (_rel(path), name) not in ENV_EXCEPTIONS:
                problems.append(
                    f"{_rel(path)}:{line}: reads the environment ({name or '?'}); use agl.types.env"
                )
    assert not problems, "\n".join(problems)
    docstring = inspect.getdoc(importlib.import_module("agl.types.env")) or ""
    for _, name in ENV_EXCEPTIONS:
        assert name in docstring, f"agl.types.env's docstring must document the exception {name}"


def test_the_environment_check_sees_every_way_of_reading() -> None:
    source = (
        "import os\nfrom os import environ\n"
        "a = os.environ.get('X')\nb = os.getenv('Y')\nc = os.environ['Z']\nos.environ.setdefault('W', '1')\n"
    )
    assert sorted(_environ_reads(ast.parse(source))) == [(2, ""), (3, "X"), (4, "Y"), (5, ""), (6, "W")]


def _import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p)[0]: p for p in SOURCES}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if _module_name(path)[1] else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*parts, node.module] if node.module else parts)
                else:
                    base = node.module or ""
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            # an import of a parent package is how Python loads any module: not an edge of a circle
            edges[module] |= {
                t for t in targets if t in modules and t != module and not module.startswith(t + ".")
            }
    return edges


def _circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_import_circles_among_agl_modules() -> None:
    circles = [sorted(c) for c in _circles(_import_graph()) if c not in ALLOWED_CIRCLES]
    assert not circles, f"import circles (TYPE_CHECKING imports included): {circles}"


def test_the_circle_finder_finds_a_type_only_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_only_the_context_module_touches_the_tracer_context_variables() -> None:
    problems = []
    for path in ROOT.glob("packages/agl-tracer/src/agl/tracer/**/*.py"):
        if path.name == "_context.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "_context"
                and node.attr.startswith("_")
            ):
                problems.append(f"{_rel(path)}:{node.lineno}: _context.{node.attr}")
    assert not problems, "use agl.tracer._context's functions instead:\n" + "\n".join(problems)


def _public_exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for path in SOURCES:
        module, _ = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and node.bases:
                try:
                    value = getattr(importlib.import_module(module), node.name, None)
                except ImportError:  # an optional extra is missing: that module's classes are not checked
                    continue
                if isinstance(value, type) and issubclass(value, BaseException):
                    found.append(value)
    return found


def test_every_public_exception_is_an_agl_error() -> None:
    from agl.types import AglError

    classes = _public_exception_classes()
    assert len(classes) >= 14
    outside = [f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, AglError)]
    assert not outside, f"not under AglError: {outside}"
    documented = inspect.getdoc(AglError) or ""
    missing = [c.__name__ for c in classes if c.__name__ not in documented]
    assert not missing, f"draw these in AglError's docstring: {missing}"


def test_exceptions_keep_the_bases_users_catch() -> None:
    from agl.algorithms.apo import LLMCallFailed
    from agl.runner import StrategyError
    from agl.store import OTLPIngestError, StoreConnectionError, StoreNotFoundError

    assert issubclass(StrategyError, RuntimeError)
    assert issubclass(StoreNotFoundError, ValueError) and issubclass(StoreConnectionError, ConnectionError)
    assert OTLPIngestError(415, "no").status == 415
    assert LLMCallFailed("empty").reason == "empty"


MOVED = [
    ("agl.store.errors", "StoreClientError", ["agl.store"]),
    ("agl.store.errors", "StoreNotFoundError", ["agl.store"]),
    ("agl.store.errors", "StoreConnectionError", ["agl.store"]),
    ("agl.store.errors", "StoreServerError", ["agl.store"]),
    ("agl.store.errors", "StoreAuthenticationError", ["agl.store"]),
    ("agl.store.errors", "StoreConflictError", ["agl.store"]),
    ("agl.store.errors", "StoreInvalidRequestError", ["agl.store"]),
    ("agl.store.errors", "OTLPIngestError", ["agl.store", "agl.store.otlp"]),
    ("agl.runner.events", "ExecutionEvent", ["agl.runner"]),
    ("agl.types.env", "LightningEnvVar", ["agl.runner"]),
    ("agl.types.env", "resolve_bool_env_var", ["agl.runner"]),
    ("agl.types.env", "resolve_int_env_var", ["agl.runner"]),
    ("agl.types.env", "resolve_str_env_var", ["agl.runner"]),
    ("agl.tracer.base", "get_active_tracer", ["agl.tracer"]),
    ("agl.tracer.base", "set_active_tracer", ["agl.tracer"]),
    ("agl.tracer.base", "clear_active_tracer", ["agl.tracer"]),
    ("agl.algorithms.utils", "running_proxy", ["agl.algorithms"]),
    ("agl.store._open", "open_store", ["agl.store"]),
]


@pytest.mark.parametrize(("home", "name", "old"), MOVED, ids=[f"{h}.{n}" for h, n, _ in MOVED])
def test_moved_names_are_importable_from_their_old_places(home: str, name: str, old: list[str]) -> None:
    value = getattr(importlib.import_module(home), name)
    for module in old:
        assert getattr(importlib.import_module(module), name) is value, f"{module}.{name}"


def test_the_store_port_is_written_once() -> None:
    from agl.runner.strategies.client_server import DEFAULT_PORT as CS_PORT
    from agl.store.server import DEFAULT_PORT as SERVER_PORT
    from agl.types.env import DEFAULT_STORE_PORT

    assert CS_PORT == SERVER_PORT == DEFAULT_STORE_PORT == 4747
    literal = [
        f"{_rel(p)}:{n.lineno}"
        for p in SOURCES
        if _rel(p) != ENV_HOME
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.Constant) and n.value == 4747 and not isinstance(n.value, bool)
    ]
    assert not literal, f"use agl.types.env.DEFAULT_STORE_PORT: {literal}"
