"""`plan --spot-mtbf auto --runs DIR`: interruption rates observed in your own run records, per
cloud, region and instance type, with the history behind them; too little history keeps the
bundled figure and says so."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gpuwise.base.recipe import RunRecord, load_plan_file
from gpuwise.planner import SPOT_MIN_PREEMPTIONS, load_spot_defaults, spot_history
from gpuwise.planner.spot_observed import observed_sites, with_observed
from tests.base.runs_data import PLAN_ARGS, record_for, write_record
from tests.base.test_recipe import PLAN


def _attempt(i: int, hours: int, preempted: bool, **site: Any) -> RunRecord:
    """Attempt ``i`` of one run: ``hours`` long from day ``i``'s midnight."""
    return record_for(
        PLAN,
        "job",
        attempt=i,
        pilot=False,
        outcome="preempted" if preempted else "done",
        preemptions=int(preempted),
        started=f"2026-11-{10 + i:02d}T00:00:00Z",
        ended=f"2026-11-{10 + i:02d}T{hours:02d}:00:00Z",
        **site,
    )


A = {"cloud": "gcp", "region": "us-central1", "instance_type": "a3-highgpu-8g", "nodes": 2}
B = {"cloud": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge", "nodes": 1}


def test_node_hours_over_preemptions_per_site() -> None:
    records = [
        *(_attempt(i, 10, preempted=i < 3, **A) for i in range(4)),  # 80 node-hours, 3 preempted
        _attempt(5, 5, preempted=True, **B),  # one preemption: too little history
        _attempt(6, 9, preempted=True, **{**B, "capacity_type": "on-demand"}),  # not spot
        _attempt(7, 9, preempted=True, **{**B, "region": None}),  # site unknown
        record_for(PLAN, "live", outcome="running", ended=None, **B),  # still running
    ]
    a, b = sorted(spot_history(records), key=lambda s: s.cloud != "gcp")
    assert (a.node_hours, a.preemptions, a.attempts) == (80.0, 3, 4)
    assert a.enough and a.mtbf_hours == pytest.approx(80 / 3)
    assert (
        "observed MTBF 26.7 h from 3 preemptions in 80.0 node-hours of 4 run attempts" in a.source
    )
    assert (b.node_hours, b.preemptions, b.enough) == (5.0, 1, False)
    assert "too little history" in b.source and f"needs {SPOT_MIN_PREEMPTIONS}" in b.source
    [used] = observed_sites((a, b))
    assert used[:4] == ("gcp", "us-central1", "a3-highgpu-8g", pytest.approx(80 / 3))


def test_an_observed_site_gets_its_own_rate() -> None:
    spot = load_spot_defaults()
    site = ("gcp", "us-central1", "a3-highgpu-8g", 40.0, "observed")
    risk = with_observed(spot, [site]).for_instance(*site[:3])
    assert risk.confidence == "observed" and risk.source == "observed"
    assert (risk.region, risk.instance_type) == site[1:3]
    assert risk.monthly_interruption_probability > 0.99  # 730 h holds ~18 interruptions
    # every other site keeps the bundled figure
    other = with_observed(spot, [site]).for_instance("gcp", "europe-west4", "a3-highgpu-8g")
    assert other == spot.for_instance("gcp", "europe-west4", "a3-highgpu-8g")
    assert not math.isclose(other.rate_per_node_hour, 1 / 40.0)


@pytest.mark.slow  # two plans in one process: about 4 s
def test_plan_prices_the_observed_site_and_says_so_first(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert cli(*PLAN_ARGS, "--billing", "spot", "--save", tmp_path / "p.json").code == 0
    r = load_plan_file(tmp_path / "p.json").recipe
    site = {"cloud": r.cloud, "region": r.region, "instance_type": r.instance_type, "nodes": 1}
    for i in range(3):
        write_record(tmp_path / "runs", _attempt(i, 20, preempted=True, **site))
    res = cli(
        *PLAN_ARGS,
        "--billing",
        "spot",
        "--spot-mtbf",
        "auto",
        "--runs",
        tmp_path / "runs",
        "--limit",
        "0",
        "--json",
    )
    assert res.code == 0, res.stderr
    doc = res.json()
    [seen] = doc["spot_history"]["sites"]
    assert seen["used"] is True and seen["mtbf_hours"] == pytest.approx(20.0)
    priced = [
        o
        for o in doc["options"]
        if (o["cloud"], o["instance_type"], o["billing"]) == (r.cloud, r.instance_type, "spot")
        and r.region in o["regions"]
    ]
    assert priced and all("observed MTBF 20.0 h" in o["interruption_source"] for o in priced)
    # priced at 1 / 20 h per node (the bundled figure is ~1 / 3,000 h): about hours ÷ 20
    for o in priced:
        assert o["expected_interruptions"] == pytest.approx(o["failure_free_hours"] / 20, rel=0.01)
    others = [o for o in doc["options"] if r.region not in o["regions"]]
    assert others and not any("observed" in o["interruption_source"] for o in others)
    text = cli(*PLAN_ARGS, "--spot-mtbf", "auto", "--runs", tmp_path / "runs").stdout
    assert text.startswith("Spot interruptions (--spot-mtbf auto): observed for 1 of 1 site")


@pytest.mark.parametrize(
    "args, message",
    [
        (("--spot-mtbf", "auto"), "--spot-mtbf auto needs run history"),
        (("--runs", "."), "--runs is read by --spot-mtbf auto"),
    ],
)
def test_auto_and_runs_go_together(cli, args: tuple[str, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    r = cli(*PLAN_ARGS, *args)
    assert r.code == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
