"""Optimise the room-selector agent's prompt with APO, against any OpenAI-compatible endpoint.

    OPENAI_API_KEY=... [OPENAI_BASE_URL=http://127.0.0.1:8000/v1] uv run apps/train_apo.py --rounds 2

The agent (``apps/room_selector``) books meeting rooms with one tool; its prompt template is what APO
improves: runners run it on training tasks, a critic model reads the transcripts and says what the
prompt lacks, an editor model rewrites the prompt, and the candidates are scored on validation tasks.
Prints one table per round, then ``Best prompt found:`` and the prompt; the history of every
candidate (score, parent, the critique that produced it) goes to ``runs/<timestamp>/apo.jsonl``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from agl.algorithms.adapter import TraceToMessages
from agl.algorithms.apo import APO, AllRolloutsFailed, APORoundSummary
from agl.algorithms.metrics import AlgorithmMetrics
from agl.runner import Trainer
from agl.types import PromptTemplate
from room_selector.agent import SEED_PROMPT, make_room_selector
from room_selector.tasks import load_tasks, split_tasks

ROUTINE_LOGGERS = ("httpx", "httpcore", "openai", "uvicorn.access", "aiohttp.access", "LiteLLM")

NO_CREDENTIALS = """\
train_apo.py needs an OpenAI-compatible endpoint for the agent, critic and editor models. Set:

  OPENAI_API_KEY   the API key (any non-empty value for a local server that does not check keys)
  OPENAI_BASE_URL  the server's /v1 URL (optional; the default is OpenAI's https://api.openai.com/v1)

