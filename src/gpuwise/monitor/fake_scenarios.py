"""The built-in fake GPU scenarios (``--fake idle|leak|thermal|xid|mig``), as traces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuwise.base.nvml_trace import Trace, parse_trace
from gpuwise.errors import InputError, did_you_mean

# -- built-in scenarios ------------------------------------------------------------------
_H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "power_limit_w": 700}
_A100 = {
    "name": "NVIDIA A100-SXM4-80GB",
    "memory_total_mib": 81920,
    "power_limit_w": 400,
    "unsupported": ["sm_active"],
}  # GPM needs Hopper or newer


def _proc(pid: int, mib: float, user: str, command: str, workload: str) -> dict[str, Any]:
    return {
        "pid": pid,
        "memory_mib": int(mib),
        "user": user,
        "command": command,
        "workload": workload,
    }


def _busy(mib: float, proc: dict[str, Any], **over: Any) -> dict[str, Any]:
    base = {
        "util": 97,
        "mem_util": 45,
        "memory_used_mib": int(mib),
        "power_w": 640,
        "temperature_c": 68,
        "sm_active": 0.62,
        "tensor_active": 0.35,
        "sm_clock_mhz": 1980,
        "pcie_tx_kb_s": 150000,
        "pcie_rx_kb_s": 900000,
        "dram_active": 0.41,
        "sm_occupancy": 0.28,
        "memory_temperature_c": 62,
        "nvlink_tx_kib": 7_500_000,
        "nvlink_rx_kib": 7_400_000,
        "nvlink_errors": {"crc_flit": 0, "replay": 0, "recovery": 0},
        "processes": [{**proc, "sm_util": 93}],
    }
    base.update(over)
    return base


def _idle(mib: float = 0, procs: Sequence[dict[str, Any]] = (), **over: Any) -> dict[str, Any]:
    base = {
        "util": 0,
        "mem_util": 0,
        "memory_used_mib": int(mib),
        "power_w": 72,
        "temperature_c": 31,
        "sm_active": 0.0,
        "tensor_active": 0.0,
        "sm_clock_mhz": 345,
        "throttle": 0x1,
        "processes": list(procs),
    }
    base.update(over)
    return base


def _scenario_idle() -> dict[str, Any]:
    """2 × H100 over 24 h (10-min frames): GPU 0 trains 6 h, then a notebook holds 20 GiB idle for
    18 h; GPU 1 sits empty all day. Known answer: 42 idle GPU-hours of 48."""
    nb = _proc(5151, 20480, "bob", "python -m jupyter lab", "bob/notebook")
    train = _proc(4242, 60000, "alice", "python train.py", "alice/train")
    return {
        "name": "idle",
        "interval_s": 600,
        "host": "fake-idle",
        "gpus": [
            {**_H100, "uuid": "GPU-00000000-idle-0000-0000-000000000000"},
            {**_H100, "uuid": "GPU-00000001-idle-0000-0000-000000000001"},
        ],
        "frames": [
            {"repeat": 36, "gpus": [_busy(61000, train), _idle()]},
            {"repeat": 108, "gpus": [_idle(21000, [nb], util=1), _idle()]},
        ],
    }


def _scenario_leak() -> dict[str, Any]:
    """1 × A100-80GB: a job's memory grows 2 GiB a frame until it dies of OOM, then restarts."""
    frames = []
    for k in range(40):
        used = 8000 + k * 2048
        if used >= 81920:
            frames.append({"gpus": [_idle(0)]})
            break
        frames.append(
            {
                "gpus": [
                    _busy(
                        used,
                        _proc(777, used - 500, "carol", "python serve.py", "carol/serve"),
                        sm_active=None,
                        tensor_active=None,
                        util=60,
                    )
                ]
            }
        )
    for f in frames:
        for g in f["gpus"]:
            g.pop("sm_active", None)
            g.pop("tensor_active", None)
    return {
        "name": "leak",
        "interval_s": 60,
        "host": "fake-leak",
        "gpus": [{**_A100, "uuid": "GPU-00000000-leak-0000-0000-000000000000"}],
        "frames": frames,
    }


def _scenario_thermal() -> dict[str, Any]:
    """1 × H100 heating up under load until it throttles (HW + SW thermal slowdown, clocks drop)."""
    p = _proc(31337, 70000, "dave", "torchrun train.py", "dave/train")
    frames: list[dict[str, Any]] = [
        {"gpus": [_busy(71000, p, temperature_c=70 + 2 * k)]} for k in range(8)
    ]
    frames += [
        {
            "repeat": 10,
            "gpus": [
                _busy(
                    71000,
                    p,
                    temperature_c=92,
                    throttle=0x20 | 0x40,
                    sm_clock_mhz=1200,
                    power_w=480,
                    util=99,
                    sm_active=0.4,
                )
            ],
        }
    ]
    return {
        "name": "thermal",
        "interval_s": 60,
        "host": "fake-thermal",
        "gpus": [{**_H100, "uuid": "GPU-00000000-hot0-0000-0000-000000000000"}],
        "frames": frames,
    }


