"""A small system snapshot sent with each runner heartbeat."""

from __future__ import annotations

import datetime
import platform
import socket
import subprocess
from typing import Any

__all__ = ["system_snapshot"]


def system_snapshot(include_gpu: bool = False) -> dict[str, Any]:
    """Host, CPU, memory, disk and network figures (and GPUs when asked); never raises."""
    import psutil

    snapshot: dict[str, Any] = {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "os": platform.platform(terse=True),
    }
    try:
        memory = psutil.virtual_memory()
        disk = psutil.disk_usage("/")
        net = psutil.net_io_counters()
        snapshot.update(
            cpu_cores=psutil.cpu_count(logical=False),
            cpu_threads=psutil.cpu_count(logical=True),
            cpu_usage_pct=psutil.cpu_percent(interval=None),
            mem_used_gb=round(memory.used / 2**30, 3),
            mem_total_gb=round(memory.total / 2**30, 3),
            mem_pct=memory.percent,
            disk_used_gb=round(disk.used / 2**30, 3),
            disk_total_gb=round(disk.total / 2**30, 3),
            disk_pct=disk.percent,
            bytes_sent_mb=round(net.bytes_sent / 2**20, 3) if net else None,
            bytes_recv_mb=round(net.bytes_recv / 2**20, 3) if net else None,
        )
    except (OSError, RuntimeError) as exc:  # containers sometimes hide some of these
        snapshot["error"] = str(exc)
    if include_gpu:
        snapshot["gpus"] = _gpus()
    return snapshot


def _gpus() -> list[dict[str, Any]]:
    query = "name,utilization.gpu,memory.used,memory.total,temperature.gpu"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus: list[dict[str, Any]] = []
    for line in out.strip().splitlines():
        name, util, used, total, temp = (part.strip() for part in line.split(","))
        gpus.append(
            {
                "name": name,
                "util_pct": float(util),
                "mem_used_mb": float(used),
                "mem_total_mb": float(total),
                "temp_c": float(temp),
            }
        )
    return gpus
