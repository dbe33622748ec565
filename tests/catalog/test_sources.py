"""Catalog sources and their layering: bundled snapshot, SkyPilot folder, user CSV, user store."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuwise.catalog import OFFER_COLUMNS, load_catalog, offers_to_csv, parse_offer_csv
from gpuwise.catalog.sources import BundledSnapshot
from gpuwise.errors import CatalogError

# The SkyPilot catalog extract the bundled snapshot is built from, recorded (gzipped) with its
# SOURCE.md: repository, license, blob ids and date.
EXTRACT = Path(__file__).resolve().parent / "fixtures" / "skypilot-extract"
AWS_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch"


def write_skypilot(root: Path, version: str, cloud: str, rows: list[str]) -> Path:
    path = root / version / cloud / "vms.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([AWS_HEADER, *rows]) + "\n")
    return path


def test_bundled_snapshot_covers_every_cloud_with_sane_rows() -> None:
    offers, _, as_of = BundledSnapshot().read()
    assert as_of == "2026-11"
    assert {o.cloud for o in offers} == {"aws", "azure", "gcp", "lambda", "nebius"}
    for o in offers:
        assert o.gpu_count > 0
        assert o.on_demand_usd_per_hour is not None or o.spot_usd_per_hour is not None
        assert all(p is None or p > 0 for p in (o.on_demand_usd_per_hour, o.spot_usd_per_hour))
    assert len({o.key for o in offers}) == len(offers)


def test_bundled_snapshot_matches_a_rebuild_from_the_recorded_extract() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "build_snapshot", Path(__file__).parents[2] / "scripts" / "build_snapshot.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data, manifest = module.build(EXTRACT)
    shipped = Path(__file__).parents[2] / "src" / "gpuwise" / "catalog" / "data"
    assert gzip.decompress(data) == gzip.decompress((shipped / "offers.csv.gz").read_bytes())
    assert manifest == json.loads((shipped / "manifest.json").read_text())


@pytest.mark.parametrize("cloud", ["aws", "azure", "gcp", "lambda", "nebius"])
def test_every_recorded_file_reads_as_a_catalog(cloud: str, tmp_path: Path) -> None:
    path = tmp_path / f"{cloud}.csv"  # a user's --catalog file is plain CSV
    path.write_bytes(gzip.decompress((EXTRACT / f"{cloud}.csv.gz").read_bytes()))
    cat = load_catalog([path])
    assert cat.offers and {o.cloud for o in cat.offers} == {cloud}


def test_offer_csv_round_trips() -> None:
    offers = load_catalog().offers[:50]
    assert tuple(parse_offer_csv(offers_to_csv(offers), "x", source=None)) == tuple(
        o for o in offers
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "aws,us-east-1,,p5,H100,8,80,192,2048,abc,,x86_64,s,2026",
            "column on_demand_usd_per_hour: 'abc' is not a price",
        ),
        ("aws,us-east-1,,p5,H100,8,80,192,2048,-1,,x86_64,s,2026", "'-1' is not a valid price"),
        (
            "aws,us-east-1,,p5,H100,0,80,192,2048,1,,x86_64,s,2026",
            "column gpu_count: '0' must be a positive number",
        ),
        ("aws,,,p5,H100,8,80,192,2048,1,,x86_64,s,2026", "column region: empty"),
    ],
)
def test_user_csv_errors_name_row_and_column(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(",".join(OFFER_COLUMNS) + "\n" + body + "\n")
    with pytest.raises(CatalogError, match=message) as info:
        load_catalog([path])
    assert f"{path}, row 2" in str(info.value)


def test_duplicate_rows_are_rejected(tmp_path: Path) -> None:
    row = "onprem,dc1,,box,A100-80GB,8,80,64,512,12.5,,x86_64,s,2026"
    path = tmp_path / "mine.csv"
    path.write_text(",".join(OFFER_COLUMNS) + f"\n{row}\n{row}\n")
    with pytest.raises(CatalogError, match="row 3: duplicate of row 2"):
        load_catalog([path])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"\xff\xfe\x00bad latin \xe9", "not UTF-8"),
        (b"cloud,region\naws,us\n", "missing column"),
    ],
)
def test_unreadable_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(CatalogError, match=message):
        load_catalog([path])


def test_private_prices_for_an_onprem_cloud(tmp_path: Path) -> None:
    path = tmp_path / "onprem.csv"
    path.write_text(
        "cloud,region,instance_type,gpu,gpu_count,on_demand_usd_per_hour\n"
        "onprem,dc1,dgx-a100,nvidia-a100-80gb,8,9.6\n"
    )
    (o,) = load_catalog([path]).offers
    assert (o.cloud, o.gpu, o.on_demand_usd_per_gpu_hour, o.zone) == (
        "onprem",
        "A100-80GB",
        1.2,
        None,
    )


def test_skypilot_folder_replaces_bundled_prices_for_its_clouds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "catalogs"
    write_skypilot(
        root, "v7", "aws", ["p5.48xlarge,H100,8.0,192,2048,,1.0,,us-east-1,use1-az1,x86_64"]
    )
    write_skypilot(
        root, "v8", "aws", ["p5.48xlarge,H100,8.0,192,2048,,42.0,,us-east-1,use1-az1,x86_64"]
    )
    monkeypatch.setenv("GPUWISE_SKYPILOT_CATALOG", str(root))
    cat = load_catalog()
    aws = [o for o in cat.offers if o.cloud == "aws"]
    assert [(o.instance_type, o.on_demand_usd_per_hour) for o in aws] == [
        ("p5.48xlarge", 42.0)
    ]  # newest version
    assert any(o.cloud == "gcp" for o in cat.offers)  # other clouds still from the snapshot
    kinds = {layer.kind: layer.clouds for layer in cat.layers}
    assert kinds["skypilot"] == ("aws",)
    assert "aws" not in kinds["bundled"]


def test_skypilot_folder_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "catalogs"
    write_skypilot(
        root, "v8", "aws", ["p5.48xlarge,H100,8.0,192,2048,,42.0,,us-east-1,use1-az1,x86_64"]
    )
    monkeypatch.setenv("GPUWISE_SKYPILOT_CATALOG", "off")
    assert [layer.kind for layer in load_catalog().layers] == ["bundled"]


def test_missing_catalog_path() -> None:
    with pytest.raises(CatalogError, match="no such file or folder"):
        load_catalog(["/nonexistent/offers.csv"])
