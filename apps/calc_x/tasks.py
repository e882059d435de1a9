"""The synthetic arithmetic task set, the calculator tool and the reward, shared by the app and
the embedded model's build script (so the warm start sees exactly the questions the app asks)."""

from __future__ import annotations

import ast
import math
import operator
import random
import re
from typing import Any

OPERATORS = ("+", "-", "*")

#: The calculator tool in OpenAI function-calling format. The embedded model was warm-started with
#: this exact definition rendered into its prompt, so keep it byte-for-byte stable.
CALCULATOR_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


def make_task(rng: random.Random) -> dict[str, Any]:
    """One task: a question with one operator and two integers 1-99, and its exact result."""
    a, b = rng.randint(1, 99), rng.randint(1, 99)
    op = rng.choice(OPERATORS)
    expression = f"{a} {op} {b}"
    return {"question": f"What is {expression}?", "expression": expression, "result": evaluate(expression)}


def make_tasks(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [make_task(rng) for _ in range(n)]


def split_tasks(
    seed: int, n_train: int = 2000, n_val: int = 256
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A fixed train/validation split with no question in both."""
    rng = random.Random(seed)
    seen: set[str] = set()
    tasks: list[dict[str, Any]] = []
    while len(tasks) < n_train + n_val:
        task = make_task(rng)
        if task["question"] not in seen:
            seen.add(task["question"])
            tasks.append(task)
    return tasks[:n_train], tasks[n_train:]


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def evaluate(expression: str) -> float | int:
    """Evaluate `+ - * /` arithmetic safely (no names, no calls); raise ValueError on anything else."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc

    def walk(node: ast.AST) -> float | int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool)
        ):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ValueError("division by zero")
            return _BINOPS[type(node.op)](left, right)
        raise ValueError(f"unsupported element in expression: {expression!r}")

    return walk(tree)


def format_number(value: float | int) -> str:
    """How the calculator prints a result: integers without a decimal point."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value) if isinstance(value, int) else f"{value:.6g}"


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def extract_answer(text: str) -> float | None:
    """The last number in the agent's final answer, or None."""
    found = _NUMBER.findall(text.replace(",", ""))
    return float(found[-1]) if found else None


def reward(answer_text: str, result: float | int | str) -> float:
    """1.0 when the last number of the answer equals the result (relative tolerance 1e-6), else 0.0."""
    answer = extract_answer(answer_text)
    if answer is None:
        return 0.0
    return 1.0 if math.isclose(answer, float(result), rel_tol=1e-6, abs_tol=1e-9) else 0.0
