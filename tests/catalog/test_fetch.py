"""`gpuwise catalog update --fetch`: every source from recorded-schema fixtures on a real HTTP server
on 127.0.0.1; failures (truncated, 500, timeout, schema change, malicious file) leave the store as it was."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from gpuwise.catalog.sources import store_path
from tests.catalog.servers import FIXTURES, GPUHUNT_VERSION, FixtureServer, Override


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FixtureServer]:
    srv = FixtureServer()
    for name, value in {
        "GPUWISE_SKYPILOT_CATALOG_URL": f"{srv.base}/skypilot/v8",
        "GPUWISE_SKYPILOT_CLOUDS": "aws,lambda",
        "GPUWISE_AWS_SPOT_ADVISOR_URL": f"{srv.base}/spot-advisor-data.json",
        "GPUWISE_AZURE_PRICES_URL": f"{srv.base}/azure/api/retail/prices",
        "GPUWISE_AWS_PRICE_LIST_URL": f"{srv.base}/aws",
        "GPUWISE_AWS_PRICE_LIST_REGIONS": "us-east-1",
        "GPUHUNT_CATALOG_URL": f"{srv.base}/gpuhunt",
        "GPUWISE_GPUHUNT_PROVIDERS": "runpod,lambdalabs",
        "GPUWISE_FETCH_TIMEOUT_S": "2",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GPUHUNT_CATALOG_DIR", raising=False)
    yield srv
    srv.close()


def store_files() -> dict[str, bytes]:
    folder = store_path().parent
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*"))} if folder.is_dir() else {}


ALL = ("skypilot", "azure-prices", "aws-spot-advisor", "aws-price-list", "gpuhunt")


@pytest.mark.slow
def test_fetch_imports_every_source_and_info_lists_them(cli, server: FixtureServer) -> None:  # type: ignore[no-untyped-def]
    r = cli("catalog", "update", "--fetch", *ALL, "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    by = {s["source"]: s for s in doc["sources"]}
    assert set(by) == set(ALL)
    assert {d["cloud"] for d in by["skypilot"]["clouds"]} == {"aws", "lambda"}
    assert (
        by["aws-spot-advisor"]["spot_risks"] == 5
    )  # 4 GPU Linux rows in us-east-1 + 1 in us-west-2; m5 skipped
    assert (
        by["aws-price-list"]["reserved_prices"] == 4
    )  # p5 + p4d × 1y/3y; Windows, all-upfront, convertible skipped
    assert by["azure-prices"]["reserved_prices"] == 2
    assert by["azure-prices"]["clouds"]  # H200 comes from gpuwise's own Azure size table
    assert by["gpuhunt"]["version"] == f"runpod@{GPUHUNT_VERSION} lambdalabs@{GPUHUNT_VERSION}"

    info = cli("catalog", "info", "--json").json()
    fetched = {f["source"]: f for f in info["fetched"]}
    assert set(fetched) == set(ALL)
    assert (
        fetched["aws-price-list"]["as_of"] == "2026-11-20"
        and fetched["aws-price-list"]["age_days"] is not None
    )
    assert fetched["gpuhunt"]["as_of"] == "2026-11-20"
    assert "runpod" in info["clouds"]
    text = cli("catalog", "info").stdout
    assert "Fetched into the store" in text and "aws-spot-advisor" in text

    # offers carry their source and date; Azure spot and on-demand from the retail API merged into one row
    (az,) = cli(
        "offers", "--cloud", "azure", "--region", "eastus", "--gpu", "A100-80GB-PCIE", "--json"
    ).json()["offers"]
    assert az["on_demand_usd_per_hour"] == 3.673 and az["spot_usd_per_hour"] == 0.52
    assert az["source"].startswith("azure-prices:")
    rp = cli("offers", "--cloud", "runpod", "--gpu", "H100", "--count", "1", "--json").json()[
        "offers"
    ]
    assert (
        rp[0]["spot_usd_per_hour"] == 1.75
        and rp[0]["source"] == f"gpuhunt:runpod@{GPUHUNT_VERSION}"
    )
    assert rp[0]["as_of"] == "2026-11-20"
    # no stray CPU rows, and previous copies are kept on the next fetch
    assert not [
        o
        for o in cli("offers", "--cloud", "aws", "--limit", "0", "--json").json()["offers"]
        if o["instance_type"] == "m5.large"
    ]
    offers_csv = store_files()["offers.csv"]
    r = cli("catalog", "update", "--fetch", "aws-spot-advisor", "aws-price-list", "--json")
    assert r.code == 0, r.stderr
    files = store_files()
    assert {"spot_risk.prev.csv", "reserved_prices.prev.csv"} <= set(files)
    assert (
        files["offers.csv"] == offers_csv
    )  # bands and reserved prices only: the offers are not rewritten
    assert cli("catalog", "update", "--fetch", "skypilot").code == 0
    assert store_files()["offers.prev.csv"] == offers_csv


def test_gpuhunt_reads_gpuhunt_catalog_dir_without_network(
    cli,
    server: FixtureServer,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUHUNT_CATALOG_DIR", str(FIXTURES / "gpuhunt"))
    monkeypatch.setenv("GPUHUNT_CATALOG_URL", "http://127.0.0.1:9/unused")
    r = cli("catalog", "update", "--fetch", "gpuhunt", "--json")
    assert r.code == 0, r.stderr
    assert not server.hits
    lam = cli("offers", "--cloud", "lambda", "--json").json()["offers"]
    gh = [o for o in lam if o["instance_type"] == "gpu_1x_gh200"]
    assert gh and gh[0]["arch"] == "arm64" and gh[0]["gpu"] == "GH200"


def _status(code: int) -> Override:
    def handle(h: BaseHTTPRequestHandler) -> None:
        h.send_error(code)

    return handle


def _truncated(h: BaseHTTPRequestHandler) -> None:
    body = (FIXTURES / "spot-advisor-data.json").read_bytes()
    h.send_response(200)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body[: len(body) // 2])
    h.wfile.flush()
    h.close_connection = True


def _slow(h: BaseHTTPRequestHandler) -> None:
    time.sleep(1.5)
    _status(200)(h)


def _body(data: bytes, *, length: bool = True) -> Override:
    def handle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        if length:
            h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        h.close_connection = True

    return handle


def _replace(path: Path, old: str, new: str) -> bytes:
    text = path.read_text()
    assert old in text
    return text.replace(old, new).encode()


SKY_AWS = FIXTURES / "skypilot" / "aws" / "vms.csv"
ADVISOR = FIXTURES / "spot-advisor-data.json"
PRICE_LIST = FIXTURES / "aws-price-list" / "us-east-1" / "index.json"
AZ1 = FIXTURES / "azure" / "page1.json"
GH_RUNPOD = FIXTURES / "gpuhunt" / "runpod.csv"

FAILURES = {
    "truncated": ("aws-spot-advisor", "/spot-advisor-data.json", lambda: _truncated, "cut short"),
    "http-500": ("aws-spot-advisor", "/spot-advisor-data.json", lambda: _status(500), "HTTP 500"),
    "http-404": ("aws-price-list", "/aws/us-east-1/index.json", lambda: _status(404), "HTTP 404"),
    "missing-column": (
        "skypilot",
        "/skypilot/v8/aws/vms.csv",
        lambda: _body(_replace(SKY_AWS, ",Price,", ",Cost,")),
        "missing column(s) Price",
    ),
    "wrong-type-advisor": (  # a wrong type in one row refuses that row only (test_feeds)
        "aws-spot-advisor",
        "/spot-advisor-data.json",
        lambda: _body(_replace(ADVISOR, '"spot_advisor"', '"spot_advisor_v2"')),
        "needs 'ranges' and 'spot_advisor'",
    ),
    "wrong-type-price-list": (
        "aws-price-list",
        "/aws/us-east-1/index.json",
        lambda: _body(_replace(PRICE_LIST, '"37.0000000000"', '"abc"')),
        "is not a number",
    ),
    "negative-azure-price": (
        "azure-prices",
        "/azure/page2",
        lambda: _body(
            json.dumps(
                {"Items": [{**json.loads(AZ1.read_text())["Items"][0], "retailPrice": -3}]}
            ).encode()
        ),
        "not a valid price",
    ),
    "nan-gpuhunt-price": (
        "gpuhunt",
        "/gpuhunt/runpod/version",
        lambda: _body(b"../../etc"),
        "unexpected format",
    ),
    "not-json": (
        "aws-price-list",
        "/aws/us-east-1/index.json",
        lambda: _body(b"<html>maintenance</html>"),
        "not valid JSON",
    ),
    "huge": (
        "aws-spot-advisor",
        "/spot-advisor-data.json",
        lambda: _body(b"[" + b"0," * 600_000 + b"0]"),
        "over the",
    ),
    "huge-no-length": (
        "aws-spot-advisor",
        "/spot-advisor-data.json",
        lambda: _body(b"[" + b"0," * 600_000 + b"0]", length=False),
        "more than",
    ),
    "foreign-next-page": (
        "azure-prices",
        "/azure/api/retail/prices",
        lambda: _body(
            json.dumps({"Items": [], "NextPageLink": "http://example.invalid/x"}).encode()
        ),
        "another host",
    ),
}


# Each case fetches every source twice (2-6 s): one stays in the fast suite, the rest are slow.
_FAST_FAILURE = "http-404"


@pytest.mark.parametrize(
    "case",
    [
        c if c == _FAST_FAILURE else pytest.param(c, marks=pytest.mark.slow)
        for c in sorted(FAILURES)
    ],
)
def test_failures_leave_the_store_unchanged(
    cli,
    server: FixtureServer,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
    case: str,
) -> None:
    assert cli("catalog", "update", "--fetch", *ALL).code == 0
    before = store_files()
    offers_before = cli("offers", "--limit", "0", "--json").json()["offers"]
    source, path, make, message = FAILURES[case]
    server.overrides[path] = make()
    monkeypatch.setenv("GPUWISE_FETCH_MAX_BYTES", "1000000")
    r = cli("catalog", "update", "--fetch", source)
    assert r.code == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "To fix" in lines[0]
    assert r.stderr.startswith(f"[1/1] {source}: refused")  # the progress line, then the error
    assert "Traceback" not in r.stderr
    assert store_files() == before
    assert cli("offers", "--limit", "0", "--json").json()["offers"] == offers_before


def test_timeout_is_retried_then_refused(
    cli,
    server: FixtureServer,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUWISE_FETCH_TIMEOUT_S", "0.3")
    server.overrides["/spot-advisor-data.json"] = _slow
    r = cli("catalog", "update", "--fetch", "aws-spot-advisor")
    assert r.code == 2 and "no answer within 0.3 s" in r.stderr
    assert server.hits.count("/spot-advisor-data.json") == 3  # first try + 2 retries
    assert store_files() == {}


def test_a_transient_500_is_retried(cli, server: FixtureServer) -> None:  # type: ignore[no-untyped-def]
    calls: list[int] = []

    def flaky(h: BaseHTTPRequestHandler) -> None:
        calls.append(1)
        if len(calls) == 1:
            h.send_error(503)
        else:
            _body(ADVISOR.read_bytes())(h)

    server.overrides["/spot-advisor-data.json"] = flaky
    r = cli("catalog", "update", "--fetch", "aws-spot-advisor")
    assert r.code == 0, r.stderr
    assert len(calls) == 2


def test_no_network_fails_with_one_line_and_the_fix(cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import socket

    with socket.socket() as s:  # a port with nobody listening: connection refused, as offline
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(
        "GPUWISE_AWS_SPOT_ADVISOR_URL", f"http://127.0.0.1:{port}/spot-advisor-data.json"
    )
    r = cli("catalog", "update", "--fetch", "aws-spot-advisor")
    assert r.code == 2
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error: ")]
    assert f"127.0.0.1:{port}/spot-advisor-data.json" in line and "--from-csv" in line
    assert cli("offers", "--gpu", "H100", "--json").code == 0  # the last good catalog keeps working


def test_unknown_source_is_refused(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("catalog", "update", "--fetch", "aws-spot-advisr")
    assert r.code == 2 and "did you mean 'aws-spot-advisor'" in r.stderr


@pytest.mark.slow
def test_reserved_prices_make_a_flat_year_reserve_without_a_flag(
    cli,
    server: FixtureServer,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    demand = tmp_path / "flat.csv"
    start = 1_767_225_600  # 2026-01-01T00:00Z
    import datetime as dt

    rows = [
        f"{dt.datetime.fromtimestamp(start + 3600 * h, dt.timezone.utc).isoformat()},H100,8,false"
        for h in range(8760)
    ]
    demand.write_text("timestamp,gpu,gpus,interruptible\n" + "\n".join(rows) + "\n")
    before = cli("fleet", "--demand", demand, "--cloud", "aws", "--json")
    assert before.code == 0, before.stderr
    assert before.json()["commitments"] == []  # nothing known about reservations: reserve nothing
    assert cli("catalog", "update", "--fetch", "skypilot", "aws-price-list").code == 0
    r = cli("fleet", "--demand", demand, "--cloud", "aws", "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert sum(c["count"] for c in doc["commitments"]) == 8
    (c,) = doc["commitments"]
    assert c["cloud"] == "aws" and "aws-price-list" in c["source"]


def test_advisor_bands_give_instance_types_different_spot_risk(cli, server: FixtureServer) -> None:  # type: ignore[no-untyped-def]
    from gpuwise.planner import load_spot_defaults

    assert cli("catalog", "update", "--fetch", "skypilot", "aws-spot-advisor").code == 0
    spot = load_spot_defaults()
    g5 = spot.for_instance("aws", "us-east-1", "g5.xlarge")
    g6 = spot.for_instance("aws", "us-east-1", "g6.xlarge")
    assert (g5.band, g6.band) == ("<5%", ">20%")
    assert g5.mtbf_hours > g6.mtbf_hours
    assert (
        spot.for_instance("aws", "eu-west-1", "g5.xlarge").band is None
    )  # not in the file: the cloud default
    r = cli(
        "plan",
        "--model",
        "gpt2",
        "--task",
        "lora",
        "--tokens",
        "20M",
        "--cloud",
        "aws",
        "--billing",
        "spot",
        "--json",
        "--limit",
        "0",
    )
    assert r.code == 0, r.stderr
    by_type = {o["instance_type"]: o for o in r.json()["options"] if o["nodes"] == 1}
    # (g5.xlarge's A10G has no published bf16 peak, so plan cannot estimate it)
    assert "band >20%" in by_type["g6.xlarge"]["interruption_source"]
    assert "band 15-20%" in by_type["p4d.24xlarge"]["interruption_source"]
    assert "band 5-10%" in by_type["p5.48xlarge"]["interruption_source"]
    assert "MTBF" in by_type["p5.48xlarge"]["interruption_source"]


def test_dry_run_fetches_and_reports_but_writes_nothing(cli, server: FixtureServer) -> None:  # type: ignore[no-untyped-def]
    r = cli("catalog", "update", "--fetch", "skypilot", "aws-price-list", "--dry-run", "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["dry_run"] is True and {s["source"] for s in doc["sources"]} == {
        "skypilot",
        "aws-price-list",
    }
    assert store_files() == {}
    r = cli("catalog", "update", "skypilot")  # a source name without --fetch
    assert r.code == 2 and "source names go with --fetch" in r.stderr
