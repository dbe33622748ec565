"""`gpuwise catalog update`: validated first, atomic, previous copy kept, user edits never overwritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwise.catalog import OFFER_COLUMNS
from gpuwise.catalog.sources import store_path

HEADER = ",".join(OFFER_COLUMNS)


def write(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


def test_update_from_csv_reports_added_changed_dropped(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first = write(
        tmp_path / "a.csv",
        [
            "onprem,dc1,,box1,A100,8,40,64,512,10,,x86_64,s,2026-11",
            "onprem,dc1,,box2,H100,8,80,64,512,20,,x86_64,s,2026-11",
        ],
    )
    r = cli("catalog", "update", "--from-csv", first, "--json")
    assert r.code == 0, r.stderr
    assert r.json()["clouds"] == [
        {"cloud": "onprem", "added": 2, "changed": 0, "dropped": 0, "unchanged": 0}
    ]
    second = write(
        tmp_path / "b.csv",
        [
            "onprem,dc1,,box1,A100,8,40,64,512,11,,x86_64,s,2026-12",
            "onprem,dc1,,box3,L4,1,24,8,32,1,,x86_64,s,2026-12",
        ],
    )
    r = cli("catalog", "update", "--from-csv", second, "--replace", "--json")
    assert r.json()["mode"] == "replace"
    assert r.json()["clouds"] == [
        {"cloud": "onprem", "added": 1, "changed": 1, "dropped": 1, "unchanged": 0}
    ]
    assert Path(r.json()["previous_copy"]).read_text().count("box2") == 1  # previous store kept
    info = cli("catalog", "info", "--json").json()
    assert "onprem" in info["clouds"] and "aws" in info["clouds"]
    offers = cli("offers", "--cloud", "onprem", "--json").json()["offers"]
    assert sorted(o["instance_type"] for o in offers) == ["box1", "box3"]


def test_from_csv_merges_by_default(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from gpuwise.catalog import load_catalog

    aws_before = [o for o in load_catalog().offers if o.cloud == "aws"]
    one = write(
        tmp_path / "one.csv",
        ["aws,us-east-1,,my-negotiated-box,H100,8,80,192,2048,40,,x86_64,quote,2026-11"],
    )
    r = cli("catalog", "update", "--from-csv", one, "--json")
    assert r.code == 0, r.stderr
    assert r.json()["mode"] == "merge"
    assert r.json()["clouds"] == [
        {"cloud": "aws", "added": 1, "changed": 0, "dropped": 0, "unchanged": len(aws_before)}
    ]
    aws_after = [o for o in load_catalog().offers if o.cloud == "aws"]
    assert (
        len(aws_after) == len(aws_before) + 1
    )  # one row added; the bundled AWS rows are all still there
    # --replace: the file's clouds are replaced whole
    r = cli("catalog", "update", "--from-csv", one, "--replace", "--json")
    assert r.json()["clouds"][0]["dropped"] == len(aws_before)
    assert len(cli("offers", "--cloud", "aws", "--limit", "0", "--json").json()["offers"]) == 1


@pytest.mark.parametrize("price", ["0", "0.0", "$0", "-1", "NaN", "inf"])
def test_bad_prices_are_refused_naming_the_row(cli, tmp_path: Path, price: str) -> None:  # type: ignore[no-untyped-def]
    bad = write(
        tmp_path / "bad.csv",
        [
            "onprem,dc1,,box1,A100,8,40,64,512,10,,x86_64,s,2026-11",
            f"onprem,dc1,,box2,A100,8,40,64,512,{price},,x86_64,s,2026-11",
        ],
    )
    r = cli("catalog", "update", "--from-csv", bad)
    assert r.code == 2
    assert "bad.csv, row 3, column on_demand_usd_per_hour" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not store_path().exists()  # a partly valid file is refused whole: nothing imported


def test_an_unwritable_store_exits_2_with_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = write(tmp_path / "a.csv", ["onprem,dc1,,box1,A100,8,40,64,512,10,,x86_64,s,2026-11"])
    folder = store_path().parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("a file where the store folder should be")  # unwritable even for root
    r = cli("catalog", "update", "--from-csv", src)
    assert r.code == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: cannot write the catalog store") and "To fix" in line
    assert folder.read_text() == "a file where the store folder should be"


def test_bad_file_imports_nothing(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = write(tmp_path / "good.csv", ["onprem,dc1,,box1,A100,8,40,64,512,10,,x86_64,s,2026-11"])
    assert cli("catalog", "update", "--from-csv", good).code == 0
    before = store_path().read_bytes()
    bad = write(
        tmp_path / "bad.csv",
        [
            "onprem,dc1,,box1,A100,8,40,64,512,10,,x86_64,s,2026-11",
            "onprem,dc1,,box2,A100,8,40,64,512,NaN,,x86_64,s,2026-11",
        ],
    )
    r = cli("catalog", "update", "--from-csv", bad)
    assert r.code == 2
    assert "bad.csv, row 3, column on_demand_usd_per_hour" in r.stderr
    assert store_path().read_bytes() == before


def test_a_hand_edited_store_is_never_silently_overwritten(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = write(tmp_path / "a.csv", ["onprem,dc1,,box1,A100,8,40,64,512,10,,x86_64,s,2026-11"])
    assert cli("catalog", "update", "--from-csv", src).code == 0
    store = store_path()
    store.write_text(
        store.read_text().replace(",10.0,", ",9.0,")
    )  # the user negotiates a better price
    edited = store.read_text()
    assert ",9.0," in edited
    r = cli("catalog", "update", "--from-csv", src)
    assert r.code == 2 and "edited by hand" in r.stderr
    assert store.read_text() == edited
    r = cli("catalog", "update", "--from-csv", src, "--force", "--json")
    assert r.code == 0
    assert Path(r.json()["edited_backup"]).read_text() == edited


def test_update_from_a_skypilot_folder(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    vms = tmp_path / "catalogs" / "v8" / "nebius" / "vms.csv"
    vms.parent.mkdir(parents=True)
    vms.write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\r\n"
        "gpu-h100-sxm_1gpu-16vcpu-200gb,H100,1,16,200,2.50,eu-north1,,1.00\r\n"
    )
    r = cli("catalog", "update", "--from-skypilot", tmp_path / "catalogs", "--json")
    assert r.code == 0, r.stderr
    (diff,) = r.json()["clouds"]
    assert diff["cloud"] == "nebius" and diff["changed"] == 1 and diff["dropped"] == 20
    (o,) = cli("offers", "--cloud", "nebius", "--json").json()["offers"]
    assert o["on_demand_usd_per_hour"] == 2.5


def test_update_needs_exactly_one_source(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("catalog", "update")
    assert r.code == 2 and "exactly one of" in r.stderr
    r = cli("catalog", "update", "--from-skypilot", "x", "--replace")
    assert r.code == 2 and "--replace goes with --from-csv" in r.stderr
