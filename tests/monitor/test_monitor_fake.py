"""The fake NVML: scenarios read as documented, real pynvml errors, malformed traces refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpuwise.errors import DataFileError, InputError
from gpuwise.monitor.fake import (
    SCENARIOS,
    FakeGpuReader,
    FakeHandle,
    FakeNvml,
    load_trace,
    scenario,
)


def _read(name: str, n: int) -> Any:
    reader = FakeGpuReader.from_scenario(name)
    snap = None
    for _ in range(n):
        snap = reader.read()
    reader.close()
    return snap


@pytest.mark.parametrize(
    ("name", "reads", "check"),
    [
        # idle: GPU 1 is empty, at 0 % and in the "GPU idle" clock state
        (
            "idle",
            1,
            lambda s: (
                s.gpus[1].utilization_gpu_ratio == 0
                and s.gpus[1].processes == ()
                and s.gpus[1].throttle_reasons == ("gpu_idle",)
            ),
        ),
        # idle: GPU 0 trains in the first frames, with a process attributed to its workload
        (
            "idle",
            1,
            lambda s: (
                s.gpus[0].sm_active_ratio is None
                and s.gpus[0].processes[0].workload == "alice/train"
            ),
        ),
        # idle: GPM SM-active needs two samples; the second read has it
        ("idle", 2, lambda s: s.gpus[0].sm_active_ratio == pytest.approx(0.62)),
        # leak: memory grows read after read on an A100 that has no GPM (absent, not zero)
        (
            "leak",
            10,
            lambda s: (
                s.gpus[0].memory_used_bytes == (8000 + 9 * 2048) * 1024**2
                and s.gpus[0].sm_active_ratio is None
                and "sm_active" in s.unsupported
            ),
        ),
        # thermal: the late frames throttle with HW + SW thermal slowdown and lower clocks
        (
            "thermal",
            12,
            lambda s: (
                set(s.gpus[0].throttle_reasons) == {"sw_thermal", "hw_thermal"}
                and s.gpus[0].sm_clock_mhz == 1200
                and s.gpus[0].temperature_c == 92
            ),
        ),
        # xid: XID 79 is counted on GPU 1, then the GPU is lost and stays marked
        ("xid", 4, lambda s: s.gpus[1].xid_counts == ((79, 1),) and not s.gpus[1].lost),
        (
            "xid",
            6,
            lambda s: s.gpus[1].lost and s.gpus[1].xid_counts == ((79, 1),) and not s.gpus[0].lost,
        ),
        # mig: three instances, per-instance memory, whole-GPU utilization not supported
        (
            "mig",
            1,
            lambda s: (
                s.gpus[0].mig_enabled
                and len(s.gpus[0].mig_devices) == 3
                and s.gpus[0].mig_devices[0].memory_used_bytes == 9000 * 1024**2
                and s.gpus[0].utilization_gpu_ratio is None
                and "utilization" in s.unsupported
            ),
        ),
    ],
)
def test_scenarios_read_as_documented(name: str, reads: int, check: Any) -> None:
    assert check(_read(name, reads))


def test_every_scenario_is_documented_and_reads() -> None:
    for name, fn in SCENARIOS.items():
        assert fn.__doc__, name
        assert _read(name, 3).gpus


@pytest.mark.parametrize(
    ("scenario_name", "frame", "call", "error"),
    [
        # MIG mode: NVML has no whole-GPU utilization
        (
            "mig",
            0,
            lambda f: f.nvmlDeviceGetUtilizationRates(FakeHandle(0)),
            pynvml.NVMLError_NotSupported,
        ),
        # a GPU that fell off the bus
        ("xid", 5, lambda f: f.nvmlDeviceGetMemoryInfo(FakeHandle(1)), pynvml.NVMLError_GpuIsLost),
        # an index past the GPU count
        ("idle", 0, lambda f: f.nvmlDeviceGetHandleByIndex(5), pynvml.NVMLError_InvalidArgument),
        # no pending events
        ("idle", 0, lambda f: f.nvmlEventSetWait(None, 0), pynvml.NVMLError_Timeout),
    ],
)
def test_fake_raises_the_real_pynvml_errors(
    scenario_name: str, frame: int, call: Any, error: type
) -> None:
    fake = FakeNvml(scenario(scenario_name))
    fake.nvmlInit()
    for _ in range(frame):
        fake.advance()
    with pytest.raises(error):
        call(fake)


def test_fake_before_init_is_uninitialized() -> None:
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        FakeNvml(scenario("idle")).nvmlDeviceGetUtilizationRates(FakeHandle(0))


def test_from_trace_replays_a_file_and_loops(tmp_path: Path) -> None:
    trace = {
        "interval_s": 1,
        "gpus": [{"name": "NVIDIA L4", "memory_total_mib": 23034}],
        "frames": [{"gpus": [{"util": 10}]}, {"gpus": [{"util": 80}]}],
    }
    path = tmp_path / "t.yaml"
    path.write_text(json.dumps(trace))  # JSON is YAML
    reader = FakeGpuReader.from_trace(path)
    utils = [reader.read().gpus[0].utilization_gpu_ratio for _ in range(3)]
    assert utils == [0.1, 0.8, 0.1]
    assert reader.read().gpus[0].name == "NVIDIA L4"


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ([1, 2], "a trace is a mapping"),  # not a mapping
        ({"gpus": [], "frames": [{"gpus": []}]}, "'gpus' must be a non-empty"),  # no GPUs
        ({"gpus": [{}], "frames": []}, "'frames' must be a non-empty"),  # no frames
        ({"gpus": [{}], "frames": [{"gpus": [{}, {}]}]}, "has 2 GPUs"),  # GPU count mismatch
        ({"gpus": [{}], "frames": [{"gpus": [{"utl": 5}]}]}, "unknown field 'utl'"),  # typo
        ({"gpus": [{}], "frames": [{"gpus": [{"util": -5}]}]}, "util: expected a finite number"),
        (
            {"gpus": [{}], "frames": [{"gpus": [{"util": float("nan")}]}]},
            "util: expected a finite number",
        ),
        ({"gpus": [{}], "frames": [{"repeat": 0, "gpus": [{}]}]}, "repeat"),
        (
            {"gpus": [{"unsupported": ["pci"]}], "frames": [{"gpus": [{}]}]},
            "unknown metric group 'pci'",
        ),
    ],
)
def test_malformed_traces_name_the_field(tmp_path: Path, doc: Any, needle: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DataFileError, match=needle):
        load_trace(path)


def test_unreadable_trace_and_unknown_scenario() -> None:
    with pytest.raises(InputError, match="cannot read trace"):
        load_trace("/nonexistent/trace.json")
    with pytest.raises(InputError) as exc:
        scenario("idel")
    assert "idle" in exc.value.suggestions


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        (
            "trace.json",
            b"\xa2\xff binary \x00",
            "not UTF-8 text",
        ),  # binary file: was an internal error (exit 1)
        (
            "trace.yaml",
            b"\xff\xfe\x00n\x00a",
            "not UTF-8 text",
        ),  # UTF-16 with BOM: not our encoding
        (
            "trace.yaml",
            b"name: x\nframes: [\n",
            "line 3, column 1",
        ),  # truncated YAML: located, one line
        ("trace.json", b'{"name": "x"', "line 1 column"),  # truncated JSON
    ],
)
def test_undecodable_or_truncated_trace_is_one_line_data_error(
    tmp_path: Path, name: str, content: bytes, needle: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataFileError, match=needle) as exc:
        load_trace(path)
    assert "\n" not in exc.value.one_line()
