"""calibrate --from-runs: a run's measured figures become calibration that reproduces them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuwise.base.recipe import PlanFile
from gpuwise.base.runlog import FoundRun
from gpuwise.errors import DataFileError
from gpuwise.estimate import (
    calibrate_from_runs,
    estimate_workload,
    load_calibration,
    write_run_entries,
)
from gpuwise.estimate.calibration import parse_calibration
from gpuwise.estimate.from_runs import recipe_workload
from tests.base.runs_data import record_for
from tests.base.test_recipe import PLAN  # 32 × A100-80GB (8 nodes of 4), llama-3.1-8b LoRA


def _found(plan: PlanFile | None, run_id: str = "pilot-a", **changes: Any) -> FoundRun:
    return FoundRun(f"{run_id}.json", record_for(PLAN, run_id, **changes), plan)


def _calibrated(tmp_path: Path, *runs: FoundRun) -> Any:
    result = calibrate_from_runs(runs)
    return load_calibration(
        write_run_entries(result.entries, measured_at="now", path=tmp_path / "c.json")
    )


def _estimate(cal: Any, gpus: int = 32) -> Any:
    wl = recipe_workload(PLAN.recipe)
    return estimate_workload(wl, "A100-80GB", gpus, gpus_per_node=4, calibration=cal, suggest=False)


def test_the_next_estimate_is_the_measured_throughput(tmp_path: Path) -> None:
    before = _estimate(None)
    measured = before.tokens_per_second / before.gpus * 0.6  # the run got 60 % of the promise
    cal = _calibrated(tmp_path, _found(PLAN, tokens_per_s_per_gpu=measured))
    after = _estimate(cal)
    assert after.tokens_per_second / after.gpus == pytest.approx(measured, rel=1e-4)
    assert "measured in 1 run of llama-3.1-8b lora on A100-80GB" in after.mfu_basis
    assert cal.runs == ("pilot-a/0",)
    # other GPU counts: the measured MFU carries over, communication stays modelled
    small, small_before = _estimate(cal, 4), _estimate(None, 4)
    assert small.tokens_per_second / small.gpus < small_before.tokens_per_second / small_before.gpus
    assert small.mfu_basis.startswith("calibrated: MFU")


def test_a_multi_node_run_is_timed_on_its_instances_network(tmp_path: Path) -> None:
    # full fine-tuning (ZeRO-1) on 8 nodes of 4 A100s: the network is a large part of a step
    plan = replace(PLAN, recipe=replace(PLAN.recipe, task="finetune", zero=1))
    wl = recipe_workload(plan.recipe)

    def speed(cal: Any, gbit: float | None) -> float:
        e = estimate_workload(
            wl,
            "A100-80GB",
            32,
            gpus_per_node=4,
            inter_node_gbit_s=gbit,
            calibration=cal,
            suggest=False,
        )
        return float(e.tokens_per_second / e.gpus)

    seen: list[tuple[str, str]] = []

    def network(cloud: str, instance: str) -> float:
        seen.append((cloud, instance))
        return 25.0

    result = calibrate_from_runs([_found(plan, tokens_per_s_per_gpu=1000.0)], network=network)
    cal = load_calibration(
        write_run_entries(result.entries, measured_at="t", path=tmp_path / "c.json")
    )
    assert seen == [("azure", "Standard_NC96ads_A100_v4")]
    assert speed(cal, 25.0) == pytest.approx(1000.0, rel=1e-4)  # the plan's network: reproduced
    assert speed(cal, None) > 1.2 * 1000.0  # the GPU's usual (faster) network: modelled
    # without the instance's network the fit would have blamed the GPU for the network's time
    plain = calibrate_from_runs([_found(plan, tokens_per_s_per_gpu=1000.0)])
    assert plain.fits[0].mfu < result.fits[0].mfu


def test_a_step_time_alone_calibrates_too(tmp_path: Path) -> None:
    before = _estimate(None)
    cal = _calibrated(tmp_path, _found(PLAN, step_s=before.step_time_s * 2))
    assert _estimate(cal).step_time_s == pytest.approx(before.step_time_s * 2, rel=1e-4)


def test_runs_of_one_gpu_model_and_task_give_their_median_and_names(tmp_path: Path) -> None:
    speeds = {"a": 900.0, "b": 1000.0, "c": 1300.0}
    runs = [_found(PLAN, k, tokens_per_s_per_gpu=v) for k, v in speeds.items()]
    result = calibrate_from_runs(runs)
    [entry] = result.entries["A100-80GB"]
    assert entry["runs"] == ["a/0", "b/0", "c/0"] and entry["tokens_per_s_per_gpu"] == 1000.0
    assert entry["mfu"] == pytest.approx(
        next(f.mfu for f in result.fits if f.run == "b/0"), rel=1e-5
    )


def test_measured_peak_memory_becomes_the_estimates_peak(tmp_path: Path) -> None:
    cal = _calibrated(tmp_path, _found(PLAN, tokens_per_s_per_gpu=1000.0, peak_reserved_gib=41.0))
    mem = _estimate(cal).memory
    # torch's reserved memory does not count the CUDA context; the estimate's peak does
    assert mem.per_gpu_gib == pytest.approx(41.0 + mem.breakdown["cuda_context"], rel=1e-6)
    assert "measured_allowance" in mem.breakdown
    assert "measured_allowance" not in _estimate(None).memory.breakdown


@pytest.mark.parametrize(
    "changes, plan, reason",
    [
        ({"gpu": None}, PLAN, "a CPU run cannot calibrate a GPU"),
        ({"outcome": "running", "ended": None}, PLAN, "still running"),
        ({"steps_measured": 0}, PLAN, "no timed steps"),
        ({}, None, "no plan file for plan-"),
        ({"tokens_per_s_per_gpu": 1e9}, PLAN, "faster than the model allows"),
        ({"tokens_per_s_per_gpu": 1e-3}, PLAN, "not a GPU run worth calibrating on"),
        ({"gpu": "Voodoo-5"}, PLAN, "Voodoo-5"),
    ],
)
def test_a_record_that_cannot_speak_for_a_gpu_is_skipped_with_the_reason(
    changes: dict[str, Any], plan: PlanFile | None, reason: str
) -> None:
    result = calibrate_from_runs([_found(plan, **{"tokens_per_s_per_gpu": 1000.0, **changes})])
    assert result.entries == {} and len(result.skipped) == 1
    assert result.skipped[0].startswith("pilot-a/0: ") and reason in result.skipped[0]


def test_a_run_without_a_gpu_rehearses_only_when_a_gpu_is_assumed() -> None:
    cpu = _found(PLAN, gpu=None, tokens_per_s_per_gpu=500.0)
    assert calibrate_from_runs([cpu]).entries == {}
    [entry] = calibrate_from_runs([cpu], assume_gpu="a100-sxm4-80gb").entries["A100-80GB"]
    assert entry["rehearsal"] is True and entry["runs"] == ["pilot-a/0"]
    [real] = calibrate_from_runs([_found(PLAN, tokens_per_s_per_gpu=500.0)]).entries["A100-80GB"]
    assert "rehearsal" not in real


def test_an_inference_plan_does_not_calibrate_training() -> None:
    plan = replace(PLAN, recipe=replace(PLAN.recipe, task="inference"))
    result = calibrate_from_runs([_found(plan, tokens_per_s_per_gpu=1000.0)])
    assert "only training runs calibrate" in result.skipped[0]


def test_writing_keeps_other_gpus_keys_and_models(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "gpus": {
                    "A100-80GB": {
                        "mfu": 0.4,
                        "from_runs": [
                            {
                                "model": "llama-3.1-8b",
                                "task": "lora",
                                "mfu": 0.2,
                                "runs": ["old/0"],
                            },
                            {"model": "gpt2", "task": "finetune", "mfu": 0.3, "runs": ["g/0"]},
                        ],
                    },
                    "H100": {"mfu": 0.5},
                },
                "workload": {"fused_kernels": "on"},
            }
        )
    )
    result = calibrate_from_runs([_found(PLAN, tokens_per_s_per_gpu=1000.0)])
    cal = load_calibration(write_run_entries(result.entries, measured_at="t", path=path))
    a100 = cal.gpus["A100-80GB"]
    assert (
        a100.mfu == 0.4 and cal.gpus["H100"].mfu == 0.5 and cal.workload == {"fused_kernels": "on"}
    )
    assert [(m.model, m.runs) for m in a100.from_runs] == [
        ("gpt2", ("g/0",)),
        ("llama-3.1-8b", ("pilot-a/0",)),  # the new measurement replaces the old one
    ]


@pytest.mark.parametrize(
    "entry, named",
    [
        ({"model": "m", "task": "lora", "runs": []}, "from_runs[0].runs"),
        ({"model": "m", "task": "lora", "runs": ["r/0"], "mfu": 1.5}, "from_runs[0].mfu"),
        ({"model": "m", "task": "lora", "runs": ["r/0"], "memory_ratio": -1}, "memory_ratio"),
        ({"model": "m", "task": "lora", "runs": ["r/0"], "mfuu": 0.3}, "unknown key(s) mfuu"),
        ({"task": "lora", "runs": ["r/0"]}, "from_runs[0].model"),
    ],
)
def test_a_damaged_from_runs_entry_is_refused_naming_the_key(
    entry: dict[str, Any], named: str
) -> None:
    doc = {"version": 1, "gpus": {"H100": {"from_runs": [entry]}}}
    with pytest.raises(DataFileError, match="calibration.json: gpus.H100.from_runs") as exc:
        parse_calibration(doc, "calibration.json")
    assert named in str(exc.value)


def test_a_bench_entry_keeps_the_runs_and_the_workload_section(tmp_path: Path) -> None:
    from gpuwise.estimate.calibration import write_gpu_entry

    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"version": 1, "gpus": {}, "workload": {"fused_kernels": "on"}}))
    result = calibrate_from_runs([_found(PLAN, tokens_per_s_per_gpu=1000.0)])
    write_run_entries(result.entries, measured_at="t", path=path)
    write_gpu_entry("A100-80GB", {"mfu": 0.4}, device="d", measured_at="t2", path=path)
    cal = load_calibration(path)
    assert cal.workload == {"fused_kernels": "on"}  # bench used to drop it
    assert cal.gpus["A100-80GB"].mfu == 0.4 and cal.runs == ("pilot-a/0",)
