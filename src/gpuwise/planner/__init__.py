"""Rank cloud offers for a workload by what the job costs and how long it takes.

Pieces: :mod:`~gpuwise.planner.model` (the workload interface and the estimator adapter),
:mod:`~gpuwise.planner.spot` (interruption rates, Young/Daly, expected time, deadline
probability), :mod:`~gpuwise.planner.core` (enumerate, price, constrain, rank, Pareto),
:mod:`~gpuwise.planner.explain`, and :mod:`~gpuwise.planner.export` (SkyPilot task YAML,
Kubernetes Job / PyTorchJob). Pure Python: no network, no CLI. :func:`write_wheel` (the wheel
an export ships) resolves lazily, so ``import gpuwise.planner`` does not load the packaging stack.

:func:`plan` is the library call, re-exported as ``gpuwise.plan(workload, request)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwise.base import lazy
from gpuwise.planner.core import plan_offers
from gpuwise.planner.export import (
    K8S_PLAN_DIR,
    SKYPILOT_PLAN_PATH,
    WHEEL_DIR,
    k8s_checkpoint_pvc,
    k8s_manifest,
    k8s_plan_configmap,
    k8s_spot_note,
    skypilot_notes,
    skypilot_task,
    to_yaml,
    zone_id_notes,
)
from gpuwise.planner.jobenv import JobSettings, job_settings
from gpuwise.planner.model import EstimatorModel, Evaluation, WorkloadModel
from gpuwise.planner.network import InstanceNetwork, instance_network
from gpuwise.planner.recipe import plan_file
from gpuwise.planner.settings import Settings
from gpuwise.planner.sites import zone_outliers
from gpuwise.planner.spot import (
    CloudSpotRisk,
    SpotDefaults,
    SpotOutcome,
    daly_interval_hours,
    load_spot_defaults,
    p_meet_deadline,
    spot_outcome,
    young_interval_hours,
)
from gpuwise.planner.spot_observed import (
    SPOT_MIN_PREEMPTIONS,
    SiteHistory,
    observed_sites,
    spot_history,
)
from gpuwise.planner.values import OBJECTIVES, Objective, Plan, PlanOption, PlanRequest, Rejection

if TYPE_CHECKING:
    from gpuwise.catalog.offer import Offer
    from gpuwise.estimate.workload import Workload
    from gpuwise.planner.wheel import write_wheel as write_wheel

_LAZY: dict[str, str] = {
    # name: module that defines it (keep the TYPE_CHECKING import above in step)
    "write_wheel": "gpuwise.planner.wheel",
}

__all__ = [
    "K8S_PLAN_DIR",
    "OBJECTIVES",
    "SKYPILOT_PLAN_PATH",
    "SPOT_MIN_PREEMPTIONS",
    "WHEEL_DIR",
    "CloudSpotRisk",
    "EstimatorModel",
    "Evaluation",
    "InstanceNetwork",
    "JobSettings",
    "Objective",
    "Plan",
    "PlanOption",
    "PlanRequest",
    "Rejection",
    "Settings",
    "SiteHistory",
    "SpotDefaults",
    "SpotOutcome",
    "WorkloadModel",
    "daly_interval_hours",
    "instance_network",
    "job_settings",
    "k8s_checkpoint_pvc",
    "k8s_manifest",
    "k8s_plan_configmap",
    "k8s_spot_note",
    "load_spot_defaults",
    "observed_sites",
    "p_meet_deadline",
    "plan",
    "plan_file",
    "plan_offers",
    "skypilot_notes",
    "skypilot_task",
    "spot_history",
    "spot_outcome",
    "to_yaml",
    "write_wheel",
    "young_interval_hours",
    "zone_id_notes",
    "zone_outliers",
]


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, _LAZY, globals(), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def plan(
    workload: Workload | WorkloadModel,
    request: PlanRequest | None = None,
    *,
    catalog: Sequence[Path | str] = (),
    calibration: Any = None,
    offers: Sequence[Offer] | None = None,
) -> Plan:
    """Plan ``workload`` (a :class:`gpuwise.estimate.Workload`, whose settings are searched per
    GPU setup as ``request`` says, or any :class:`WorkloadModel`) over the catalog in effect (or
    the given catalog files, or ``offers`` when given). ``calibration``: a
    :class:`gpuwise.estimate.Calibration`, a path, or None for the user's calibration file when
    there is one."""
    from gpuwise.catalog import load_catalog
    from gpuwise.catalog.reserved import load_reserved_terms
    from gpuwise.estimate.workload import Workload

    request = request or PlanRequest()
    if isinstance(workload, Workload):
        model: WorkloadModel = EstimatorModel(
            workload,
            calibration,
            max_zero=request.max_zero,
            search=request.search_settings,
            max_batch=request.max_batch,
            memory_headroom=request.memory_headroom,
        )
    else:
        model = workload
    return plan_offers(
        load_catalog(catalog).offers if offers is None else offers,
        model,
        request,
        spot=load_spot_defaults(),
        reserved=load_reserved_terms(),
    )
