"""The estimator gets its framework factors and fix search as parameters (issue 36: the fit and the
fix search run the estimator, so the estimator imports neither); ``estimate_workload`` fills in the
defaults and hands the fix search the same factors as the estimate."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gpuwise.estimate import estimate_workload, workload_from_options
from gpuwise.estimate.calibration import GpuCalibration
from gpuwise.estimate.efficiency import UNIT_EFFICIENCY, EfficiencyModel
from gpuwise.estimate.estimator import compute_estimate
from gpuwise.estimate.measured import default_efficiency
from gpuwise.estimate.result import Suggestion
from gpuwise.estimate.suggest import suggest_fixes
from gpuwise.estimate.workload import Workload
from gpuwise.hardware import GpuSpec

# llama-3-70b full fine-tuning on one 80 GB GPU does not fit: the fix search runs
_TOO_BIG = {"model": "llama-3-70b", "task": "finetune", "tokens": "1M"}


class _Spy:
    def __init__(self) -> None:
        self.calls: list[EfficiencyModel] = []

    def __call__(
        self,
        wl: Workload,
        spec: GpuSpec,
        gpus: int,
        gpn: int,
        inter_gbit: float,
        cal: GpuCalibration | None,
        base_tps: float,
        eff: EfficiencyModel,
    ) -> Iterable[Suggestion]:
        self.calls.append(eff)
        return [
            Suggestion(
                fix="spy", per_gpu_gib=1.0, fits=True, slowdown=1.0, speed_cost="", changes={}
            )
        ]


def test_the_estimator_asks_the_fix_search_it_is_given_with_its_factors() -> None:
    wl = workload_from_options(**_TOO_BIG)
    spy = _Spy()
    est = compute_estimate(wl, "H100", 1, calibration=None, efficiency=UNIT_EFFICIENCY, fixes=spy)
    assert spy.calls == [UNIT_EFFICIENCY]
    assert [s.fix for s in est.suggestions] == ["spy"]
    assert (
        compute_estimate(wl, "H100", 1, calibration=None, efficiency=UNIT_EFFICIENCY).suggestions
        == ()
    )


def test_estimate_workload_fills_in_the_fitted_factors_and_the_fix_search() -> None:
    wl = workload_from_options(**_TOO_BIG)
    default = estimate_workload(wl, "H100", 1, calibration=None)
    assert default == compute_estimate(
        wl, "H100", 1, calibration=None, efficiency=default_efficiency(), fixes=suggest_fixes
    )
    assert default.suggestions
    assert estimate_workload(wl, "H100", 1, calibration=None, suggest=False).suggestions == ()


def test_the_fixes_are_estimated_with_the_callers_factors() -> None:
    # before: a caller's efficiency reached the estimate but the fixes used the bundled fit, so a
    # fix's slowdown compared two different models
    wl = workload_from_options(**_TOO_BIG)
    slower = replace(default_efficiency(), by_class={}, by_stack={}, overall=2.0)
    est = estimate_workload(wl, "H100", 1, calibration=None, efficiency=slower)
    assert (
        est.suggestions
        == compute_estimate(
            wl, "H100", 1, calibration=None, efficiency=slower, fixes=suggest_fixes
        ).suggestions
    )
    assert est.suggestions != estimate_workload(wl, "H100", 1, calibration=None).suggestions
