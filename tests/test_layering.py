"""The package layering and each package's declared dependencies, checked against what its code imports.

Layers (each may import only itself and the layers to its left, through its declared chain):
agl-types → agl-store → agl-tracer → agl-proxy → agl-algorithms → agl-runner → agl-compat.

For third-party imports, the distribution that provides a module is found with
``importlib.metadata.packages_distributions`` (namespace packages such as ``opentelemetry`` are resolved
through the distributions' file lists). Every import must be declared by the importing package itself:
a module-level import in a module that ``import agl.<x>`` loads needs a base dependency; an import inside a
function, inside a ``try:`` that handles ``ImportError``, or at module level in an opt-in submodule that the
package only imports lazily, may use an extra. Imports under ``if TYPE_CHECKING:`` never run: they need no
declaration. Every declared dependency must be imported somewhere, except the few loaded by name; for the
agl-* packages themselves that includes imports under ``if TYPE_CHECKING:`` (their types appear in the
importing package's signatures), so a declared agl-* package that no module names at all fails the test.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["agl-types", "agl-store", "agl-tracer", "agl-proxy", "agl-algorithms", "agl-runner", "agl-compat"]
LOADED_BY_NAME = {
    "asyncpg": "SQLAlchemy's postgresql+asyncpg dialect imports it from the database URL",
    "httptools": "uvicorn picks its fast HTTP parser up when installed",
    "tokenizers": "transformers' fast tokenizers, used through transformers",
    "cachetools": "verl 0.9.1 imports it but lists it only in its verl-core extra (the verl extra adds it)",
}
"""Declared dependencies that no module imports by name, and why they are still needed."""
PART_OF = {"pydantic-core": "pydantic", "starlette": "fastapi"}
"""Distributions whose modules are documented public API of another one: declaring the latter suffices."""


@dataclass(frozen=True)
class Import:
    module: str
    lazy: bool
    where: str
    type_only: bool = False
    source: str = ""
    """Dotted name of the importing module."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"cannot read requirement {requirement!r}"
    return canonical(match.group(1))


@dataclass
class Package:
    name: str
    root: Path
    base: set[str]
    extras: dict[str, set[str]]

    @property
    def layer(self) -> int:
        return LAYERS.index(self.name)

    @property
    def sources(self) -> list[Path]:
        return sorted((self.root / "src").rglob("*.py"))


@functools.cache
def packages() -> dict[str, Package]:
    if tomllib is None:
        pytest.skip("reading pyproject.toml needs Python 3.11 (tomllib)")
    found: dict[str, Package] = {}
    for name in LAYERS:
        root = ROOT / "packages" / name
        project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
        extras = {
            extra: {requirement_name(r) for r in reqs}
            for extra, reqs in project.get("optional-dependencies", {}).items()
        }
        base = {requirement_name(r) for r in project.get("dependencies", [])}
        found[name] = Package(name, root, base, extras)
    return found


def workspace_chain(name: str) -> set[str]:
    """The workspace packages ``name`` may import: itself and everything its declared deps pull in."""
    reachable = {name}
    pending = [name]
    while pending:
        for dep in packages()[pending.pop()].base:
            if dep in LAYERS and dep not in reachable:
                reachable.add(dep)
                pending.append(dep)
    return reachable


