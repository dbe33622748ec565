"""Prices you can get: zone outliers are set aside unless allowed, and then the export pins the zone."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpuwise.catalog import Offer
from gpuwise.planner import PlanRequest, load_spot_defaults, plan_offers
from gpuwise.planner.export import k8s_manifest, skypilot_task, zone_id_notes

from .test_export import validate_skypilot
from .toy import NO_STARTUP, ToyModel
from .toy import offer as _offer


def offer(
    zone: str,
    spot: float,
    *,
    region: str = "us-east-1",
    itype: str = "p5.48xlarge",
    gpu: str = "H100",
    count: int = 8,
) -> Offer:
    return _offer(
        "aws", region, itype, gpu, count, 98.0, spot, zone, vcpus=192.0, memory_gib=2048.0
    )


# the README job's case: a Local Zone at 62% of the region's other zone
LOCAL = offer("use1-atl2-az1", 13.0)
NORMAL = offer("use1-az6", 21.0)


def plan(offers: list[Offer], **req: Any):  # type: ignore[no-untyped-def]
    request = PlanRequest(**{"max_nodes": 2, "billings": ("spot",), "spot_mtbf_hours": 1e6, **req})
    return plan_offers(
        offers, ToyModel(), request, spot=load_spot_defaults(), reserved={}, startup=NO_STARTUP
    )


def test_an_outlier_zone_price_is_set_aside() -> None:
    w = plan([LOCAL, NORMAL]).winner
    assert w is not None
    assert w.price_usd_per_hour == 21.0 and w.zone == "use1-az6" and not w.zone_pinned
    assert w.zones_set_aside == ("use1-atl2-az1",)


def test_an_aws_local_zone_is_set_aside_even_at_a_normal_price() -> None:
    # a Local Zone only 5% cheaper is no price outlier, but an account must opt into it and
    # SkyPilot does not see it by default: the plan prices the regular zone SkyPilot would use
    local = replace(LOCAL, spot_usd_per_hour=20.0)
    w = plan([local, NORMAL]).winner
    assert w is not None and w.zone == "use1-az6" and w.zones_set_aside == ("use1-atl2-az1",)
    notes = zone_id_notes(plan([local, NORMAL]))
    assert any("use1-atl2-az1" in n and "Local Zone" in n for n in notes)


@pytest.mark.parametrize(
    ("prices", "chosen"),
    [
        ((20.0, 21.0), 20.0),  # zones within 25% of each other: the cheapest is a normal price
        ((13.0, 21.0, 22.0), 21.0),  # one far below two others: set aside
        ((13.0,), 13.0),  # a single zone has nothing to be an outlier against
    ],
)
def test_outlier_rule(prices: tuple[float, ...], chosen: float) -> None:
    offers = [offer(f"use1-az{i}", p) for i, p in enumerate(prices)]
    w = plan(offers).winner
    assert w is not None and w.price_usd_per_hour == chosen


def test_an_allowed_outlier_is_pinned_in_the_export() -> None:
    p = plan([LOCAL, NORMAL], allow_zone_outliers=True)
    w = p.winner
    assert (
        w is not None
        and w.price_usd_per_hour == 13.0
        and w.zone_pinned
        and w.zone == "use1-atl2-az1"
    )
    doc = skypilot_task(p)
    validate_skypilot(doc)
    # an AWS zone ID is not a zone name SkyPilot can take: the region is named, and a note says
    # which zone the price is from and how to find its name in the user's account
    assert doc["resources"]["ordered"][0]["infra"] == "aws/us-east-1"
    (note,) = zone_id_notes(p)
    assert "use1-atl2-az1" in note and "--zone-ids use1-atl2-az1" in note and "$13.00/h" in note


def test_a_zone_name_is_pinned_in_infra() -> None:
    named = replace(LOCAL, cloud="gcp", region="us-central1", zone="us-central1-a")
    other = replace(NORMAL, cloud="gcp", region="us-central1", zone="us-central1-b")
    p = plan([named, other], allow_zone_outliers=True)
    assert p.winner is not None and p.winner.zone == "us-central1-a"
    assert skypilot_task(p)["resources"]["ordered"][0]["infra"] == "gcp/us-central1/us-central1-a"
    assert zone_id_notes(p) == []


def test_k8s_requests_cpu_memory_and_efa_for_multi_node_aws() -> None:
    p = plan([NORMAL], objective="time")
    assert p.winner is not None and p.winner.nodes == 2
    doc = k8s_manifest(p)
    container = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    res = container["resources"]
    assert res["limits"]["vpc.amazonaws.com/efa"] == "32"  # p5: without EFA, NCCL falls back to TCP
    # 80% of the chosen p5.48xlarge (192 vCPU, 2 TiB): fits its allocatable share
    assert res["requests"]["cpu"] == "153" and res["requests"]["memory"] == "1638Gi"
    assert res["requests"]["nvidia.com/gpu"] == "8"


def test_spot_on_a_scarce_gpu_carries_a_capacity_note() -> None:
    from gpuwise.planner.startup import load_startup_defaults

    request = PlanRequest(max_nodes=1, billings=("spot",), spot_mtbf_hours=1e6)
    p = plan_offers(
        [NORMAL],
        ToyModel(),
        request,
        spot=load_spot_defaults(),
        reserved={},
        startup=load_startup_defaults(),
    )
    assert p.winner is not None and "scarce" in (p.winner.capacity_note or "")


def test_offers_marks_the_zones_plan_sets_aside(cli) -> None:  # type: ignore[no-untyped-def]
    # the bundled catalog's p5.48xlarge in us-east-1: the Atlanta Local Zone is set aside by plan
    r = cli("offers", "--gpu", "H100", "--spot", "--region", "us-east-1", "--json")
    assert r.code == 0, r.stderr
    rows = {
        o["zone"]: o["zone_outlier"]
        for o in r.json()["offers"]
        if o["instance_type"] == "p5.48xlarge"
    }
    assert rows["use1-atl2-az1"] is True
    assert not any(flag for zone, flag in rows.items() if zone != "use1-atl2-az1")
    table = cli("offers", "--gpu", "H100", "--spot", "--region", "us-east-1").stdout
    assert "use1-atl2-az1 ⚑" in table and "zone outlier" in table


def test_plan_flags_undated_prices_per_row(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "plan",
        "--model",
        "gpt2",
        "--task",
        "lora",
        "--tokens",
        "20M",
        "--cloud",
        "azure",
        "--limit",
        "2",
    )
    assert r.code == 0, r.stderr
    assert "price undated" in r.stdout and "some prices have no date" in r.stderr
