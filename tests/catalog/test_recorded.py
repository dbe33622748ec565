"""`catalog update --fetch` against recorded real upstream files (tests/catalog/recorded, see its
README), served by a real HTTP server on 127.0.0.1 in each source's URL layout, upstream gaps
included (no v8 or v7 Azure file)."""

from __future__ import annotations

import datetime as dt
import io
import json
import shutil
import ssl
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from gpuwise.catalog.sources import store_path
from tests.catalog.servers import (
    FIXTURES,
    GPUHUNT_VERSION,
    RECORDED,
    CatalogServer,
    Found,
    Override,
)

V8_DATE = "Tue, 20 Oct 2026 08:00:00 GMT"  # Last-Modified the test server sends for v8 files
V6_DATE = "Mon, 03 Mar 2025 08:00:00 GMT"  # … and for the v6 Azure file
ADVISOR_DATE = "Sat, 28 Jun 2025 10:10:57 GMT"  # the recorded advisor data's date


class RecordedServer(CatalogServer):
    """Serves the recorded files; ``commits[path]`` is the date the fake GitHub commits API gives a
    catalog file (404 when absent)."""

    gpuhunt_dir = RECORDED / "gpuhunt"
    advisor_file = RECORDED / "spot-advisor-data.json"

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
    ) -> None:
        self.commits: dict[str, str] = {}
        super().__init__(host, port, tls)

    def body(self, path: str, query: dict[str, list[str]]) -> Found:
        parts = path.strip("/").split("/")
        if parts[0] == "skypilot" and len(parts) == 4:
            f = RECORDED / "skypilot" / parts[1] / parts[2] / parts[3]
            return (
                (f.read_bytes(), V8_DATE if parts[1] == "v8" else V6_DATE) if f.is_file() else None
            )
        if path == "/commits":
            date = self.commits.get(query.get("path", [""])[0])
            return (
                (json.dumps([{"commit": {"committer": {"date": date}}}]).encode(), None)
                if date
                else None
            )
        if path == "/spot-advisor-data.json":
            return self.advisor_file.read_bytes(), ADVISOR_DATE
        return super().body(path, query)


def _env(srv: RecordedServer) -> dict[str, str]:
    return {
        "GPUWISE_SKYPILOT_CATALOG_URL": f"{srv.base}/skypilot/v8",
        "GPUWISE_SKYPILOT_COMMITS_URL": f"{srv.base}/commits",
        "GPUWISE_AWS_SPOT_ADVISOR_URL": f"{srv.base}/spot-advisor-data.json",
        "GPUWISE_AZURE_PRICES_URL": f"{srv.base}/azure/api/retail/prices",
        "GPUWISE_AWS_PRICE_LIST_URL": f"{srv.base}/aws",
        "GPUWISE_AWS_PRICE_LIST_REGIONS": "us-east-1",
        "GPUHUNT_CATALOG_URL": f"{srv.base}/gpuhunt",
        "GPUWISE_GPUHUNT_PROVIDERS": "aws,gcp",
        "GPUWISE_FETCH_TIMEOUT_S": "2",
    }


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordedServer]:
    srv = RecordedServer()
    for name, value in _env(srv).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GPUWISE_SKYPILOT_CLOUDS", raising=False)  # the default cloud list
    monkeypatch.delenv("GPUHUNT_CATALOG_DIR", raising=False)
    yield srv
    srv.close()


def store_files() -> dict[str, bytes]:
    folder = store_path().parent
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*"))} if folder.is_dir() else {}


def _body(data: bytes, *, length: bool = True) -> Override:
    def handle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        if length:
            h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()
        h.close_connection = True

    return handle


LAMBDA = RECORDED / "skypilot" / "v8" / "lambda" / "vms.csv"


