"""Release tooling: each package builds, passes ``twine check``, installs alone and imports (tools/release.py).

``.ci/run`` runs ``tools/release.py check`` over all seven packages on every change, online (installing a wheel
alone resolves its dependencies on the package index); these tests, which never reach the network, build and
check a base package offline, and test the version-bump rule on a scratch repository and the release
workflow's own steps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "release.py"
PUBLISHED = (
    "agl-types",
    "agl-store",
    "agl-tracer",
    "agl-proxy",
    "agl-algorithms",
    "agl-runner",
    "agl-compat",
)
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"

pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="needs the uv command")


def release(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    return subprocess.run(
        [sys.executable, str(TOOL), "--root", str(root), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_a_base_package_builds_and_passes_twine_check_offline(tmp_path: Path) -> None:
    done = release("check", "agl-store", "--offline", "--dist", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agl-store 0.1.0: built, twine check passed; not installed (offline)" in done.stdout
    wheel = next(tmp_path.glob("agl_store-*.whl"))
    static = {Path(n).name for n in zipfile.ZipFile(wheel).namelist() if "/dashboard/static/" in n}
    assert {"index.html", "app.js", "style.css", "rollouts.js", "charts.js"} <= static, static
    assert list(tmp_path.glob("agl_store-*.tar.gz")), "the sdist is kept for publishing too"


def test_the_top_package_builds_with_every_package_below_it_offline(tmp_path: Path) -> None:
    done = release("check", "agl-compat", "--offline", "--dist", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agl-compat 0.1.0: built, twine check passed; not installed (offline)" in done.stdout
    names = set(zipfile.ZipFile(next(tmp_path.glob("agl_compat-*.whl"))).namelist())
    assert {"agl/compat/__init__.py", "agl/compat/_names.py", "agl/compat/py.typed"} <= names
    assert "agl/__init__.py" not in names, "agl is a namespace package (PEP 420)"
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("agl_compat-")] == []


def test_an_unknown_package_is_refused_with_the_choices() -> None:
    done = release("check", "agl-nope")
    assert done.returncode == 2
    assert "unknown package(s) ['agl-nope']" in done.stderr
    assert f"choose from {', '.join(PUBLISHED)}" in done.stderr


def test_every_workspace_package_but_the_tests_own_is_published() -> None:
    members = {p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file()}
    assert members - {"agl-testing"} == set(PUBLISHED)
    assert all((ROOT / "packages" / package / "CHANGELOG.md").is_file() for package in PUBLISHED)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_a_package_changed_since_its_tag_needs_a_version_bump(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for package in PUBLISHED:
        src = ROOT / "packages" / package
        module = package.split("-")[1]
        init = repo / "packages" / package / "src" / "agl" / module / "__init__.py"
        init.parent.mkdir(parents=True)
        shutil.copy2(src / "pyproject.toml", repo / "packages" / package / "pyproject.toml")
        init.write_text('__version__ = "0.1.0"\n')
    _git(repo.parent, "init", "-q", str(repo))
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "release", "--allow-empty")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "release")
    _git(repo, "tag", "agl-store-v0.1.0")
    assert release("versions", root=repo).returncode == 0

    store_init = repo / "packages" / "agl-store" / "src" / "agl" / "store" / "__init__.py"
    store_init.write_text('__version__ = "0.1.0"\nCHANGED = True\n')
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "change agl-store")
    refused = release("versions", root=repo)
    assert refused.returncode == 1
    assert (
        "agl-store: 1 files changed since agl-store-v0.1.0, but the version is still 0.1.0" in refused.stderr
    )

    store_init.write_text('__version__ = "0.1.1"\nCHANGED = True\n')
    assert release("versions", root=repo).returncode == 0


def test_the_release_workflow_builds_the_package_its_tag_names() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow[True]["push"]["tags"] == ["agl-*-v*"]  # YAML 1.1 reads the key `on` as True
    build, publish = workflow["jobs"]["build"], workflow["jobs"]["publish"]
    assert publish["permissions"] == {"id-token": "write"}, "trusted publishing, no stored token"
    assert publish["needs"] == "build"
    runs = [step["run"] for step in build["steps"] if "run" in step]
    assert any("tools/release.py tag-package" in run for run in runs)
    assert any(
        'tools/release.py check "${{ steps.which.outputs.package }}" --dist dist' in run for run in runs
    )

    assert release("tag-package", "agl-store-v0.1.0").stdout.strip() == "agl-store"
    wrong_version = release("tag-package", "agl-store-v9.9.9")
    assert wrong_version.returncode == 1 and "declares 0.1.0" in wrong_version.stderr
    not_a_tag = release("tag-package", "v0.1.0")
    assert not_a_tag.returncode == 1 and "not a release tag" in not_a_tag.stderr
