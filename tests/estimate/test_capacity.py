"""One memory figure per GPU for estimate, plan and gpus: reported total, measured override, rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.estimate import estimate_workload, workload_from_options
from gpuwise.estimate.calibration import load_calibration
from gpuwise.estimate.capacity import gpu_memory
from gpuwise.hardware import find_gpu


@pytest.mark.parametrize(
    ("gpu", "mib"),
    [
        ("L40S", 46068),  # sold as 48 GB; the README's old winner needed 47.97 GiB
        ("H100", 81559),
        ("L4", 23034),
        ("A10G", 23028),
        ("A100", 40960),
        ("A100-80GB", 81920),
        ("H200", 143771),
    ],
)
def test_published_nvidia_smi_totals_are_the_capacity(gpu: str, mib: int) -> None:
    mem = gpu_memory(find_gpu(gpu))
    assert mem.source == "published"
    assert mem.total_gib == pytest.approx(mib / 1024)
    assert mem.usable_gib == pytest.approx(mib / 1024 - 0.5)


def test_a_gpu_without_a_reported_figure_says_it_uses_the_datasheet() -> None:
    mem = gpu_memory(find_gpu("A6000"))
    assert mem.source == "datasheet"
    assert mem.total_gib == 48
    assert "no reported figure" in mem.describe()


def _calibration(tmp_path: Path, entry: dict[str, object]) -> Path:
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"version": 1, "gpus": {"L40S": entry}}), "utf-8")
    return path


def test_a_measured_total_and_context_win_over_the_table(tmp_path: Path) -> None:
    cal = load_calibration(
        _calibration(tmp_path, {"total_memory_gib": 44.0, "cuda_context_gib": 0.8})
    )
    assert cal is not None
    mem = gpu_memory(find_gpu("L40S"), cal.for_gpu("L40S"))
    assert (mem.source, mem.total_gib, mem.usable_gib) == ("measured", 44.0, pytest.approx(43.2))


def test_estimate_counts_the_same_capacity(tmp_path: Path) -> None:
    wl = workload_from_options(model="llama-3.1-8b", task="lora", tokens="1M")
    est = estimate_workload(wl, "L40S", 1, calibration=None)
    assert est.memory.capacity_gib == pytest.approx(46068 / 1024)
    path = _calibration(tmp_path, {"total_memory_gib": 30.0})
    measured = estimate_workload(wl, "L40S", 1, calibration=str(path))
    assert measured.memory.capacity_gib == 30.0


def test_the_planner_uses_the_reported_memory() -> None:
    from gpuwise.planner.model import EstimatorModel
    from gpuwise.planner.network import UNKNOWN

    wl = workload_from_options(model="llama-3.1-8b", task="lora", tokens="1M")
    ev = EstimatorModel(wl, calibration=None).evaluate("L40S", 1, 1, UNKNOWN)
    assert ev.capacity_gib == pytest.approx(46068 / 1024)


def test_gpus_shows_the_same_figure(cli) -> None:  # type: ignore[no-untyped-def]
    rows = {r["gpu"]: r for r in cli("gpus", "--json").json()["gpus"]}
    l40s = rows["L40S"]
    assert l40s["memory_gib"] == 48 and l40s["memory_source"] == "published"
    assert l40s["reported_memory_gib"] == pytest.approx(46068 / 1024)
    assert l40s["usable_memory_gib"] == pytest.approx(46068 / 1024 - 0.5)
    assert rows["A6000"]["memory_source"] == "datasheet"


def test_estimate_says_what_the_gpu_reports(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "estimate", "--model", "llama-3.1-8b", "--task", "lora", "--tokens", "2B", "--gpu", "L40S"
    )
    assert "reports 45.0 GiB" in r.stdout or "the 45.0 GiB the GPU reports" in r.stdout