Any OpenAI-compatible server works, e.g. a local vLLM (OPENAI_BASE_URL=http://127.0.0.1:8000/v1)
or Ollama (OPENAI_BASE_URL=http://127.0.0.1:11434/v1); choose its models with --model,
--gradient-model and --edit-model (and --judge-model with --judge).
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="gpt-4.1-nano", help="model the agent uses (default: %(default)s)")
    parser.add_argument("--gradient-model", default="gpt-5-mini", help="critic model (default: %(default)s)")
    parser.add_argument("--edit-model", default="gpt-4.1-mini", help="editor model (default: %(default)s)")
    parser.add_argument(
        "--beam-width", type=int, default=2, help="prompts kept per round (default: %(default)s)"
    )
    parser.add_argument(
        "--branch-factor", type=int, default=2, help="children per parent (default: %(default)s)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="beam-search rounds (default: %(default)s)")
    parser.add_argument(
        "--n-runners", type=int, default=4, help="runners executing the agent (default: %(default)s)"
    )
    parser.add_argument(
        "--gradient-batch-size", type=int, default=4, help="train tasks per critique (default: %(default)s)"
    )
    parser.add_argument(
        "--val-batch-size", type=int, default=10, help="val tasks per beam selection (default: %(default)s)"
    )
    parser.add_argument(
        "--strategy",
        choices=("shm", "cs", "shared_memory", "client_server"),
        default="shm",
        help="runners as threads of this process (shm, shared_memory) or as processes talking to a store server "
        "(cs, client_server); default: %(default)s",
    )
    parser.add_argument(
        "--judge", action="store_true", help="score answers with an LLM judge instead of exact match"
    )
    parser.add_argument(
        "--judge-model", default="gpt-4.1-mini", help="judge model with --judge (default: %(default)s)"
    )
    parser.add_argument(
        "--base-url", default=None, help="OpenAI-compatible /v1 URL (default: $OPENAI_BASE_URL)"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of APO's random choices")
    parser.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="where run histories go (default: %(default)s)"
    )
    parser.add_argument(
        "--logger",
        type=logger_names,
        default="jsonl",
        help="where each round's scores go: any of jsonl,tensorboard,mlflow,wandb, comma-separated, each writing "
        "in the run directory (metrics.jsonl, tensorboard/, an MLflow file store mlruns/, an offline W&B run "
        "wandb/; nothing is sent unless MLFLOW_TRACKING_URI or WANDB_MODE say so) (default: %(default)s)",
    )
    parser.add_argument(
        "--rollout-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for one batch of rollouts (default: %(default)s)",
    )
    return parser.parse_args(argv)


def logger_names(spec: str) -> tuple[str, ...]:
    """``--logger``: the tracker names (see :mod:`agl.algorithms.trackers`)."""
    from agl.algorithms.trackers import parse_loggers

    try:
        return parse_loggers(spec)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


class RoundPrinter:
    """Prints each round's candidates and costs, with the counts the cost formula predicts."""

    def __init__(self, args: argparse.Namespace, n_train: int, n_val: int) -> None:
        self.args = args
        self.n_train = n_train
        self.n_val = n_val
        self.beam_size = 1

    def expected(self, summary: APORoundSummary) -> tuple[int, int, int, int]:
        """Train rollouts, val rollouts and critic/editor requests the cost formula predicts for a round
        without failures, and the val rollouts once the skipped children are left out."""
        if summary.round == 0:
            return 0, self.n_val, 0, self.n_val
        a = self.args
        children = a.beam_width * a.branch_factor
        train = children * min(a.gradient_batch_size, self.n_train)
        val_batch = min(a.val_batch_size, self.n_val)
        val = (self.beam_size + children) * val_batch + self.n_val
        val_made = (self.beam_size + children - summary.children_skipped) * val_batch + self.n_val
        return train, val, 2 * children, val_made

    def __call__(self, summary: APORoundSummary) -> None:
        train, val, llm, val_made = self.expected(summary)
        title = "initial validation" if summary.round == 0 else f"round {summary.round}"
        print(f"\n== {title} ({summary.seconds:.1f}s) ==")
        print(f"{'candidate':<10} {'parent':<8} {'edited':<16} {'val score':>9}  in beam")
        for c in summary.candidates:
            mark = "*" if c["version"] in summary.beam else ""
            print(
                f"{c['version']:<10} {c['parent'] or '-':<8} {c['edited'] or '-':<16} {_cell(c['score']):>9}  {mark}"
            )
        print(
            f"leader {summary.leader} on all {self.n_val} val tasks: {_cell(summary.leader_val_score)}; "
            f"best so far {summary.best_version}: {_cell(summary.best_score)}"
        )
        print(
            f"cost: {summary.train_rollouts} train rollouts (formula {train}), {summary.val_rollouts} val rollouts "
            f"(formula {val}{f', or {val_made} without the skipped children' if val_made != val else ''}), "
            f"{summary.llm_requests} critic/editor requests (formula {llm}), {summary.children_skipped} children skipped"
        )
        self.beam_size = len(summary.beam)
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not os.environ.get("OPENAI_API_KEY"):
        print(NO_CREDENTIALS, file=sys.stderr)
        return 2
    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL") or None

    run_dir = args.runs_dir / time.strftime("%Y%m%d-%H%M%S")
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = args.runs_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{suffix}"
    run_dir.mkdir(parents=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for routine in ROUTINE_LOGGERS:  # one line per HTTP request: kept out of the default output
        logging.getLogger(routine).setLevel(logging.WARNING)
    file_log = logging.FileHandler(run_dir / "apo.log")
    file_log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("agl").addHandler(file_log)

    from openai import AsyncOpenAI

    train, val = split_tasks(load_tasks())
    printer = RoundPrinter(args, len(train), len(val))
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    try:
        metrics = AlgorithmMetrics.for_run("apo", run_dir, args.logger, config=settings)
    except ImportError as exc:  # a tracker's library is missing: the message names the extra
        print(f"--logger: {exc}", file=sys.stderr)
        return 2
    algorithm: APO[Any] = APO(
        AsyncOpenAI(base_url=base_url),
        gradient_model=args.gradient_model,
        apply_edit_model=args.edit_model,
        gradient_batch_size=args.gradient_batch_size,
        val_batch_size=args.val_batch_size,
        beam_width=args.beam_width,
        branch_factor=args.branch_factor,
        beam_rounds=args.rounds,
        rollout_batch_timeout=args.rollout_timeout,
        seed=args.seed,
        history_path=run_dir / "apo.jsonl",
        on_round_end=printer,
        metrics=metrics,
    )
    agent = make_room_selector(
        args.model, base_url=base_url, judge_model=args.judge_model if args.judge else None
    )
    trainer = Trainer(
        algorithm=algorithm,
        n_runners=args.n_runners,
        strategy=args.strategy,
        initial_resources={"prompt_template": PromptTemplate(template=SEED_PROMPT, engine="f-string")},
        adapter=TraceToMessages(),
        progress=False,
    )
    print(
        f"APO on {len(train)} train / {len(val)} val tasks; agent model {args.model} at {base_url or 'api.openai.com'}"
    )
    try:
        trainer.fit(agent, train, val_dataset=val)
    except AllRolloutsFailed as failed:
        print(
            f"\ntrain_apo.py: {failed}\n(agent model {args.model} at {base_url or 'api.openai.com'})",
            file=sys.stderr,
        )
        return 1
    finally:
        metrics.close()

    best = algorithm.get_best_candidate()
    seed_score = (
        algorithm.rounds[0].leader_val_score if algorithm.rounds and algorithm.rounds[0].round == 0 else None
    )
    print(
        f"\nSeed prompt val score: {_cell(seed_score)}; best prompt {best.version} val score: {_cell(best.full_val_score)}"
    )
    print(f"History: {run_dir / 'apo.jsonl'}")
    print("Best prompt found:")
    print(best.prompt_template.template)
    return 0


if __name__ == "__main__":
    sys.exit(main())