def _scenario_xid() -> dict[str, Any]:
    """2 × H100: GPU 1 reports XID 79 (fell off the bus), then NVML says GpuIsLost on it."""
    p0 = _proc(1000, 50000, "erin", "python train.py --rank 0", "erin/train")
    p1 = _proc(1001, 50000, "erin", "python train.py --rank 1", "erin/train")
    return {
        "name": "xid",
        "interval_s": 60,
        "host": "fake-xid",
        "gpus": [
            {**_H100, "uuid": "GPU-00000000-xid0-0000-0000-000000000000"},
            {**_H100, "uuid": "GPU-00000001-xid1-0000-0000-000000000001"},
        ],
        "frames": [
            {"repeat": 3, "gpus": [_busy(51000, p0), _busy(51000, p1)]},
            {
                "gpus": [
                    _busy(51000, p0),
                    _busy(
                        51000,
                        p1,
                        xid=[79],
                        pcie_replay=12,
                        nvlink_errors={"crc_flit": 3, "replay": 1},
                    ),
                ]
            },
            {"repeat": 6, "gpus": [_idle(51000, [p0]), {"lost": True}]},
        ],
    }


def _scenario_mig() -> dict[str, Any]:
    """2 GPUs in MIG mode. GPU 0, an A100-80GB, has three 1g.10gb instances: two serve a process
    (instance 0 at 91 % of its memory), one is empty, and 4 of the 7 slices are not allocated; the
    A100 has no GPM, so an instance counts as active while a process runs in it. GPU 1, an H100,
    has two 3g.40gb instances read through GPM: one trains (SM-active 55 %), one holds an idle
    notebook (1 %); 1 slice is unallocated. Whole-GPU utilization is not supported in MIG mode.
    Known answer: GPU 0 is 2/7 active, GPU 1 3/7 active; the rest is waste."""
    a100 = {
        **_A100,
        "uuid": "GPU-00000000-mig0-0000-0000-000000000000",
        "mig": [
            {
                "uuid": f"MIG-0000000{k}-mig0-0000-0000-000000000000",
                "memory_total_mib": 9856,
                "gpu_instance_id": 7 + k,
            }
            for k in range(3)
        ],
    }
    h100 = {
        **_H100,
        "uuid": "GPU-00000001-mig1-0000-0000-000000000001",
        "mig": [
            {
                "uuid": f"MIG-0000000{k}-mig1-0000-0000-000000000001",
                "memory_total_mib": 40192,
                "slices": 3,
                "gpu_instance_id": 1 + k,
            }
            for k in range(2)
        ],
    }
    return {
        "name": "mig",
        "interval_s": 60,
        "host": "fake-mig",
        "gpus": [a100, h100],
        "frames": [
            {
                "repeat": 5,
                "gpus": [
                    {
                        "memory_used_mib": 15000,
                        "mig_used_mib": [9000, 6000, 0],
                        "power_w": 180,
                        "temperature_c": 45,
                        "processes": [
                            {
                                **_proc(
                                    2001, 9000, "frank", "python serve.py --mig 0", "frank/serve"
                                ),
                                "mig": 0,
                            },
                            {
                                **_proc(
                                    2002, 6000, "grace", "python eval.py --mig 1", "grace/eval"
                                ),
                                "mig": 1,
                            },
                        ],
                    },
                    {
                        "memory_used_mib": 42000,
                        "mig_used_mib": [30000, 12000],
                        "mig_sm_active": [0.55, 0.01],
                        "power_w": 420,
                        "temperature_c": 58,
                        "processes": [
                            {
                                **_proc(3001, 30000, "heidi", "torchrun train.py", "heidi/train"),
                                "mig": 0,
                            },
                            {
                                **_proc(
                                    3002, 12000, "ivan", "python -m jupyter lab", "ivan/notebook"
                                ),
                                "mig": 1,
                            },
                        ],
                    },
                ],
            }
        ],
    }


SCENARIOS: dict[str, Any] = {
    "idle": _scenario_idle,
    "leak": _scenario_leak,
    "thermal": _scenario_thermal,
    "xid": _scenario_xid,
    "mig": _scenario_mig,
}
"""Built-in scenarios by name; each function's docstring says what it shows."""


def scenario(name: str) -> Trace:
    """A built-in scenario as a :class:`Trace`."""
    fn = SCENARIOS.get(name)
    if fn is None:
        raise InputError(
            f"unknown fake scenario {name!r}",
            hint=f"use one of {', '.join(SCENARIOS)} or a trace file",
            suggestions=did_you_mean(name, SCENARIOS),
        )
    return parse_trace(fn(), f"scenario:{name}")
