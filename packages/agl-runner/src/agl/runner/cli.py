"""``agl runner``: run runners for an agent against a store server, until Ctrl+C or SIGTERM."""

from __future__ import annotations

import argparse
import sys
from typing import Any
from urllib.parse import urlsplit

from agl.store.cli import add_log_level, add_token_options, configure_logging, read_token
from agl.types.env import SERVER_HOST, SERVER_PORT

__all__ = ["runner_command"]


def _parser() -> argparse.ArgumentParser:
    default_store = f"http://{SERVER_HOST.get()}:{SERVER_PORT.get()}"
    parser = argparse.ArgumentParser(
        prog="agl runner",
        description="Execute an agent on the rollouts of a store (e.g. one served by 'agl store').",
    )
    parser.add_argument(
        "agent", help="import path of the agent: 'package.module:agent' (a @rollout function or LitAgent)"
    )
    parser.add_argument("--store", default=default_store, help=f"store server URL (default: {default_store})")
    add_token_options(parser, "bearer token of the store", "AGL_STORE_TOKEN")
    parser.add_argument(
        "--n-runners",
        type=int,
        default=1,
        help="runner processes (default: 1); one that dies is replaced (see --max-restarts)",
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=3,
        help="replacements in a row for a runner process that keeps dying (default: 3; 0: never replace)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=1, help="rollouts each runner executes at once (default: 1)"
    )
    parser.add_argument(
        "--max-rollouts", type=int, default=None, help="per runner, stop after this many rollouts"
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        default=10.0,
        help="seconds between heartbeats; each also learns which attempts the store has ended, whose agents "
        "are then cancelled (default: 10; 0: none)",
    )
    parser.add_argument(
        "--tracer", default="otel", help="tracer: 'otel', 'agentops' or an import path (default: otel)"
    )
    add_log_level(parser)
    return parser


def runner_command(argv: list[str]) -> int:
    """``agl runner``: run an agent's runners against a store, taking rollouts until stopped."""
    args = _parser().parse_args(argv)
    configure_logging(args)
    from .build import build_component, load_object
    from .litagent import LitAgent
    from .runner import LitAgentRunner
    from .strategies import ClientServerExecutionStrategy
    from .trainer import TRACER_REGISTRY, Trainer

    store_url: str = args.store
    url = urlsplit(store_url)
    if url.scheme != "http" or not url.hostname or url.port is None:
        print(f"agl runner: --store must look like http://host:port, got {store_url!r}", file=sys.stderr)
        return 2
    try:
        token = read_token(args)
        agent_type: type[LitAgent[Any]] = LitAgent  # any task type: the store's tasks are not checked here
        agent = build_component(load_object(args.agent), agent_type, spec_name="agent")
        from agl.tracer import Tracer

        tracer = build_component(args.tracer, Tracer, spec_name="tracer", registry=TRACER_REGISTRY)
        runner = LitAgentRunner[Any](
            tracer,
            max_rollouts=args.max_rollouts,
            concurrency=args.concurrency,
            heartbeat_interval=args.heartbeat_interval,
        )
        strategy = ClientServerExecutionStrategy(
            role="runner",
            server_host=url.hostname,
            server_port=url.port,
            n_runners=args.n_runners,
            managed_store=True,
            token=token,
            max_restarts=args.max_restarts,
            in_process_runner=False,  # supervised: a runner process that dies is replaced
        )
    except (ValueError, TypeError) as exc:
        print(f"agl runner: {exc}", file=sys.stderr)
        return 2
    assert agent is not None
    Trainer(strategy=strategy, runner=runner, tracer=tracer, store="memory", progress=False).fit(agent)
    return 0