class _ImportCollector(ast.NodeVisitor):
    """Absolute imports of one module, each marked lazy when it cannot run at import time of the module."""

    def __init__(self, where: str, module: str = "", is_package: bool = False) -> None:
        self.where = where
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.lazy = 0
        self.type_only = 0
        self.found: list[Import] = []

    def _add(self, module: str, node: ast.AST) -> None:
        where = f"{self.where}:{getattr(node, 'lineno', 0)}"
        self.found.append(Import(module, self.lazy > 0, where, self.type_only > 0, self.module))

    def _lazily(self, nodes: list[ast.stmt] | list[ast.AST]) -> None:
        self.lazy += 1
        for child in nodes:
            self.visit(child)
        self.lazy -= 1

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._lazily([*node.decorator_list, *node.body])

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._lazily([*node.decorator_list, *node.body])

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._lazily([node.body])

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        is_type_checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        if is_type_checking:
            self.type_only += 1
            self._lazily(list(node.body))
            self.type_only -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Try(self, node: ast.Try) -> None:
        guarded = any(_catches_import_error(h.type) for h in node.handlers)
        if guarded:
            self._lazily(list(node.body))
        else:
            for child in node.body:
                self.visit(child)
        for child in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0:
            base = node.module or ""
        else:  # relative: resolve against this module's package (needed for the intra-package graph)
            parts = self.package.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, node.module] if node.module else parts)
        if base and base != "agl":
            self._add(base, node)
        if base == "agl" or base.startswith("agl."):  # ``from .pkg import sub`` may import a submodule
            for alias in node.names:
                self._add(f"{base}.{alias.name}", node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
            value = node.args[0].value
            if isinstance(value, str) and not value.startswith("."):
                self.lazy += 1
                self._add(value, node)
                self.lazy -= 1
        self.generic_visit(node)


def _catches_import_error(handler_type: ast.expr | None) -> bool:
    if handler_type is None:
        return True
    names = handler_type.elts if isinstance(handler_type, ast.Tuple) else [handler_type]
    return any(
        isinstance(n, (ast.Name, ast.Attribute))
        and (n.id if isinstance(n, ast.Name) else n.attr)
        in ("ImportError", "ModuleNotFoundError", "Exception")
        for n in names
    )


def module_name(package: Package, path: Path) -> str:
    parts = list(path.relative_to(package.root / "src").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _imports(name: str) -> tuple[Import, ...]:
    package = packages()[name]
    found: list[Import] = []
    for path in package.sources:
        module = module_name(package, path)
        collector = _ImportCollector(str(path.relative_to(ROOT)), module, path.name == "__init__.py")
        collector.visit(ast.parse(path.read_text(), filename=str(path)))
        found.extend(collector.found)
    return tuple(found)


def imports_of(package: Package) -> list[Import]:
    return list(_imports(package.name))


@functools.cache
def loaded_on_import(name: str) -> frozenset[str]:
    """The package's own modules that ``import agl.<x>`` runs: reachable through module-level imports."""
    package = packages()[name]
    known = {module_name(package, p) for p in package.sources}
    edges: dict[str, set[str]] = {}
    for imp in imports_of(package):
        if imp.lazy or not imp.module.startswith("agl."):
            continue
        parts = imp.module.split(".")
        targets = {".".join(parts[:i]) for i in range(2, len(parts) + 1)}  # parents run first
        edges.setdefault(imp.source, set()).update(t for t in targets if t in known)
    root = "agl." + name.removeprefix("agl-")
    seen = {root}
    pending = [root]
    while pending:
        for target in edges.get(pending.pop(), ()):
            parts = target.split(".")
            for i in range(2, len(parts) + 1):
                parent = ".".join(parts[:i])
                if parent in known and parent not in seen:
                    seen.add(parent)
                    pending.append(parent)
    return frozenset(seen)


@functools.cache
def _top_level_distributions() -> dict[str, list[str]]:
    return {
        top: [canonical(d) for d in dists]
        for top, dists in importlib.metadata.packages_distributions().items()
    }


@functools.cache
def _files_of(dist: str) -> tuple[str, ...]:
    files = importlib.metadata.distribution(dist).files or []
    return tuple(str(f).replace("\\", "/") for f in files)


@functools.cache
def distributions_of(module: str) -> frozenset[str]:
    """Distributions that provide ``module`` (more than one only when it cannot be told apart)."""
    parts = module.split(".")
    candidates = _top_level_distributions().get(parts[0], [])
    if len(set(candidates)) <= 1:
        return frozenset(candidates)
    for depth in range(len(parts), 0, -1):  # namespace package: the deepest path one distribution owns
        prefix = "/".join(parts[:depth])
        owners = {
            d
            for d in set(candidates)
            if any(f.startswith(prefix + "/") or f.startswith(prefix + ".") for f in _files_of(d))
        }
        if owners:
            return frozenset(owners)
    return frozenset(candidates)


def is_stdlib(module: str) -> bool:
    top = module.split(".")[0]
    return top == "__future__" or top in sys.stdlib_module_names


def third_party(imports: list[Import]) -> list[Import]:
    return [i for i in imports if i.module and not is_stdlib(i.module) and i.module.split(".")[0] != "agl"]


def declared_as(dists: frozenset[str], names: set[str]) -> set[str]:
    """The declared names among ``dists`` (or the distribution they are part of)."""
    return {PART_OF.get(d, d) for d in dists} & names


@pytest.mark.parametrize("name", LAYERS)
def test_no_import_from_a_higher_layer(name: str) -> None:
    package = packages()[name]
    allowed = workspace_chain(name)
    problems = []
    for imp in imports_of(package):
        parts = imp.module.split(".")
        if parts[0] != "agl":
            continue
        if len(parts) < 2:
            problems.append(f"{imp.where}: import of the bare 'agl' namespace")
            continue
        target = f"agl-{parts[1]}"
        if target not in LAYERS:
            problems.append(f"{imp.where}: {imp.module} is not an agl package")
        elif LAYERS.index(target) > package.layer:
            problems.append(f"{imp.where}: {imp.module} is in a higher layer ({target})")
        elif target not in allowed:
            problems.append(f"{imp.where}: {imp.module} needs {target} among the declared dependencies")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", LAYERS)
def test_no_import_of_another_packages_private_module(name: str) -> None:
    """What one package uses of another is public: a private module (``_x``) is its own package's business."""
    package = packages()[name]
    own = "agl." + name.split("-", 1)[1]
    problems = [
        f"{imp.where}: {imp.module}"
        for imp in imports_of(package)
        if imp.module.startswith("agl.")
        and not (imp.module == own or imp.module.startswith(own + "."))
        and any(part.startswith("_") for part in imp.module.split(".")[2:])
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", LAYERS)
def test_every_import_is_declared(name: str) -> None:
    package = packages()[name]
    extras_of = {dep: extra for extra, deps in package.extras.items() for dep in deps}
    core = loaded_on_import(name)
    problems = []
    for imp in third_party(imports_of(package)):
        if imp.type_only:
            continue
        dists = distributions_of(imp.module)
        if not dists:
            problems.append(
                f"{imp.where}: {imp.module!r} is not installed: declare the distribution that provides it "
                "(as an extra if it is optional)"
            )
        elif declared_as(dists, package.base):
            continue
        elif extra_dists := declared_as(dists, set(extras_of)):
            if not imp.lazy and imp.source in core:
                extra = extras_of[next(iter(extra_dists))]
                problems.append(
                    f"{imp.where}: {imp.module} comes from extra [{extra}] but `import agl.{name[4:]}` runs this "
                    "line: import it inside a function, in a try/except ImportError, or in an opt-in submodule"
                )
        else:
            problems.append(
                f"{imp.where}: {imp.module} needs one of {sorted(dists)} in {name}'s dependencies"
            )
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", LAYERS)
def test_every_declared_dependency_is_imported(name: str) -> None:
    package = packages()[name]
    provided: set[str] = set()
    for imp in third_party(imports_of(package)):
        provided |= {PART_OF.get(d, d) for d in distributions_of(imp.module)}
    declared = {d for d in package.base if d not in LAYERS}
    for deps in package.extras.values():
        declared |= deps
    unused = sorted(declared - provided - set(LOADED_BY_NAME))
    assert not unused, f"{name} declares {unused} but no module under {package.root / 'src'} imports them"


def unused_workspace_dependencies(package: Package, imports: list[Import]) -> list[str]:
    """The agl-* packages ``package`` declares that none of ``imports`` names (type-only imports count)."""
    named = {
        f"agl-{i.module.split('.')[1]}" for i in imports if i.module.startswith("agl.") and "." in i.module
    }
    declared = {d for d in package.base if d in LAYERS}
    for deps in package.extras.values():
        declared |= deps & set(LAYERS)
    return sorted(declared - named - {package.name})


@pytest.mark.parametrize("name", LAYERS)
def test_every_declared_agl_dependency_is_imported(name: str) -> None:
    package = packages()[name]
    unused = unused_workspace_dependencies(package, imports_of(package))
    assert not unused, (
        f"{name} declares {unused} but no module under {package.root / 'src'} imports them: drop the "
        "declaration (packages that need them declare them themselves)"
    )


def test_the_unused_workspace_dependency_check_fails_on_a_declared_but_unused_package() -> None:
    proxy = Package(
        "agl-proxy", ROOT / "packages" / "agl-proxy", {"agl-types", "agl-store", "agl-tracer"}, {}
    )
    collector = _ImportCollector("x.py", "agl.proxy.x")
    collector.visit(
        ast.parse(
            "from typing import TYPE_CHECKING\nfrom agl.types import Span\nif TYPE_CHECKING:\n"
            "    from agl.store import LightningStore\n"
        )
    )
    assert unused_workspace_dependencies(proxy, collector.found) == ["agl-tracer"]


def test_the_checker_sees_lazy_and_eager_imports() -> None:
    source = (
        "import os\nfrom typing import TYPE_CHECKING\nimport pydantic\n"
        "if TYPE_CHECKING:\n    import torch\n"
        "try:\n    import poml\nexcept ImportError:\n    poml = None\n"
        "def f():\n    import litellm\n    importlib.import_module('jinja2')\n"
    )
    collector = _ImportCollector("x.py", "agl.x.mod")
    collector.visit(ast.parse(source + "from .sib import thing\nfrom .. import other\n"))
    seen = {i.module: i.lazy for i in collector.found}
    assert seen == {
        "os": False,
        "typing": False,
        "pydantic": False,
        "torch": True,
        "poml": True,
        "litellm": True,
        "jinja2": True,
        "agl.x.sib": False,
        "agl.x.sib.thing": False,
        "agl.other": False,
    }
    assert [i.module for i in collector.found if i.type_only] == ["torch"]
    assert distributions_of("opentelemetry.sdk.trace") == {"opentelemetry-sdk"}
    assert distributions_of("typing_extensions") == {"typing-extensions"}
