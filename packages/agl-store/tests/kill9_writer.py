"""A writer process of the ``kill -9`` durability test (``test_sql_durability.py``), run as a script.

``python kill9_writer.py ADDRESS INDEX STOP_FILE``: until ``STOP_FILE`` exists, enqueue a rollout (input
``{"writer": INDEX, "i": i}``), claim one, finish it; each call through a store client that retries (with
the same idempotency key) long enough to outlast the server being killed and restarted. It prints a line
once each call is acknowledged (``E index i rollout_id``, ``C rollout_id attempt_id`` or ``C -``,
``F rollout_id``) and ``done`` at the end.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agl.store import LightningStoreClient


async def main(address: str, index: int, stop: Path) -> None:
    client = LightningStoreClient(address, retry_delays=(0.2,) * 600, health_retry_delays=())
    try:
        i = 0
        while not await asyncio.to_thread(stop.exists):
            rollout = await client.enqueue_rollout({"writer": index, "i": i})
            print("E", index, i, rollout.rollout_id, flush=True)
            claimed = await client.dequeue_rollout(worker_id=f"writer-{index}")
            if claimed is None:
                print("C -", flush=True)
            else:
                print("C", claimed.rollout_id, claimed.attempt.attempt_id, flush=True)
                await client.update_attempt(
                    claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded"
                )
                print("F", claimed.rollout_id, flush=True)
            i += 1
    finally:
        await client.close()
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])))
