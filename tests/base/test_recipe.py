"""The loop's one schema (gpuwise.base.recipe): a plan file and a run record round-trip, and a
damaged file is refused naming the field, never half-read."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpuwise.base.recipe import (
    PLAN_SCHEMA,
    Band,
    Expected,
    PlanFile,
    Recipe,
    RunRecord,
    load_plan_file,
    parse_plan_file,
    parse_run_record,
    plan_id_for,
)
from gpuwise.errors import InputError

RECIPE = Recipe(
    model="llama-3.1-8b",
    task="lora",
    seq_len=4096,
    tokens=2e9,
    steps=3815,
    global_batch=128,
    micro_batch=2,
    accumulation=2,
    data_parallel=32,
    zero=0,
    tensor_parallel=1,
    pipeline_parallel=1,
    context_parallel=1,
    expert_parallel=1,
    recompute="none",
    precision="bf16",
    master_weights="fp32",
    optimizer="adamw",
    lora_rank=16,
    lora_targets="all-linear",
    world_size=32,
    gpus_per_node=4,
    nodes=8,
    gpu="A100-80GB",
    instance_type="Standard_NC96ads_A100_v4",
    cloud="azure",
    region="westus3",
    capacity_type="spot",
)
EXPECTED = Expected(
    tokens_per_s_per_gpu=Band(1400.0, 1800.0, 1000.0),
    step_s=Band(11.7, 9.1, 16.4),
    peak_memory_gib_per_gpu=70.1,
    memory_capacity_gib=79.5,
    hours=Band(3.7, 2.7, 5.1),
    cost_usd=Band(47.6, 34.5, 66.1),
    price_usd_per_hour=12.93,
    failure_free_hours=3.45,
)
PLAN = PlanFile(
    plan_id=plan_id_for(RECIPE, EXPECTED),
    recipe=RECIPE,
    expected=EXPECTED,
    created="2026-11-27T10:00:00Z",
    gpuwise_version="0.1.0",
    notes=("azure spot rate is a placeholder",),
)


def test_plan_file_round_trips_through_json(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(PLAN.to_json())
    assert load_plan_file(path) == PLAN
    assert json.loads(PLAN.to_json())["schema"] == PLAN_SCHEMA


def test_plan_id_names_the_recipe_and_its_figures() -> None:
    assert PLAN.plan_id.startswith("plan-") and len(PLAN.plan_id) == 17
    assert plan_id_for(RECIPE, EXPECTED) == PLAN.plan_id  # the same plan, the same id
    assert plan_id_for(replace(RECIPE, micro_batch=4), EXPECTED) != PLAN.plan_id
    assert plan_id_for(RECIPE, replace(EXPECTED, price_usd_per_hour=13.0)) != PLAN.plan_id


def test_recipe_derived_figures() -> None:
    assert RECIPE.tokens_per_step == 128 * 4096
    assert [replace(RECIPE, zero=z).sharding for z in (0, 1, 2, 3)] == [
        "ddp",
        "zero-1",
        "zero-2",
        "fsdp-full-shard",
    ]


def test_band_says_whether_an_actual_falls_inside_and_by_how_much() -> None:
    band = Band(100.0, 80.0, 130.0)
    assert band.holds(90.0) is True and band.holds(131.0) is False
    assert Band(100.0, 130.0, 80.0).holds(90.0) is True  # a speed band runs the other way
    assert Band(100.0).holds(100.0) is None  # no range, no verdict
    assert band.error(80.0) == pytest.approx(0.25)  # promised 25 % more than measured
    assert band.error(0.0) is None


def test_run_record_round_trips() -> None:
    rec = RunRecord(
        run_id="r1",
        attempt=1,
        started="2026-11-27T10:00:00Z",
        ended="2026-11-27T10:05:00Z",
        outcome="preempted",
        plan_id=PLAN.plan_id,
        plan_mismatch=("world size 2, plan 32",),
        tokens_per_s_per_gpu=1234.5,
        preemptions=1,
        steps_lost=3,
    )
    assert parse_run_record(rec.to_json()) == rec


def _doc() -> dict[str, object]:
    doc: dict[str, object] = json.loads(PLAN.to_json())
    return doc


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        # a field gone: refused by name
        (lambda d: d["recipe"].pop("micro_batch"), "recipe: field 'micro_batch' is missing"),
        # a number typed as text
        (lambda d: d["recipe"].update(micro_batch="2"), "recipe: micro_batch"),
        # true is not a whole number
        (lambda d: d["recipe"].update(world_size=True), "recipe: world_size"),
        # a choice outside its Literal
        (lambda d: d["recipe"].update(capacity_type="cheap"), "recipe: capacity_type"),
        # a band that is not an object
        (lambda d: d["expected"].update(step_s=3), "expected: step_s"),
        # another kind of file
        (lambda d: d.update(schema="gpuwise.run/1"), "schema 'gpuwise.run/1'"),
        # a NUL in text
        (lambda d: d["recipe"].update(model="llama\x00"), "recipe: model"),
    ],
)
def test_a_damaged_plan_file_is_refused_naming_the_field(damage, named) -> None:  # type: ignore[no-untyped-def]
    doc = _doc()
    damage(doc)
    with pytest.raises(InputError, match=named.replace("(", r"\(")):
        parse_plan_file(json.dumps(doc), "plan.json")


@pytest.mark.parametrize(
    "raw",
    [
        b"",  # empty
        b"[1, 2]",  # not an object
        b'{"schema": "gpuwise.plan/1", "plan_id": NaN}',  # NaN is not JSON gpuwise accepts
        b"\xff\xfe{",  # not UTF-8
        b'{"schema": "gpuwise.plan/1"',  # truncated
    ],
)
def test_malformed_bytes_are_one_clear_error(raw: bytes) -> None:
    with pytest.raises(InputError, match="plan.json"):
        parse_plan_file(raw, "plan.json")


def test_a_bom_and_unknown_fields_are_read(tmp_path: Path) -> None:
    doc = _doc()
    doc["written_by_a_newer_gpuwise"] = {"x": 1}
    path = tmp_path / "plan.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())
    assert load_plan_file(path) == PLAN


@pytest.mark.parametrize("kind", ["missing", "folder"])
def test_an_unreadable_path_says_how_to_get_a_plan(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "plan.json"
    if kind == "folder":
        path.mkdir()
    with pytest.raises(InputError, match="plan"):
        load_plan_file(path)
