"""Build, check and smoke-test the agl-* packages the way a release does.

    uv run python tools/release.py check                 # every package: build, twine check, install alone, import
    uv run python tools/release.py check agl-store       # one package (what the release workflow runs for a tag)
    uv run python tools/release.py check --offline       # build and twine check only, from uv's cache (the tests)
    uv run python tools/release.py versions              # fail if a package changed since its last release tag
    uv run python tools/release.py tag-package agl-store-v0.1.0   # the package a tag names (checks the version)

A package "installs alone" when its wheel, plus the wheels of the agl-* packages it depends on, installs into a
fresh virtual environment with nothing else of the workspace, and every name in its top module's ``__all__`` can be
read (a name that needs an extra must fail with an ``ImportError`` that names the extra to install).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agl-types", "agl-store", "agl-tracer", "agl-proxy", "agl-algorithms", "agl-runner", "agl-compat")
"""The published packages. agl-testing (the tests' shared code) is a workspace member too, never published."""
TAG = re.compile(r"^(agl-[a-z]+)-v(\d+\.\d+\.\d+(?:[-.+][0-9A-Za-z.]+)?)$")

IMPORT_ALL = """
import importlib, sys
module = importlib.import_module(sys.argv[1])
needs_extra = []
for name in module.__all__:
    try:
        getattr(module, name)
    except ImportError as error:
        if "extra" not in str(error):
            raise SystemExit(f"{sys.argv[1]}.{name}: {error!r} does not say which extra to install")
        needs_extra.append(name)
print(f"{sys.argv[1]}: {len(module.__all__) - len(needs_extra)} names imported, {len(needs_extra)} need an extra")
"""


def _run(*args: str, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    done = subprocess.run(args, cwd=cwd or ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"$ {' '.join(args)}\n{done.stdout}{done.stderr}")
    return done.stdout


def _project(package: str) -> dict[str, object]:
    with (ROOT / "packages" / package / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["project"]


def module_of(package: str) -> str:
    """``agl-store`` -> ``agl.store``."""
    return package.replace("-", ".", 1)


def version_of(package: str) -> str:
    """The version a package's ``__init__.py`` declares (its single source, read by hatchling too)."""
    init = ROOT / "packages" / package / "src" / Path(*module_of(package).split(".")) / "__init__.py"
    match = re.search(r'^__version__ = "([^"]+)"$', init.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f'{init}: no `__version__ = "..."` line')
    return match.group(1)


def workspace_dependencies(package: str) -> list[str]:
    """The agl-* packages ``package`` needs, transitively, in build order."""
    found: list[str] = []

    def visit(name: str) -> None:
        for requirement in _project(name).get("dependencies", []):  # type: ignore[union-attr]
            dep = re.match(r"[A-Za-z0-9_.-]+", str(requirement))
            if dep and dep.group(0) in PACKAGES and dep.group(0) not in found:
                visit(dep.group(0))
                found.append(dep.group(0))

    visit(package)
    return found


def build(package: str, dist: Path) -> Path:
    """Build one package's wheel and sdist into ``dist``, ``twine check`` them, return the wheel."""
    _run("uv", "build", "--package", package, "-o", str(dist), "-q")
    stem = package.replace("-", "_")
    artifacts = sorted(dist.glob(f"{stem}-{version_of(package)}*"))
    if not artifacts:
        raise SystemExit(f"uv build produced nothing for {package} in {dist}")
    _run("uv", "run", "--no-sync", "twine", "check", "--strict", *map(str, artifacts))
    return next(p for p in artifacts if p.suffix == ".whl")


def smoke(package: str, wheels: dict[str, Path], workdir: Path) -> str:
    """Install ``package`` alone (with its agl-* dependencies' wheels) into a fresh venv and import its names."""
    venv = workdir / f"venv-{package}"
    _run("uv", "venv", "-q", "--python", f"{sys.version_info.major}.{sys.version_info.minor}", str(venv))
    python = venv / "bin" / "python"
    needed = [str(wheels[name]) for name in (*workspace_dependencies(package), package)]
    _run("uv", "pip", "install", "-q", "--python", str(python), *needed)
    return _run(str(python), "-c", IMPORT_ALL, module_of(package), cwd=workdir).strip()


def check(packages: list[str], keep: Path | None = None, offline: bool = False) -> None:
    """Build, check and smoke-test ``packages``; with ``keep``, copy their wheel and sdist there (to publish).

    ``offline``: build and ``twine check`` from uv's cache alone, without the smoke test (installing a wheel
    alone resolves its dependencies on the package index; ``.ci/run`` does that for every package)."""
    if offline:
        os.environ["UV_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory(prefix="agl-release-") as tmp:
        workdir = Path(tmp)
        dist = workdir / "dist"
        needed = [
            p for p in PACKAGES if p in packages or any(p in workspace_dependencies(q) for q in packages)
        ]
        wheels = {package: build(package, dist) for package in needed}
        for package in packages:
            smoked = "not installed (offline)" if offline else smoke(package, wheels, workdir)
            print(f"{package} {version_of(package)}: built, twine check passed; {smoked}")
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                for artifact in dist.glob(f"{package.replace('-', '_')}-{version_of(package)}*"):
                    shutil.copy2(artifact, keep / artifact.name)


def last_tag(package: str) -> str | None:
    tags = _run("git", "tag", "--list", f"{package}-v*", "--sort=-v:refname").split()
    return tags[0] if tags else None


def versions() -> None:
    """Fail when a package's files changed since its last release tag but its version was not bumped."""
    problems = []
    for package in PACKAGES:
        tag = last_tag(package)
        if tag is None:
            print(f"{package} {version_of(package)}: never released")
            continue
        released = TAG.match(tag).group(2)  # type: ignore[union-attr]
        changed = _run("git", "diff", "--name-only", tag, "--", f"packages/{package}").split()
        if changed and released == version_of(package):
            problems.append(
                f"{package}: {len(changed)} files changed since {tag}, but the version is still {released}"
            )
        print(f"{package} {version_of(package)}: last release {tag}, {len(changed)} files changed since")
    if problems:
        raise SystemExit("bump the version (and the CHANGELOG) of:\n  " + "\n  ".join(problems))


def tag_package(tag: str) -> None:
    match = TAG.match(tag)
    if match is None or match.group(1) not in PACKAGES:
        raise SystemExit(
            f"{tag!r} is not a release tag: expected agl-<name>-v<version>, <name> one of {PACKAGES}"
        )
    package, version = match.groups()
    if version_of(package) != version:
        raise SystemExit(f"tag {tag} says {version}, but {package} declares {version_of(package)}")
    print(package)


def main() -> None:
    global ROOT
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    check_parser = commands.add_parser("check", help="build, twine check, install alone and import")
    check_parser.add_argument("packages", nargs="*", metavar="PACKAGE", help=f"any of {', '.join(PACKAGES)}")
    check_parser.add_argument("--dist", type=Path, help="keep the checked wheel and sdist in this folder")
    check_parser.add_argument(
        "--offline", action="store_true", help="no network: build and twine check only, from uv's cache"
    )
    commands.add_parser(
        "versions", help="fail if a package changed since its last tag without a version bump"
    )
    tag_parser = commands.add_parser("tag-package", help="print the package a release tag names")
    tag_parser.add_argument("tag")
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the workspace (default: the one holding this file)"
    )
    args = parser.parse_args()
    ROOT = args.root.resolve()
    if args.command == "check":
        unknown = sorted(set(args.packages) - set(PACKAGES))
        if unknown:
            parser.error(f"unknown package(s) {unknown}: choose from {', '.join(PACKAGES)}")
        check(list(args.packages) or list(PACKAGES), args.dist, args.offline)
    elif args.command == "versions":
        versions()
    else:
        tag_package(args.tag)


if __name__ == "__main__":
    main()
