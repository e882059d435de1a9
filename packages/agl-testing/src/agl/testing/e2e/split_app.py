"""A training script for split deployments: the same file runs as the algorithm or as the runners.

agl store --backend sqlite:///run.db --port 4800
AGL_CURRENT_ROLE=algorithm AGL_MANAGED_STORE=0 AGL_SERVER_PORT=4800 python split_app.py 40
AGL_CURRENT_ROLE=runner    AGL_MANAGED_STORE=0 AGL_SERVER_PORT=4800 python split_app.py 40
"""

from __future__ import annotations

import logging
import sys

from agl.algorithms import Baseline
from agl.runner import Trainer
from agl.testing.e2e.agents import reward_agent
from agl.types import LLM


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(name)s: %(message)s")
    n_tasks = int(sys.argv[1])
    trainer = Trainer(
        algorithm=Baseline(),
        n_runners=2,
        initial_resources={"main_llm": LLM(endpoint="http://127.0.0.1:9/v1", model="stand-in")},
        progress=False,
    )
    trainer.fit(reward_agent, [{"x": i} for i in range(n_tasks)])
    print("split_app: done", flush=True)


if __name__ == "__main__":
    main()
