"""`plan --json` keeps its fields: golden files (add fields, never rename).

Regenerate after adding a field on purpose: ``GPUWISE_UPDATE_GOLDEN=1 pytest tests/planner/test_golden.py``
and review the diff (a removed or renamed key is a breaking change).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpuwise.planner import PlanRequest, load_spot_defaults, plan_offers

from .test_export import OFFERS
from .toy import NO_STARTUP, ToyModel

DATA = Path(__file__).parent / "data"
# the fields `plan --json` had before the settings search (issue 12): they must all stay
FIELDS_BEFORE = {
    "top": {
        "workload",
        "request",
        "options",
        "options_total",
        "pareto",
        "rejected",
        "explanation",
        "reason",
        "nearest_miss",
        "considered",
        "assumptions",
    },
    "option": {
        "rank",
        "cloud",
        "region",
        "regions",
        "instance_type",
        "gpu",
        "gpu_count",
        "nodes",
        "billing",
        "price_usd_per_hour",
        "hours",
        "cost_usd",
        "fits",
        "p_meet_deadline",
        "failure_free_hours",
        "per_gpu_memory_gib",
        "capacity_gib",
        "on_pareto_front",
        "checkpoint_interval_hours",
        "expected_interruptions",
        "interruption_source",
        "zones",
        "checkpoint_hours",
    },
    "rejection": {
        "kind",
        "reason",
        "offers",
        "gpu",
        "gpu_count",
        "nodes",
        "billing",
        "cloud",
        "example",
        "hours",
        "cost_usd",
    },
}


def _check(name: str, doc: Any) -> None:
    path = DATA / name
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if os.environ.get("GPUWISE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert json.loads(path.read_text()) == json.loads(text), (
        f"{name} changed: review, then regenerate (docstring)"
    )


def test_cli_json_fields(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "plan",
        "--model",
        "llama-3.1-8b",
        "--task",
        "lora",
        "--tokens",
        "2B",
        "--deadline",
        "24h",
        "--json",
        "--limit",
        "1",
    )
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    fields = {
        "top": sorted(doc),
        "request": sorted(doc["request"]),
        "option": sorted(doc["options"][0]),
        "settings": sorted(doc["options"][0]["settings"]),
        "rejection": sorted(doc["rejected"][0]),
    }
    for part, before in FIELDS_BEFORE.items():
        assert before <= set(fields[part]), (
            f"{part}: {before - set(fields[part])} removed or renamed"
        )
    _check("plan_json_fields.json", fields)


def test_toy_plan_json_values() -> None:
    request = PlanRequest(max_nodes=2, billings=("on-demand",), deadline_hours=10.0)
    plan = plan_offers(
        OFFERS, ToyModel(), request, spot=load_spot_defaults(), reserved={}, startup=NO_STARTUP
    )
    doc = json.loads(json.dumps(plan.to_dict(), default=str))
    _check("plan_toy.json", doc)
    assert doc["options"][0]["cost_usd"] == pytest.approx(
        doc["options"][0]["price_usd_per_hour"] * doc["options"][0]["hours"]
    )
