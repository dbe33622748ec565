"""The report over a replayed 24-hour trace gives the known hours, dollars and advice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwise.catalog import Offer
from gpuwise.monitor.fake import FakeGpuReader, parse_trace
from gpuwise.monitor.history import replay_history
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.report import build_report, report_to_dict
from tests.monitor.conftest import day_trace

END = 1_800_000_000.0


def _offer(gpu: str, usd_per_hour: float, count: float = 1, instance: str = "x") -> Offer:
    return Offer(
        "testcloud",
        "r1",
        None,
        instance,
        gpu,
        count,
        None,
        8,
        64,
        usd_per_hour,
        None,
        "x86_64",
        "test",
        "2026-11",
    )


# A tiny catalog: L4 (24 GiB) at $0.80, A100-80GB at $2.50, H200 (141 GiB) at $5.00 per GPU-hour.
OFFERS = (
    _offer("L4", 0.80, instance="l4-1"),
    _offer("A100-80GB", 2.50, instance="a100-1"),
    _offer("H200", 40.0, 8, instance="h200-8"),
)


def _report(
    trace: dict[str, Any], price: float | None = 3.0, offers: tuple[Offer, ...] = OFFERS
) -> Any:
    reader = FakeGpuReader(parse_trace(trace, "test"))
    return build_report(
        replay_history(reader, 86400, END), PriceBook(price_usd_per_hour=price, offers=offers)
    )


def test_known_hours_and_dollars() -> None:
    r = _report(day_trace())
    g0, g1 = r.gpus
    assert (g0.allocated_hours, g0.active_hours, g0.idle_hours) == pytest.approx((24, 8, 16))
    assert (g0.cost_usd, g0.wasted_usd) == pytest.approx((72, 48))
    assert (g1.allocated_hours, g1.active_hours, g1.idle_hours) == pytest.approx((24, 24, 0))
    assert (g1.cost_usd, g1.wasted_usd) == pytest.approx((72, 0))
    assert (r.allocated_hours, r.idle_hours, r.cost_usd, r.wasted_usd) == pytest.approx(
        (48, 16, 144, 48)
    )
    assert r.waste_fraction == pytest.approx(1 / 3)
    assert g0.peak_memory_fraction == pytest.approx(60000 / 81559)
    assert g0.memory_headroom_gib == pytest.approx((81559 - 60000) / 1024)
    assert g0.efficiency == pytest.approx(1 / 3)


def test_idle_stretches_say_who_held_the_gpu() -> None:
    g0 = _report(day_trace()).gpus[0]
    assert [(s.hours, s.held_by) for s in g0.idle_stretches] == [(4.0, ("nb/jupyter",)), (12.0, ())]
    assert g0.idle_stretches[0].start_s == END - 86400 + 8 * 3600


def test_workloads_split_hours_and_cost() -> None:
    r = _report(day_trace())
    w = {u.workload: u for u in r.workloads}
    # the 12 h nothing ran on GPU 0 is a row of its own, so the table adds up to the GPUs
    assert set(w) == {"train/llm", "nb/jupyter", "small/job", "(unallocated)"}
    assert (w["(unallocated)"].allocated_hours, w["(unallocated)"].wasted_usd) == pytest.approx(
        (12, 36)
    )
    for field in ("allocated_hours", "active_hours", "idle_hours", "cost_usd", "wasted_usd"):
        assert sum(getattr(u, field) for u in r.workloads) == pytest.approx(getattr(r, field))
    assert (
        w["nb/jupyter"].allocated_hours,
        w["nb/jupyter"].idle_hours,
        w["nb/jupyter"].wasted_usd,
    ) == pytest.approx((4, 4, 12))
    assert (
        w["train/llm"].active_hours,
        w["train/llm"].cost_usd,
        w["train/llm"].wasted_usd,
    ) == pytest.approx((8, 24, 0))


def test_right_sizing_in_dollars() -> None:
    recs = {(r.gpu_index, r.action): r for r in _report(day_trace()).recommendations}
    # GPU 1: peak 10,000 MiB (12 %) at 10 % SM-active → the cheapest GPU holding 9.8 GiB + 15 % is the L4
    down = recs[(1, "downsize")]
    assert down.target is not None and down.target.startswith("L4")
    assert down.saving_usd_per_month == pytest.approx((3.0 - 0.80) * 730)
    # ... or a MIG slice of the H100: 9.8 GiB × 1.15 needs the 1g.20gb profile, 1/7 of the GPU
    mig = recs[(1, "mig")]
    assert mig.target == "1g.20gb" and mig.saving_usd_per_month == pytest.approx(3.0 * 6 / 7 * 730)
    # GPU 0: the notebook held it idle for 4 h of 24 → stop it; saves 4/24 of a month of GPU-hours
    stop = recs[(0, "stop-idle-workload")]
    assert "nb/jupyter" in stop.reason and stop.saving_usd_per_month == pytest.approx(
        4 / 24 * 730 * 3.0
    )
    assert (0, "downsize") not in recs  # 74 % peak memory: no smaller GPU
    # sorted by saving, largest first
    savings = [r.saving_usd_per_month or 0 for r in _report(day_trace()).recommendations]
    assert savings == sorted(savings, reverse=True)


def test_full_memory_asks_for_a_bigger_gpu_or_the_estimator() -> None:
    trace = day_trace()
    trace["frames"] = [
        {
            "repeat": 24,
            "gpus": [
                {"util": 99, "sm_active": 0.7, "memory_used_mib": 78000},
                {"util": 99, "sm_active": 0.7, "memory_used_mib": 1000},
            ],
        }
    ]
    up = [r for r in _report(trace).recommendations if r.action == "upsize"]
    assert [r.gpu_index for r in up] == [0]
    assert up[0].target is not None and up[0].target.startswith("H200")
    assert "gpuwise estimate" in up[0].reason and up[0].saving_usd_per_month == 0.0


def test_unused_gpu_is_released_with_its_whole_cost() -> None:
    trace = day_trace()
    trace["frames"] = [{"repeat": 24, "gpus": [{"util": 0}, {"util": 0}]}]
    recs = _report(trace).recommendations
    assert [r.action for r in recs] == ["release", "release"]
    assert recs[0].saving_usd_per_month == pytest.approx(3.0 * 730)


def test_unknown_price_leaves_dollars_empty_not_zero() -> None:
    """No instance type anywhere: the hours are unpriced and counted, never priced at the
    catalog's cheapest offer of the model (the L4 here would be $0.80)."""
    trace = day_trace()
    r = _report(trace, price=None)
    assert r.cost_usd is None and r.wasted_usd is None and r.gpus[0].cost_usd is None
    assert r.gpus[0].price_source.startswith("unknown instance")
    assert r.idle_hours == pytest.approx(16)
    assert (r.unpriced_hours, r.gpus[0].unpriced_hours) == pytest.approx((48, 24))
    assert sum(w.unpriced_hours for w in r.workloads) == pytest.approx(48)


