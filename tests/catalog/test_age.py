"""Price age: `price_age` over the offers used, and every price-bearing command's line, warning and JSON."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gpuwise.catalog import OFFER_COLUMNS
from gpuwise.catalog.age import parse_as_of, price_age
from gpuwise.catalog.offer import Offer


def offer(as_of: str, source: str = "s") -> Offer:
    return Offer("x", "r", None, "t", "H100", 8, 80, 1, 1, 10.0, None, "x86_64", source, as_of)


def test_parse_as_of() -> None:
    assert parse_as_of("2026-11") == dt.date(2026, 11, 1)
    assert parse_as_of("2026-11-24") == dt.date(2026, 11, 24)
    assert parse_as_of("2026-11-24T10:00:00Z") == dt.date(2026, 11, 24)
    assert parse_as_of("unknown") is None
    assert parse_as_of("2026-13") is None


def test_price_age_is_the_oldest_price_used() -> None:
    today = dt.date(2026, 11, 24)
    age = price_age([offer("2026-11-20", "a"), offer("2026-09", "b")], today=today)
    assert (age.oldest_as_of, age.newest_as_of, age.age_days) == ("2026-09", "2026-11-20", 84)
    assert age.stale and "84 days old" in (age.warning() or "")
    assert age.to_dict()["prices_as_of"] == "2026-09" and age.to_dict()["price_sources"] == [
        "a",
        "b",
    ]
    fresh = price_age([offer("2026-11-20")], today=today)
    assert not fresh.stale and fresh.warning() is None and "4 days old" in fresh.line()
    assert price_age([offer("2026-11-20")], today=today, max_age_days=3).stale
    undated = price_age([offer("unknown")], today=today)
    assert undated.stale and undated.age_days is None
    assert not price_age([], today=today).stale


def _catalog(tmp_path: Path, as_of: str) -> Path:
    path = tmp_path / "old.csv"
    path.write_text(
        ",".join(OFFER_COLUMNS) + f"\nonprem,dc1,,box1,H100,8,80,64,512,20,8,x86_64,quote,{as_of}\n"
    )
    return path


def test_offers_and_gpus_show_the_age_and_warn_when_old(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    old = _catalog(tmp_path, "2020-01-01")
    r = cli("offers", "--catalog", old)
    assert r.code == 0
    assert "Prices as of 2020-01-01" in r.stdout and "days old" in r.stdout
    assert "warning: prices are" in r.stderr and "catalog update --fetch" in r.stderr
    doc = cli("offers", "--catalog", old, "--json").json()
    assert (
        doc["prices_as_of"] == "2020-01-01"
        and doc["prices_stale"] is True
        and doc["prices_age_days"] > 2000
    )
    assert cli("offers", "--catalog", old, "--max-price-age", "100000d").stderr == ""
    g = cli("gpus", "--catalog", old, "--json")
    assert g.json()["prices_as_of"] == "2020-01-01" and "warning" in g.stderr
    assert "Prices as of 2020-01-01" in cli("gpus", "--catalog", old).stdout
    fresh = _catalog(tmp_path, dt.date.today().isoformat())
    r = cli("offers", "--catalog", fresh)
    assert "0 days old" in r.stdout and r.stderr == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["offers", "--gpu", ""], "--gpu is empty"),
        (["offers", "--gpu", "  "], "--gpu is empty"),
        (["offers", "--max-price-age", "soon"], "cannot read --max-price-age"),
        (["gpus", "--max-price-age", "-3d"], "--max-price-age"),
        (["offers", "--max-price-age", "30"], "--max-price-age"),  # durations carry a unit
    ],
)
def test_bad_input(cli, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    r = cli(*args)
    assert r.code == 2 and message in r.stderr


def test_offers_spot_shows_spot_price_per_gpu_hour(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("offers", "--gpu", "H100", "--count", "8", "--spot", "--limit", "3")
    assert r.code == 0 and "spot $/GPU-h" in r.stdout
    doc = cli("offers", "--gpu", "H100", "--count", "8", "--spot", "--limit", "3", "--json").json()
    first = doc["offers"][0]
    per_gpu = f"${first['spot_usd_per_gpu_hour']:,.2f}"
    row = next(line for line in r.stdout.splitlines() if first["instance_type"] in line)
    assert per_gpu in row
    assert "spot $/GPU-h" not in cli("offers", "--gpu", "H100", "--limit", "3").stdout


def test_plan_fleet_and_report_carry_the_price_age(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    old = _catalog(tmp_path, "2020-01-01")
    plan = cli(
        "plan", "--model", "gpt2", "--task", "lora", "--tokens", "20M", "--catalog", old, "--json"
    )
    assert plan.code == 0, plan.stderr
    assert plan.json()["prices_as_of"] == "2020-01-01" and "warning: prices are" in plan.stderr
    text = cli("plan", "--model", "gpt2", "--task", "lora", "--tokens", "20M", "--limit", "1")
    # the bundled snapshot's month, or "unknown" where the option shown is Azure's (undated: the
    # older upstream file's date is not known)
    assert "Prices as of 2026-11" in text.stdout or "Prices as of unknown" in text.stdout
    fleet = cli(
        "fleet",
        "--profile",
        "--profile-gpus",
        "H100",
        "--profile-hours",
        "168",
        "--catalog",
        old,
        "--json",
    )
    assert fleet.code == 0, fleet.stderr
    assert fleet.json()["prices_as_of"] == "2020-01-01" and fleet.json()["prices_stale"] is True
    report = cli("report", "--fake", "idle", "--json")
    assert report.code == 0, report.stderr
    assert report.json()["prices_as_of"] == "2026-11"
    configured = cli("report", "--fake", "idle", "--price-usd-per-hour", "2", "--json").json()
    assert "prices_as_of" not in configured  # the user's own price: no catalog age to report
    assert (
        cli(
            "plan", "--model", "gpt2", "--task", "lora", "--tokens", "20M", "--max-price-age", "x"
        ).code
        == 2
    )
