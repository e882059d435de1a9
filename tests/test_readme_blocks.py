"""Every Python block of every README runs, as written, in a fresh interpreter.

Each ```` ```python ```` block of the Markdown pages (the READMEs at the root, in ``apps/``, ``packages/*``,
``benchmarks/*``, and ``docs/``) is one test: the block is written to a file in an empty directory and run with the workspace's
interpreter, without ``PYTHONPATH`` (so a block cannot lean on ``apps`` or ``tests``: what it imports, a
user who installed the packages has). Blocks that talk to an LLM get a local stand-in of the models they
name (:func:`_readme_models`): ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` point at it, and the documented local
endpoint ``http://127.0.0.1:8000/v1`` in a block is replaced by its address.

A block that cannot run here says so with a marker on the line right above it::

    <!-- no-run: why (e.g. needs a GPU and a Hugging Face model) -->

It is still compiled. A block with neither a passing run nor a marker fails. Some blocks also print what
their README says they print (:data:`EXPECTED`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agl.testing.openai_standin import StandinBackend, serve_standin

ROOT = Path(__file__).resolve().parents[1]
READMES = ("*.md", "apps/**/*.md", "packages/**/*.md", "benchmarks/**/*.md", "docs/**/*.md")  # every page
LOCAL_ENDPOINT = "http://127.0.0.1:8000/v1"
NO_RUN = re.compile(r"^<!--\s*no-run:\s*(?P<reason>.*?)\s*-->$")
BLOCK = re.compile(r"^```python\n(?P<code>.*?)^```$", re.S | re.M)
LEAKS = ("ResourceWarning", "Unclosed", "unclosed", "was never awaited", "Task was destroyed")

EXPECTED: dict[tuple[str, str], tuple[str, ...]] = {
    # (README, a string of the block) -> what its output holds
    ("README.md", "Baseline()"): ("8 rollouts", "succeeded=8", "mean reward 1.0000"),
    ("packages/agl-runner/README.md", "Baseline()"): ("2 rollouts", "succeeded=2", "mean reward 0.5000"),
    ("packages/agl-runner/README.md", "runner.step("): ("succeeded 1.0",),
    ("packages/agl-algorithms/README.md", "pick_prompt"): ("best prompt: Hi {name}!",),
    ("packages/agl-algorithms/README.md", "APO("): (
        "best prompt: You are good at arithmetic.",
        "number only",
    ),
    ("packages/agl-types/README.md", "Triplet("): ("3 True False\n", '"reward":1.0'),
    ("packages/agl-proxy/README.md", "LLMProxy("): ("It is 4. 1 agentlightning.llm_call",),
}


@dataclass(frozen=True)
class Block:
    readme: str  # relative to the repository root
    line: int  # of the opening fence
    code: str
    no_run: str | None  # the marker's reason

    @property
    def id(self) -> str:
        return f"{self.readme}:{self.line}"


def readme_blocks() -> list[Block]:
    """Every Python block of every README, with its no-run reason if it has one."""
    blocks: list[Block] = []
    paths = sorted(
        {p for pattern in READMES for p in ROOT.glob(pattern) if not {".venv", "node_modules"} & set(p.parts)}
    )
    for path in paths:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
            marker = NO_RUN.match(before)
            blocks.append(
                Block(
                    readme=path.relative_to(ROOT).as_posix(),
                    line=text.count("\n", 0, match.start()) + 1,
                    code=match.group("code"),
                    no_run=marker.group("reason") if marker else None,
                )
            )
    return blocks


BLOCKS = readme_blocks()


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _readme_models(body: dict[str, Any]) -> str | None:
    """The models the READMEs name, played offline.

    - APO's critic (``gpt-5-mini``) sees that the answers are sentences and asks for the bare number; its
      editor (``gpt-4.1-mini``) adds that instruction to the template it is shown in a fence.
    - An agent asked "What is A + B?" answers "It is A+B." unless its system prompt asks for the number
      only; then it answers the number.
    """
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    text = "\n".join(_text(m.get("content")) for m in messages)
    if body.get("model") == "gpt-5-mini":
        return '- Critique: the answers wrap the number in a sentence ("It is 19."); ask for the number only.'
    if body.get("model") == "gpt-4.1-mini":
        fence = re.search(r"```[\w-]*\n(.*?)\n```", text, re.S)
        return f"{fence.group(1) if fence else ''}\nAnswer with the number only, no words."
    question = re.search(r"What is (\d+) \+ (\d+)\?", text)
    if question is None:
        return None
    total = int(question.group(1)) + int(question.group(2))
    system = " ".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
    return str(total) if re.search(r"number only", system, re.I) else f"It is {total}."


def _run(block: Block, tmp_path: Path) -> str:
    with serve_standin(StandinBackend(script=_readme_models)) as server:
        script = tmp_path / "readme_block.py"
        script.write_text(block.code.replace(LOCAL_ENDPOINT, server.base_url))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGL_", "PYTHONPATH"))}
        env.update(
            OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="readme-test", LITELLM_LOCAL_MODEL_COST_MAP="True"
        )
        done = subprocess.run(
            [sys.executable, "-W", "default", str(script)],  # -W default: leaked resources show
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
            env=env,
            check=False,
        )
    assert done.returncode == 0, f"{block.id} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    leaks = [line for line in done.stderr.splitlines() if any(word in line for word in LEAKS)]
    assert not leaks, f"{block.id} leaked:\n" + "\n".join(leaks)
    return done.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.no_run is None], ids=lambda b: b.id)
def test_readme_block_runs(block: Block, tmp_path: Path) -> None:
    out = _run(block, tmp_path)
    for (readme, key), wanted in EXPECTED.items():
        if readme == block.readme and key in block.code:
            for piece in wanted:
                assert piece in out, f"{block.id} printed {out!r}, without {piece!r}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.no_run is not None], ids=lambda b: b.id)
def test_a_block_that_cannot_run_says_why_and_compiles(block: Block) -> None:
    assert block.no_run and len(block.no_run) > 10, f"{block.id}: say why it cannot run"
    import ast

    ast.parse(block.code, filename=block.id)  # a fragment may await at top level: it is parsed, not compiled


def test_the_blocks_are_found_and_every_expectation_matches_a_block() -> None:
    assert len(BLOCKS) >= 15 and {b.readme for b in BLOCKS} >= {
        "README.md",
        "packages/agl-algorithms/README.md",
    }
    runnable = [b for b in BLOCKS if b.no_run is None]
    for readme, key in EXPECTED:
        assert any(b.readme == readme and key in b.code for b in runnable), (
            f"no runnable block of {readme} has {key!r}"
        )


def test_examples_import_only_the_packages() -> None:
    """A PyPI user has the agl packages, not this repository's apps or tests."""
    for block in BLOCKS:
        assert not re.search(r"^\s*(from|import) (apps|tests)\b", block.code, re.M), block.id