def test_spot_setting_prices_the_spot_offer_and_bogus_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GPUWISE_CAPACITY_TYPE=spot prices the instance's spot offer, as the exporter does."""
    from dataclasses import replace

    from gpuwise.errors import InputError

    spot = replace(_offer("A100-80GB", 2.50, instance="a100-1"), spot_usd_per_hour=0.75)
    monkeypatch.setenv("GPUWISE_INSTANCE_TYPE", "a100-1")
    monkeypatch.setenv("GPUWISE_CAPACITY_TYPE", "spot")
    r = _report(day_trace(), price=None, offers=(spot,))
    assert r.gpus[0].usd_per_hour == pytest.approx(0.75) and "spot" in r.gpus[0].price_source
    monkeypatch.setenv("GPUWISE_CAPACITY_TYPE", "bogus")
    with pytest.raises(InputError, match="GPUWISE_CAPACITY_TYPE 'bogus'"):
        _report(day_trace(), price=None, offers=(spot,))


def test_catalog_price_of_the_instance_type() -> None:
    reader = FakeGpuReader(parse_trace(day_trace(), "test"))
    prices = PriceBook(instance_type="a100-1", offers=OFFERS)
    r = build_report(replay_history(reader, 86400, END), prices)
    assert r.gpus[0].usd_per_hour == 2.50 and "a100-1" in r.gpus[0].price_source


@pytest.mark.parametrize(
    ("env", "kwargs", "needle"),
    [
        # a bad environment value used to be reported as "GPU price per hour", with no hint where it came from
        (
            {"GPUWISE_GPU_PRICE_USD_PER_HOUR": "abc"},
            {},
            "cannot read GPUWISE_GPU_PRICE_USD_PER_HOUR 'abc'",
        ),
        ({}, {"price_usd_per_hour": "abc"}, "cannot read --price-usd-per-hour 'abc'"),  # the flag
        (
            {"GPUWISE_INSTANCE_TYPE": "bogus"},
            {},
            "'bogus' (from GPUWISE_INSTANCE_TYPE) is not in the catalog",
        ),
        ({}, {"instance_type": "bogus"}, "instance type 'bogus' is not in the catalog"),  # the flag
    ],
)
def test_bad_price_settings_name_their_source(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], kwargs: dict[str, str], needle: str
) -> None:
    from gpuwise.errors import InputError

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(InputError) as exc:
        PriceBook(offers=OFFERS, **kwargs).price("A100-80GB")  # type: ignore[arg-type]
    assert needle in exc.value.message