def test_default_fetch_succeeds_on_upstream_layout(cli, server: RecordedServer) -> None:  # type: ignore[no-untyped-def]
    r = cli("catalog", "update", "--fetch", "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    by = {s["source"]: s for s in doc["sources"]}
    assert set(by) == {"skypilot", "azure-prices", "aws-spot-advisor", "aws-price-list"}
    assert doc["failed"] == []
    sky = by["skypilot"]
    # Azure has no v8/v7 file upstream: read from v6, labelled with that version and its date
    assert "azure@v6" in sky["version"] and "aws@v8" in sky["version"]
    assert any(
        "azure: no v8/v7 file upstream; read v6 (as of 2025-03-03)" in n for n in sky["notes"]
    )
    assert sky["skipped"]["nebius: no accelerator"] == 40  # the real file's CPU rows, counted
    assert sky["skipped"]["oci: no accelerator"] == 3
    assert sky["as_of"] == "2025-03-03"  # the oldest file's date, not today
    offers = cli("offers", "--cloud", "nebius", "--limit", "0", "--json").json()["offers"]
    assert len(offers) == 21 and {o["as_of"] for o in offers} == {"2026-10-20"}


def test_commit_date_dates_a_skypilot_file(
    cli, server: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    server.commits["catalogs/v8/lambda/vms.csv"] = "2026-11-02T16:31:09Z"
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "lambda,nebius")
    r = cli("catalog", "update", "--fetch", "skypilot", "--json")
    assert r.code == 0, r.stderr
    lam = cli("offers", "--cloud", "lambda", "--limit", "1", "--json").json()["offers"]
    neb = cli("offers", "--cloud", "nebius", "--limit", "1", "--json").json()["offers"]
    assert lam[0]["as_of"] == "2026-11-02"  # last commit of the file
    assert neb[0]["as_of"] == "2026-10-20"  # no commit known: the server's Last-Modified


def test_fetched_prices_show_their_upstream_age(
    cli, server: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "azure")
    assert cli("catalog", "update", "--fetch", "skypilot").code == 0
    r = cli("offers", "--cloud", "azure", "--gpu", "T4", "--max-price-age", "30d")
    assert r.code == 0, r.stderr
    assert "Prices as of 2025-03-03" in r.stdout
    assert "refresh with `gpuwise catalog update --fetch`" in r.stdout + r.stderr


def _nebius_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "catalogs"
    (root / "v8" / "nebius").mkdir(parents=True)
    shutil.copy(
        RECORDED / "skypilot" / "v8" / "nebius" / "vms.csv", root / "v8" / "nebius" / "vms.csv"
    )
    monkeypatch.setenv("GPUWISE_SKYPILOT_CATALOG", str(root))


def test_real_nebius_file_in_a_skypilot_cache_breaks_no_command(
    cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    _nebius_cache(tmp_path, monkeypatch)
    runs = {
        "offers": cli("offers", "--cloud", "nebius", "--limit", "0", "--json"),
        "gpus": cli("gpus", "--json"),
        "catalog info": cli("catalog", "info", "--json"),
    }
    for name, r in runs.items():
        assert r.code == 0, (name, r.stderr)
    offers = runs["offers"].json()["offers"]
    assert len(offers) == 21 and not [o for o in offers if o["instance_type"].startswith("cpu-")]
    layers = runs["catalog info"].json()["layers"]
    assert any(layer["kind"] == "skypilot" and "nebius" in layer["clouds"] for layer in layers)


@pytest.mark.slow
def test_real_nebius_file_in_a_skypilot_cache_breaks_neither_plan_nor_fleet(
    cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    _nebius_cache(tmp_path, monkeypatch)
    demand = tmp_path / "demand.csv"
    demand.write_text(
        "timestamp,gpu,gpus,interruptible\n"
        + "".join(f"2026-01-01T{h:02d}:00:00+00:00,H100,8,false\n" for h in range(24))
    )
    plan = cli(
        "plan",
        "--model",
        "gpt2",
        "--task",
        "lora",
        "--tokens",
        "20M",
        "--cloud",
        "nebius",
        "--json",
    )
    assert plan.code == 0, plan.stderr
    assert {o["cloud"] for o in plan.json()["options"]} == {"nebius"}
    fleet = cli("fleet", "--demand", demand, "--cloud", "nebius", "--json")
    assert fleet.code == 0, fleet.stderr


def _line_end(data: bytes, rows: int) -> int:
    """The offset just after the header and ``rows`` data lines."""
    at = -1
    for _ in range(rows + 1):
        at = data.index(b"\n", at + 1)
    return at + 1


def _cut(data: bytes, fraction: float) -> bytes:
    return data[: int(len(data) * fraction)]


@pytest.mark.parametrize(
    "make, message",
    [
        # a close-delimited body (no Content-Length) cut mid-line: the last row reads `asia-northea`
        (lambda: _body(_cut(LAMBDA.read_bytes(), 0.6), length=False), "ends mid-line"),
        # cut at a line end: whole rows parse, but 149 of the 374 offers are gone since the last fetch
        (
            lambda: _body(LAMBDA.read_bytes()[: _line_end(LAMBDA.read_bytes(), 225)], length=False),
            "would shrink from 374 offers (last fetch) to 225",
        ),
        # a row with too few cells (a file cut short at rest, then a newline)
        (
            lambda: _body(LAMBDA.read_bytes().rstrip(b"\n").rsplit(b",", 3)[0] + b"\n"),
            "cells (the row is cut short)",
        ),
    ],
    ids=["mid-line", "row-count-collapse", "short-row"],
)
def test_truncated_lambda_file_is_refused_and_the_store_kept(
    cli,
    server: RecordedServer,
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[], Override],
    message: str,  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "lambda")
    assert cli("catalog", "update", "--fetch", "skypilot").code == 0
    before = store_files()
    server.overrides["/skypilot/v8/lambda/vms.csv"] = make()
    r = cli("catalog", "update", "--fetch", "skypilot")
    assert r.code == 2 and message in r.stderr, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error: ")]
    assert line.startswith("error: skypilot: ") and "To fix" in line
    assert store_files() == before  # byte-identical


def test_one_failing_source_keeps_the_others(
    cli, server: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "aws,nebius")
    server.overrides["/spot-advisor-data.json"] = _body(b'{"ranges": [], "spot_adv')
    r = cli(
        "catalog", "update", "--fetch", "skypilot", "aws-spot-advisor", "aws-price-list", "--json"
    )
    assert r.code == 3  # some sources refused, the store updated from the rest
    assert "1 of 3 source(s) refused; the store was updated from the other 2 (exit 3)" in r.stderr
    doc = r.json()
    assert {s["source"] for s in doc["sources"]} == {"skypilot", "aws-price-list"}
    assert [f["source"] for f in doc["failed"]] == ["aws-spot-advisor"]
    files = store_files()
    assert "reserved_prices.csv" in files and "spot_risk.csv" not in files
    assert len(cli("offers", "--cloud", "nebius", "--limit", "0", "--json").json()["offers"]) == 21


def test_gpuhunt_memory_picks_the_model_and_no_tpu_or_other_vendor(
    cli, server: RecordedServer
) -> None:  # type: ignore[no-untyped-def]
    r = cli("catalog", "update", "--fetch", "gpuhunt", "--json")
    assert r.code == 0, r.stderr
    (gh,) = r.json()["sources"]
    offers = {
        (o["instance_type"]): o
        for o in cli("offers", "--cloud", "aws", "--limit", "0", "--json").json()["offers"]
    }
    assert offers["p4de.24xlarge"]["gpu"] == "A100-80GB"
    assert offers["p4d.24xlarge"]["gpu"] == "A100"
    assert offers["p3dn.24xlarge"]["gpu"] == "V100-32GB" and offers["p3.2xlarge"]["gpu"] == "V100"
    # the plain p5.48xlarge, not the capacity-block product
    assert offers["p5.48xlarge"]["on_demand_usd_per_hour"] == 55.04
    assert "dl1.24xlarge" not in offers and "m5.large" not in offers
    gcp = cli("offers", "--cloud", "gcp", "--limit", "0", "--json").json()["offers"]
    assert [o["instance_type"] for o in gcp] == ["a2-highgpu-1g"]  # both TPU rows left out
    assert gh["skipped"] == {
        "aws: CPU only": 1,
        # a constructed fault row: gpuhunt's AWS provider sets no flag (see recorded/README.md)
        "aws: capacity block (reserved ahead for fixed dates) [capacity-block]": 1,
        "aws: intel accelerator (not a GPU)": 1,
        "gcp: google accelerator (not a GPU)": 2,
    }
    assert gh["as_of"] == "2026-11-20"


def test_gpuhunt_conflicting_duplicate_is_refused(cli, server: RecordedServer) -> None:  # type: ignore[no-untyped-def]
    text = (RECORDED / "gpuhunt" / "aws.csv").read_text()
    dup = text + "p5.48xlarge,us-east-1,98.32,192,2048.0,8,H100,80.0,False,,nvidia,,x86,{}\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("aws.csv", dup)
    server.overrides[f"/gpuhunt/aws/{GPUHUNT_VERSION}/catalog.zip"] = _body(buf.getvalue())
    r = cli("catalog", "update", "--fetch", "gpuhunt")
    assert r.code == 2 and "appears twice with different prices (55.04 and 98.32)" in r.stderr
    assert store_files() == {}


def test_skypilot_conflicting_duplicate_is_refused(
    cli, server: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "aws")
    text = (RECORDED / "skypilot" / "v8" / "aws" / "vms.csv").read_text()
    row = next(line for line in text.splitlines() if ",55.04,55.040000,us-east-1,use1-az1," in line)
    server.overrides["/skypilot/v8/aws/vms.csv"] = _body(
        (text + row.replace(",55.04,", ",98.32,") + "\n").encode()
    )
    r = cli("catalog", "update", "--fetch", "skypilot")
    assert r.code == 2 and "p5.48xlarge in use1-az1 with different prices" in r.stderr
    assert store_files() == {}


def _azure_item(**kw: object) -> dict[str, object]:
    base = json.loads((FIXTURES / "azure" / "page1.json").read_text())["Items"][0]
    return {**base, **kw}


def test_azure_duplicates_resolved_by_primary_region_then_newest_date(
    cli, server: RecordedServer
) -> None:  # type: ignore[no-untyped-def]
    items = [
        _azure_item(retailPrice=3.673, effectiveStartDate="2026-11-01T00:00:00Z"),
        _azure_item(retailPrice=3.9, effectiveStartDate="2026-05-01T00:00:00Z"),  # older
        _azure_item(retailPrice=2.0, isPrimaryMeterRegion=False),  # not the primary meter region
        _azure_item(retailPrice=1.0, effectiveStartDate="2099-01-01T00:00:00Z"),  # not begun yet
        _azure_item(armRegionName="usgovvirginia", retailPrice=4.4),  # government region
    ]
    server.overrides["/azure/api/retail/prices"] = _body(json.dumps({"Items": items}).encode())
    r = cli("catalog", "update", "--fetch", "azure-prices", "--json")
    assert r.code == 0, r.stderr
    (az,) = r.json()["sources"]
    assert any("3 repeated price row(s) set aside" in n for n in az["notes"])
    assert az["skipped"]["government/sovereign region"] == 1
    (o,) = cli("offers", "--cloud", "azure", "--json").json()["offers"]
    # seen today (the API lists prices in force now); in force since its effectiveStartDate
    seen = dt.date.today().isoformat()
    assert (o["region"], o["on_demand_usd_per_hour"], o["as_of"]) == ("eastus", 3.673, seen)
    assert o["valid_from"] == "2026-11-01"
    assert o["gpu"] == "A100-80GB-PCIE"
    # asked for: the government region is kept
    r = cli("catalog", "update", "--fetch", "azure-prices", "--include-sovereign-regions")
    assert r.code == 0, r.stderr
    regions = {o["region"] for o in cli("offers", "--cloud", "azure", "--json").json()["offers"]}
    assert regions == {"eastus", "usgovvirginia"}


def test_azure_tie_with_different_prices_refuses_that_offer_only(
    cli, server: RecordedServer
) -> None:  # type: ignore[no-untyped-def]
    items = [
        _azure_item(retailPrice=3.673),
        _azure_item(retailPrice=3.5),  # two Linux on-demand rows, one size and region, one date
        _azure_item(armRegionName="westus2", retailPrice=3.8),
    ]
    server.overrides["/azure/api/retail/prices"] = _body(json.dumps({"Items": items}).encode())
    r = cli("catalog", "update", "--fetch", "azure-prices", "--json")
    assert r.code == 0, r.stderr
    (az,) = r.json()["sources"]
    ((why, n),) = az["refused"].items()
    assert n == 1 and "Standard_NC24ads_A100_v4 in eastus (od): 3.5, 3.673 from 2026-11-01" in why
    offers = cli("offers", "--cloud", "azure", "--json").json()["offers"]
    assert [(o["region"], o["on_demand_usd_per_hour"]) for o in offers] == [("westus2", 3.8)]


def test_advisor_bands_use_the_files_own_max(
    cli, server: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from gpuwise.planner import load_spot_defaults

    r = cli("catalog", "update", "--fetch", "aws-spot-advisor", "--json")
    assert r.code == 0, r.stderr
    (adv,) = r.json()["sources"]
    assert adv["as_of"] == "2025-06-28" and adv["skipped"] == {"not a GPU instance type": 2}
    spot = load_spot_defaults()
    p4d = spot.for_instance("aws", "us-east-1", "p4d.24xlarge")  # real band 10-15%, max 16
    assert p4d.band == "10-15%" and p4d.monthly_interruption_probability == pytest.approx(0.16)
    g4 = spot.for_instance("aws", "us-east-1", "g4dn.xlarge")  # 15-20%, max 22
    assert g4.monthly_interruption_probability == pytest.approx(0.22)


def test_advisor_unknown_band_label_refuses_its_rows_only(cli, server: RecordedServer) -> None:  # type: ignore[no-untyped-def]
    text = (
        (RECORDED / "spot-advisor-data.json")
        .read_text()
        .replace('"label":"5-10%"', '"label":"5-11%"')
    )
    server.overrides["/spot-advisor-data.json"] = _body(text.encode())
    r = cli("catalog", "update", "--fetch", "aws-spot-advisor", "--json")
    assert r.code == 0, r.stderr  # the rows of that band only, counted with examples
    (adv,) = r.json()["sources"]
    ((why, n),) = adv["refused"].items()
    assert n == 1 and "band gpuwise does not know" in why and "r=1 '5-11%'" in why
    assert adv["spot_risks"] == 15


def test_advisor_labels_match_the_planner_table() -> None:
    from importlib import resources

    import yaml

    from gpuwise.catalog.remote import ADVISOR_BAND_LABELS

    data = yaml.safe_load(resources.files("gpuwise.planner").joinpath("data/spot.yaml").read_text())
    assert tuple(data["aws_advisor_bands"]) == ADVISOR_BAND_LABELS


def test_a_trickling_server_meets_the_download_deadline(
    cli, server: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    def trickle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "1000")
        h.end_headers()
        for _ in range(40):
            try:
                h.wfile.write(b"{")
                h.wfile.flush()
            except OSError:
                return
            time.sleep(0.1)

    monkeypatch.setenv("GPUWISE_FETCH_DEADLINE_S", "1")
    server.overrides["/spot-advisor-data.json"] = trickle
    t0 = time.monotonic()
    r = cli("catalog", "update", "--fetch", "aws-spot-advisor")
    assert time.monotonic() - t0 < 3
    assert (
        r.code == 2
        and "stopped at the 1 s download deadline (GPUWISE_FETCH_DEADLINE_S)" in r.stderr
    )


def test_catalog_info_keeps_a_history_of_fetches(
    cli, server: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "nebius")
    assert cli("catalog", "update", "--fetch", "skypilot").code == 0
    assert cli("catalog", "update", "--fetch", "aws-spot-advisor").code == 0
    assert cli("catalog", "update", "--fetch", "skypilot").code == 0
    info = cli("catalog", "info", "--json").json()
    history = info["history"]
    assert [h["source"] for h in history] == ["skypilot", "aws-spot-advisor", "skypilot"]
    assert history[0]["skipped"] == {"nebius: no accelerator": 40} and history[0]["offers"] == 21
    assert history[0]["as_of"] == "2026-10-20" and history[0]["fetched_at"]
    text = cli("catalog", "info").stdout
    assert "Fetch history" in text and "40 skipped" in text


def _update_proc(csv_path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuwise", "catalog", "update", "--from-csv", str(csv_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_concurrent_updates_lose_no_rows(tmp_path: Path) -> None:
    import os

    header = (
        "cloud,region,zone,instance_type,gpu,gpu_count,gpu_memory_gib,vcpus,memory_gib,"
        "on_demand_usd_per_hour,spot_usd_per_hour,arch,source,as_of\n"
    )
    env = dict(os.environ)
    files = []
    for i in range(4):
        f = tmp_path / f"row{i}.csv"
        f.write_text(
            header + f"mycloud,r{i},,box.{i},H100,8,80,96,1024,{20 + i},,x86_64,mine,2026-11-20\n"
        )
        files.append(f)
    procs = [_update_proc(f, env) for f in files]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    rows = store_path().read_text().splitlines()
    assert sorted(r.split(",")[3] for r in rows[1:] if r.startswith("mycloud")) == [
        "box.0",
        "box.1",
        "box.2",
        "box.3",
    ]


@pytest.mark.parametrize(
    "cut, message",
    [
        (lambda b: b[: b.rindex(b",31.92,")] + b",31.9", "ends mid-line"),  # cut at rest, mid-price
        (lambda b: b[: b.rindex(b",31.92,")] + b",31.92\n", "cells (the row is cut short)"),
    ],
    ids=["no-final-newline", "short-row"],
)
def test_a_skypilot_file_cut_short_at_rest_is_refused(
    cli, tmp_path: Path, cut: Callable[[bytes], bytes], message: str
) -> None:  # type: ignore[no-untyped-def]
    lam = tmp_path / "v8" / "lambda"
    lam.mkdir(parents=True)
    (lam / "vms.csv").write_bytes(cut(LAMBDA.read_bytes()))
    for args in (("--from-skypilot", tmp_path / "v8"), ("--from-csv", lam / "vms.csv")):
        r = cli("catalog", "update", *args)
        assert r.code == 2 and message in r.stderr, (args, r.stderr)
        assert store_files() == {}


def test_allow_shrink_accepts_a_real_drop(
    cli, server: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "lambda")
    assert cli("catalog", "update", "--fetch", "skypilot").code == 0
    data = LAMBDA.read_bytes()
    server.overrides["/skypilot/v8/lambda/vms.csv"] = _body(data[: _line_end(data, 100)])
    assert cli("catalog", "update", "--fetch", "skypilot").code == 2
    r = cli("catalog", "update", "--fetch", "skypilot", "--allow-shrink", "--json")
    assert r.code == 0, r.stderr
    (sky,) = r.json()["sources"]
    assert sky["clouds"][0]["dropped"] == 274


def test_the_run_deadline_ends_later_sources_with_a_clear_message(
    cli, server: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    def slow(h: BaseHTTPRequestHandler) -> None:
        time.sleep(1.2)
        _body((RECORDED / "spot-advisor-data.json").read_bytes())(h)

    monkeypatch.setenv("GPUWISE_FETCH_RUN_DEADLINE_S", "1")
    server.overrides["/spot-advisor-data.json"] = slow
    r = cli("catalog", "update", "--fetch", "aws-spot-advisor", "aws-price-list", "--json")
    assert r.code == 2
    failed = {f["source"]: f["error"] for f in r.json()["failed"]}
    assert set(failed) == {"aws-spot-advisor", "aws-price-list"}
    assert all("the run's deadline (GPUWISE_FETCH_RUN_DEADLINE_S)" in e for e in failed.values())


def test_a_mirror_is_not_dated_by_the_upstream_repository(
    cli, server: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    server.commits["catalogs/v8/nebius/vms.csv"] = "2026-11-02T16:31:09Z"
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "nebius")
    monkeypatch.delenv("GPUWISE_SKYPILOT_COMMITS_URL")  # only the catalog URL moved: a mirror
    assert cli("catalog", "update", "--fetch", "skypilot").code == 0
    assert "/commits" not in server.hits  # GitHub's history says nothing about a mirror's files
    (o,) = cli("offers", "--cloud", "nebius", "--limit", "1", "--json").json()["offers"]
    assert o["as_of"] == "2026-10-20"  # the mirror's Last-Modified


def test_dry_run_from_csv_writes_nothing(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("catalog", "update", "--from-csv", LAMBDA, "--dry-run")
    assert r.code == 0, r.stderr
    assert store_files() == {}
