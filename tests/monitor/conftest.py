"""Helpers for the monitoring tests: free ports, polling, the 24-hour trace with known answers."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(probe: Callable[[], T | None], timeout_s: float = 60.0, what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy; fail after ``timeout_s`` (no fixed sleeps)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def _busy(mib: int, pid: int, workload: str, sm: float) -> dict[str, Any]:
    return {
        "util": 90,
        "sm_active": sm,
        "tensor_active": sm / 2,
        "memory_used_mib": mib,
        "power_w": 500,
        "temperature_c": 60,
        "processes": [
            {
                "pid": pid,
                "memory_mib": mib - 500,
                "user": "u",
                "command": "python x.py",
                "workload": workload,
            }
        ],
    }


def day_trace() -> dict[str, Any]:
    """24 one-hour frames on 2 × H100 with known answers at $3/GPU-h:

    GPU 0: 8 h training (SM-active 0.6, 60,000 MiB), 4 h a notebook holds memory idle, 12 h empty.
        → allocated 24, active 8, idle 16 h; cost $72, wasted $48.
    GPU 1: 24 h a small job at SM-active 0.10 (active) peaking at 10,000 MiB.
        → allocated 24, active 24, idle 0; cost $72, wasted $0; downsize + MIG advice.
    """
    idle_nb = {
        "util": 0,
        "sm_active": 0.0,
        "memory_used_mib": 20000,
        "power_w": 80,
        "temperature_c": 35,
        "processes": [
            {
                "pid": 7,
                "memory_mib": 19500,
                "user": "nb",
                "command": "jupyter",
                "workload": "nb/jupyter",
            }
        ],
    }
    empty = {"util": 0, "sm_active": 0.0, "memory_used_mib": 0, "power_w": 70, "temperature_c": 30}
    small = _busy(10000, 9, "small/job", 0.10)
    return {
        "name": "day",
        "interval_s": 3600,
        "host": "testhost",
        "gpus": [
            {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-day-0", "memory_total_mib": 81559},
            {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-day-1", "memory_total_mib": 81559},
        ],
        "frames": [
            {"repeat": 8, "gpus": [_busy(60000, 5, "train/llm", 0.6), small]},
            {"repeat": 4, "gpus": [idle_nb, small]},
            {"repeat": 12, "gpus": [empty, small]},
        ],
    }


@pytest.fixture(name="wait_for")
def wait_for_fixture() -> Callable[..., Any]:
    return wait_for


@pytest.fixture(name="free_port")
def free_port_fixture() -> Callable[[], int]:
    return free_port


@pytest.fixture
def day_trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "day.json"
    path.write_text(json.dumps(day_trace()))
    return path