def test_json_document_has_the_contract_fields() -> None:
    doc = report_to_dict(_report(day_trace()))
    json.dumps(doc, allow_nan=False)
    for g in doc["gpus"]:  # type: ignore[union-attr]
        assert {
            "allocated_hours",
            "active_hours",
            "idle_hours",
            "cost_usd",
            "wasted_usd",
            "peak_memory_fraction",
        } <= set(g)
    for r in doc["recommendations"]:  # type: ignore[union-attr]
        assert {"action", "reason", "saving_usd_per_month"} <= set(r)


@pytest.mark.slow
def test_cli_report_over_a_replayed_day(cli: Any, day_trace_file: Path) -> None:
    r = cli(
        "report", "--fake", day_trace_file, "--since", "24h", "--price-usd-per-hour", "3", "--json"
    )
    assert r.code == 0, r.stderr
    doc = r.json()
    assert [g["idle_hours"] for g in doc["gpus"]] == pytest.approx([16, 0])
    assert [g["wasted_usd"] for g in doc["gpus"]] == pytest.approx([48, 0])
    assert doc["wasted_usd"] == pytest.approx(48)


def test_example_trace_gives_its_documented_answer(cli: Any) -> None:
    example = Path(__file__).resolve().parents[2] / "examples/monitor/day-trace.yaml"
    doc = cli(
        "report", "--fake", example, "--since", "24h", "--price-usd-per-hour", "3", "--json"
    ).json()
    assert (doc["allocated_hours"], doc["active_hours"], doc["idle_hours"]) == pytest.approx(
        (24, 8, 16)
    )
    assert (doc["cost_usd"], doc["wasted_usd"]) == pytest.approx((72, 48))


def _arch_offer(
    cloud: str, region: str, instance: str, gpu: str, usd: float, count: float, arch: str
) -> Offer:
    from dataclasses import replace

    return replace(
        _offer(gpu, usd, count, instance), cloud=cloud, region=region, arch=arch, gpu_count=count
    )


def test_advice_stays_in_the_cloud_and_cpu_architecture_and_checks_compute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GPU 1 of the day trace (10 GiB peak, SM-active 10 %) on an x86 AWS p5: the downsize is an
    AWS x86 L4 (121 TFLOP/s hold the 99 TFLOP/s of work done), not the arm64 g5g's T4 nor the
    cheaper L4 in another cloud, nor an A10G (70 TFLOP/s: too slow for 10 % of an H100)."""
    offers = (
        _arch_offer("aws", "us-east-1", "p5.48xlarge", "H100", 55.04, 8, "x86_64"),
        _arch_offer("aws", "us-east-1", "g5g.xlarge", "T4", 0.42, 1, "arm64"),
        _arch_offer("aws", "us-east-1", "g5.xlarge", "A10G", 1.01, 1, "x86_64"),
        _arch_offer("aws", "us-east-1", "g6.xlarge", "L4", 0.80, 1, "x86_64"),
        _arch_offer("lambda", "asia-northeast-1", "gpu_1x_l4", "L4", 0.50, 1, "x86_64"),
    )
    monkeypatch.setenv("GPUWISE_INSTANCE_TYPE", "p5.48xlarge")
    monkeypatch.setenv("GPUWISE_CLOUD", "aws")
    r = _report(day_trace(), price=None, offers=offers)
    assert (r.gpus[1].cloud, r.gpus[1].cpu_arch) == ("aws", "x86_64")
    down = next(x for x in r.recommendations if x.action == "downsize")
    assert down.target == "L4 on aws us-east-1 g6.xlarge", down
    assert down.saving_usd_per_month == pytest.approx((6.88 - 0.80) * 730)


def test_gpu_time_with_nothing_running_gets_an_action() -> None:
    """GPU 0 of the day trace sat rented 12 h with nothing on it ($36 at $3/h, the biggest waste
    item): a scale-to-zero recommendation with its monthly saving."""
    r = _report(day_trace())
    rec = next(x for x in r.recommendations if x.action == "scale-to-zero")
    assert rec.gpu_index == 0 and "12.0 h" in rec.reason
    assert rec.saving_usd_per_month == pytest.approx(12 * 3.0 * 730 / 24)
