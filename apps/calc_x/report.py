"""What the user sees at the end of a run: the summary table and the reward curve."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_curve(
    history: list[dict[str, Any]],
    validations: list[dict[str, Any]],
    path: Path,
    title: str,
    val_temperature: float = 1.0,
) -> Path:
    """Training reward / tool use per step and validation accuracy, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    steps = [h["step"] for h in history]
    ax.plot(steps, [h["reward"] for h in history], label="train reward (T=1)", color="tab:blue")
    ax.plot(steps, [h["tool_use"] for h in history], label="train tool use", color="tab:orange", alpha=0.6)
    if validations:
        ax.plot(
            [v["step"] for v in validations],
            [v["accuracy"] for v in validations],
            "o-",
            label="validation accuracy (greedy)"
            if val_temperature == 0
            else f"validation accuracy (T={val_temperature:g})",
            color="tab:green",
        )
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def summary(
    history: list[dict[str, Any]], validations: list[dict[str, Any]], minutes: float, out_dir: Path
) -> str:
    """The closing table; its last line is ``validation accuracy: A% -> B%``."""
    before, after = validations[0], validations[-1]
    n = max(len(history), 1)
    rollout = sum(h["rollout_s"] for h in history) / n
    update = sum(h["update_s"] for h in history) / n
    tokens = sum(h["generated_tokens"] for h in history)
    rollout_total = sum(h["rollout_s"] for h in history) or 1e-9
    rows = [
        ("", "before", "after"),
        ("validation accuracy", f"{before['accuracy']:.1%}", f"{after['accuracy']:.1%}"),
        ("validation tool use", f"{before['tool_use']:.1%}", f"{after['tool_use']:.1%}"),
        (
            "train reward (first/last step)",
            f"{history[0]['reward']:.3f}" if history else "-",
            f"{history[-1]['reward']:.3f}" if history else "-",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{a:<{width}}  {b:>8}  {c:>8}" for a, b, c in rows]
    lines += [
        f"steps: {len(history)}   wall time: {minutes:.1f} min   "
        f"s/step: {rollout + update:.2f} (rollout {rollout:.2f} + update {update:.2f})",
        f"generation: {tokens} tokens, {tokens / rollout_total:.0f} tokens/s during rollouts"
        + (
            f"; the model was busy {sum(h['generation_s'] for h in history) / n:.2f} s of each rollout phase"
            if history and "generation_s" in history[0]
            else ""
        ),
        f"outputs: {out_dir} (store.sqlite, reward_curve.png, metrics.jsonl, checkpoint/)",
        f"validation accuracy: {before['accuracy']:.1%} -> {after['accuracy']:.1%}",
    ]
    return "\n".join(lines)
