"""Run records as training writes them (RunRecord.to_json() under gpuwise-runs/), for the tests of
calibrate --from-runs, report --runs and plan --spot-mtbf auto."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuwise.base.recipe import RUNS_FOLDER, PlanFile, RunRecord

PLAN_ARGS = (
    *("plan", "--model", "llama-3.1-8b", "--task", "lora", "--tokens", "200M"),
    *("--gpu", "H100", "--cloud", "gcp", "--max-gpus", "1", "--limit", "1"),
)
"""A quick plan (one GPU model, one cloud) whose winner the tests measure."""


def record_for(plan: PlanFile, run_id: str = "pilot-a", **changes: Any) -> RunRecord:
    """A finished record of ``plan``'s recipe, as `gpuwise run --plan` would write it."""
    r = plan.recipe
    rec = RunRecord(
        run_id=run_id,
        attempt=0,
        started="2026-11-27T10:00:00Z",
        ended="2026-11-27T10:10:00Z",
        outcome="pilot",
        plan_id=plan.plan_id,
        pilot=True,
        gpu=r.gpu,
        world_size=r.world_size,
        nodes=r.nodes,
        gpus_per_node=r.gpus_per_node,
        instance_type=r.instance_type,
        cloud=r.cloud,
        region=r.region,
        capacity_type=r.capacity_type,
        micro_batch=r.micro_batch,
        accumulation=r.accumulation,
        global_batch=r.global_batch,
        seq_len=r.seq_len,
        step_end=20,
        steps_measured=10,
    )
    return replace(rec, **changes)


def write_record(folder: Path, rec: RunRecord) -> Path:
    """``folder/gpuwise-runs/<run id>-<attempt>.json``, the record's own JSON."""
    path = folder / RUNS_FOLDER / f"{rec.run_id}-{rec.attempt}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rec.to_json())
    return path
