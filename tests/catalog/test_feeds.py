"""Each source imports its real feed: Azure paging through the API's own ``:443``-style next
links, the whole Spot Advisor file, gpuhunt's flagged rows, AWS price-list duplicates, and
per-row refusal of odd or hostile values (served on loopback by a real HTTP server)."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwise.catalog.sources import store_path
from tests.catalog.servers import (
    FIXTURES,
    GPUHUNT_VERSION,
    RECORDED,
    FixtureServer,
    self_signed_tls,
)
from tests.catalog.test_recorded import (
    RecordedServer,
    _azure_item,
    _body,
    _env,
    store_files,
)


def _default_port_server() -> FixtureServer:
    """A fixture server on port 80 of a random 127.x address (any 127/8 address is loopback), so
    that the base URL has no port and Azure's next links carry the explicit ``:80``."""
    for _ in range(5):
        host = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
        try:
            return FixtureServer(host, 80)
        except OSError:
            continue
    pytest.skip("cannot bind port 80 on a loopback address (needs root or CAP_NET_BIND_SERVICE)")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FixtureServer]:
    srv = FixtureServer()
    monkeypatch.setenv("GPUWISE_AWS_PRICE_LIST_URL", f"{srv.base}/aws")
    monkeypatch.setenv("GPUWISE_AWS_PRICE_LIST_REGIONS", "us-east-1")
    monkeypatch.setenv("GPUWISE_FETCH_TIMEOUT_S", "2")
    yield srv
    srv.close()


@pytest.fixture
def port80(monkeypatch: pytest.MonkeyPatch) -> Iterator[FixtureServer]:
    srv = _default_port_server()
    monkeypatch.setenv("GPUWISE_AZURE_PRICES_URL", f"{srv.base}/azure/api/retail/prices")
    monkeypatch.setenv("GPUWISE_FETCH_TIMEOUT_S", "2")
    yield srv
    srv.close()


def test_azure_pages_through_a_next_link_with_the_default_port(cli, port80: FixtureServer) -> None:  # type: ignore[no-untyped-def]
    assert ":" not in port80.base.removeprefix("http://")  # the base names no port
    r = cli("catalog", "update", "--fetch", "azure-prices", "--json")
    assert r.code == 0, r.stderr
    assert "/azure/page2" in port80.hits  # the second page, linked as http://host:80/azure/page2
    (az,) = r.json()["sources"]
    assert az["reserved_prices"] == 2  # the reservations are on page 2


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (
            "https://prices.azure.com/api/retail/prices",
            "https://prices.azure.com:443/x?$skip=1",
            True,
        ),
        ("https://prices.azure.com/api", "https://PRICES.azure.com/api", True),
        ("http://h/api", "http://h:80/api", True),
        ("https://prices.azure.com/api", "https://prices.azure.com:444/api", False),
        ("https://prices.azure.com/api", "http://prices.azure.com:443/api", False),
        ("https://prices.azure.com/api", "https://example.com:443/api", False),
        ("https://prices.azure.com/api", "https://prices.azure.com:bad/api", False),
    ],
)
def test_origin_is_scheme_host_and_effective_port(a: str, b: str, same: bool) -> None:
    from gpuwise.catalog.remote_azure import same_origin_key

    assert (same_origin_key(a) == same_origin_key(b)) is same


# --------------------------------------------------------------------------- recorded feeds

FULL_ADVISOR = RECORDED / "spot-advisor" / "spot-advisor-data.json"
WRITER = RECORDED / "gpuhunt-writer"


class _Full(RecordedServer):
    """The recorded feeds with the whole Spot Advisor file and gpuhunt-writer catalogs."""

    advisor_file = FULL_ADVISOR
    gpuhunt_dir = WRITER


def _serve(monkeypatch: pytest.MonkeyPatch, srv: RecordedServer) -> RecordedServer:
    for name, value in _env(srv).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GPUWISE_GPUHUNT_PROVIDERS", "gcp,lambdalabs,oci,runpod")
    monkeypatch.delenv("GPUWISE_SKYPILOT_CLOUDS", raising=False)
    monkeypatch.delenv("GPUHUNT_CATALOG_DIR", raising=False)
    return srv


@pytest.fixture
def full(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordedServer]:
    srv = _serve(monkeypatch, _Full())
    yield srv
    srv.close()


def test_the_whole_spot_advisor_file_imports_and_refuses_one_row(cli, full: RecordedServer) -> None:  # type: ignore[no-untyped-def]
    r = cli("catalog", "update", "--fetch", "aws-spot-advisor", "--json")
    assert r.code == 0, r.stderr
    (adv,) = r.json()["sources"]
    assert adv["spot_risks"] == 823  # 824 GPU entries, one refused
    assert adv["refused"] == {
        "savings 's' outside 0-100% (below 0: spot dearer than on-demand) "
        "(e.g. ca-central-1/p5.48xlarge s=-62)": 1
    }
    from gpuwise.catalog.risk import load_spot_risks

    bands = {(r.region, r.instance_type): r for r in load_spot_risks()}
    top = [r for r in bands.values() if r.band == ">20%"]
    assert top and all((r.band_min_pct, r.band_max_pct) == (22, 100) for r in top)
    assert ("ca-central-1", "p5.48xlarge") not in bands
    # the planner plans ">20%" at the file's own lower edge, naming the file's range
    from gpuwise.planner import load_spot_defaults

    r0 = top[0]
    risk = load_spot_defaults().for_instance("aws", r0.region, r0.instance_type)
    assert risk.monthly_interruption_probability == pytest.approx(0.22)
    assert risk.confidence == "lower-bound" and "(22-100% in the advisor's file)" in risk.source


def test_gpuhunt_keeps_b200_gh200_and_oci_spot_and_sets_aside_other_products(
    cli, full: RecordedServer
) -> None:  # type: ignore[no-untyped-def]
    r = cli("catalog", "update", "--fetch", "gpuhunt", "--json")
    assert r.code == 0, r.stderr
    (gh,) = r.json()["sources"]
    assert gh["skipped"] == {
        "gcp: DWS calendar-mode capacity (booked ahead for fixed dates) [gcp-dws-calendar-mode]": 1,
        "runpod: CPU only": 1,
        "runpod: RunPod Instant Cluster (sold as 2-8 nodes, not one instance) [runpod-cluster]": 1,
    }

    def offers(cloud: str) -> dict[str, dict[str, object]]:
        doc = cli("offers", "--cloud", cloud, "--limit", "0", "--json").json()
        return {f"{o['instance_type']}@{o['region']}": o for o in doc["offers"]}

    b200 = offers("gcp")["a4-highgpu-8g@us-central1"]
    assert (b200["gpu"], b200["gpu_count"], b200["zone"]) == ("B200", 8, "us-central1-b")
    assert (b200["on_demand_usd_per_hour"], b200["spot_usd_per_hour"]) == (90.216, 32.6064)
    assert str(b200["source"]).endswith("[gcp-a4]")
    gh200 = [o for k, o in offers("lambda").items() if k.startswith("gpu_1x_gh200@")]
    assert len(gh200) == 2 and {o["arch"] for o in gh200} == {"arm64"}
    v100 = offers("oci")["VM.GPU3.1@af-casablanca-1"]
    assert (v100["on_demand_usd_per_hour"], v100["spot_usd_per_hour"]) == (2.95, 1.475)
    assert [k for k in offers("runpod")] == ["NVIDIA A100 80GB PCIe@AP-IN-1"]


def test_an_azure_price_seen_today_is_not_stale(cli, full: RecordedServer) -> None:  # type: ignore[no-untyped-def]
    item = _azure_item(effectiveStartDate="2023-03-01T00:00:00Z")  # in force since 2023
    full.overrides["/azure/api/retail/prices"] = _body(json.dumps({"Items": [item]}).encode())
    assert cli("catalog", "update", "--fetch", "azure-prices").code == 0
    doc = cli("offers", "--cloud", "azure", "--json").json()
    (o,) = doc["offers"]
    assert (o["as_of"], o["valid_from"]) == (dt.date.today().isoformat(), "2023-03-01")
    assert doc["prices_stale"] is False and doc["prices_age_days"] == 0


def _counts(cli, cloud: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Offers per source for ``cloud`` in the store."""
    from collections import Counter

    from gpuwise.catalog import parse_offer_csv

    rows = parse_offer_csv(store_path().read_text(), "store")
    return dict(Counter(o.source.split(":")[0] for o in rows if o.cloud == cloud))


def test_fetching_one_source_keeps_another_sources_rows_by_precedence(
    cli, full: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "gcp")
    monkeypatch.setenv("GPUWISE_GPUHUNT_PROVIDERS", "gcp")
    assert cli("catalog", "update", "--fetch", "skypilot").code == 0
    sky = _counts(cli, "gcp")["skypilot"]
    r = cli("catalog", "update", "--fetch", "gpuhunt", "--json")
    assert r.code == 0, r.stderr
    # skypilot ranks first for gcp: its rows stay, gpuhunt adds the B200 it does not list
    assert _counts(cli, "gcp") == {"skypilot": sky, "gpuhunt": 1}
    (gh,) = r.json()["sources"]
    assert "gcp: 1 offer(s) not taken (skypilot ranks before gpuhunt for gcp)" in gh["notes"]
    # the setting changes the winner, and the replacement is said
    monkeypatch.setenv("GPUWISE_CATALOG_PRECEDENCE", "gcp=gpuhunt,skypilot")
    r = cli("catalog", "update", "--fetch", "gpuhunt", "--json")
    (gh,) = r.json()["sources"]
    assert _counts(cli, "gcp") == {"skypilot": sky - 1, "gpuhunt": 2}
    assert (
        "gcp: 1 offer(s) from skypilot replaced (gpuhunt ranks before skypilot for gcp)"
        in (gh["notes"])
    )
    src = cli("catalog", "sources", "--json").json()
    assert src["precedence"]["gcp"] == ["gpuhunt", "skypilot"]
    assert src["precedence"]["azure"] == ["azure-prices", "skypilot", "gpuhunt"]


def test_a_bad_precedence_setting_is_one_line(cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUWISE_CATALOG_PRECEDENCE", "gcp=gpuhunt,skypilto")
    r = cli("catalog", "sources")
    assert r.code == 2 and "'skypilto' is not an offer source" in r.stderr
    assert "Traceback" not in r.stderr


def test_azure_prices_rank_before_skypilot_and_keep_its_other_rows(
    cli, full: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "azure")
    r = cli("catalog", "update", "--fetch", "skypilot", "azure-prices", "--json")
    assert r.code == 0, r.stderr
    counts = _counts(cli, "azure")
    assert counts["skypilot"] > 0 and counts["azure-prices"] == 3
    az = {s["source"]: s for s in r.json()["sources"]}["azure-prices"]
    assert any("offer(s) from skypilot replaced" in n for n in az["notes"])


@pytest.mark.slow  # two whole default runs
def test_dry_run_totals_are_the_real_runs(cli, full: RecordedServer) -> None:  # type: ignore[no-untyped-def]
    dry = cli("catalog", "update", "--fetch", "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    assert store_files() == {}
    real = cli("catalog", "update", "--fetch", "--json")
    assert real.code == 0, real.stderr
    assert dry.json()["offers_written"] == real.json()["offers_written"] > 500
    assert [s["clouds"] for s in dry.json()["sources"]] == [
        s["clouds"] for s in real.json()["sources"]
    ]
    stored = cli("catalog", "info", "--json").json()
    assert real.json()["offers_written"] == sum(
        layer["rows"] for layer in stored["layers"] if layer["kind"] == "store"
    )


def test_a_hundredfold_price_move_is_refused(
    cli, full: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "nebius")
    assert cli("catalog", "update", "--fetch", "skypilot").code == 0
    before = store_files()
    import csv
    import io

    text = (RECORDED / "skypilot" / "v8" / "nebius" / "vms.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        if row["Price"] and float(row["Price"]) > 0:
            row["Price"] = f"{float(row['Price']) * 100:g}"  # dollars read as cents, say
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(rows)
    lines = [out.getvalue()]
    full.overrides["/skypilot/v8/nebius/vms.csv"] = _body("".join(lines).encode())
    r = cli("catalog", "update", "--fetch", "skypilot")
    assert r.code == 2 and "price(s) moved 100× or more" in r.stderr, r.stderr
    assert store_files() == before
    r = cli("catalog", "update", "--fetch", "skypilot", "--allow-price-jump")
    assert r.code == 0, r.stderr


def _gpuhunt_csv(*rows: str) -> bytes:
    head = (WRITER / "oci.csv").read_text().splitlines()[0]
    return ("\r\n".join([head, *rows]) + "\r\n").encode()


def test_control_characters_and_oversize_fields_are_refused_per_row(
    cli, full: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    import io
    import zipfile

    monkeypatch.setenv("GPUWISE_GPUHUNT_PROVIDERS", "oci")
    good = "VM.GPU3.1,af-casablanca-1,2.95,12,90.0,1,V100,16.0,False,,nvidia,,x86,{}"
    nul = "VM.GPU3.1,us-ash\x00burn-1,2.95,12,90.0,1,V100,16.0,False,,nvidia,,x86,{}"
    esc = "VM.GPU3.1,eu-frankfurt-1,2.95,12,90.0,1,V100\x1b[31m,16.0,False,,nvidia,,x86,{}"
    long = f"{'X' * 300},af-casablanca-1,2.95,12,90.0,1,V100,16.0,False,,nvidia,,x86,{{}}"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("oci.csv", _gpuhunt_csv(good, nul, esc, long))
    full.overrides[f"/gpuhunt/oci/{GPUHUNT_VERSION}/catalog.zip"] = _body(buf.getvalue())
    r = cli("catalog", "update", "--fetch", "gpuhunt", "--json")
    assert r.code == 0, r.stderr
    (gh,) = r.json()["sources"]
    refused = {why.split(" (e.g.")[0]: n for why, n in gh["refused"].items()}
    assert refused == {
        "control character or NUL in region": 1,
        "control character or NUL in gpu": 1,
        "instance_type longer than 200 characters": 1,
    }
    assert b"\x00" not in store_path().read_bytes() and b"\x1b" not in store_path().read_bytes()
    (o,) = cli("offers", "--cloud", "oci", "--json").json()["offers"]
    assert o["region"] == "af-casablanca-1"


def _price_list(extra_sku: dict[str, object], price: str) -> bytes:
    doc = json.loads((FIXTURES / "aws-price-list" / "us-east-1" / "index.json").read_text())
    base = doc["products"]["P5SKU"]
    doc["products"]["P5DUP"] = {
        **base,
        "sku": "P5DUP",
        "attributes": {**base["attributes"], **extra_sku},
    }
    terms = json.loads(json.dumps(doc["terms"]["Reserved"]["P5SKU"]).replace("P5SKU", "P5DUP"))
    for term in terms.values():
        for dim in term["priceDimensions"].values():
            if dim["unit"] == "Hrs" and dim["pricePerUnit"]["USD"] == "37.0000000000":
                dim["pricePerUnit"]["USD"] = price
    doc["terms"]["Reserved"]["P5DUP"] = terms
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("attrs", "price", "refused"),
    [
        ({"licenseModel": "Bring your own license"}, "30.0000000000", 0),  # another product
        ({"preInstalledSw": "SQL Std"}, "90.0000000000", 0),
        ({"tenancy": "Dedicated"}, "41.0000000000", 0),
        ({"marketoption": "CapacityBlock"}, "20.0000000000", 0),
        ({"usagetype": "BoxUsage:p5.48xlarge-2"}, "39.0000000000", 1),  # same product, 2 prices
    ],
)
def test_aws_price_list_duplicates_resolved_by_attributes_or_refused_by_name(
    cli, server: FixtureServer, attrs: dict[str, object], price: str, refused: int
) -> None:  # type: ignore[no-untyped-def]
    server.overrides["/aws/us-east-1/index.json"] = _body(_price_list(attrs, price))
    r = cli("catalog", "update", "--fetch", "aws-price-list", "--json")
    assert r.code == 0, r.stderr
    (pl,) = r.json()["sources"]
    from gpuwise.catalog.risk import load_reserved_prices

    p5 = {
        x.term_years: x.usd_per_hour
        for x in load_reserved_prices()
        if x.instance_type == "p5.48xlarge"
    }
    if refused:
        ((why, n),) = pl["refused"].items()
        assert n == 1 and "P5DUP 39 vs P5SKU 37" in why and "p5.48xlarge in us-east-1 1y" in why
        assert 1 not in p5 and p5[3] == 26  # the 3-year term agreed
    else:
        assert pl["refused"] == {} and p5 == {1: 37, 3: 26}


def test_progress_lines_and_exit_codes_for_a_partial_and_an_empty_run(
    cli, full: RecordedServer
) -> None:  # type: ignore[no-untyped-def]
    full.overrides["/spot-advisor-data.json"] = _body(b"<html>maintenance</html>")
    r = cli("catalog", "update", "--fetch", "skypilot", "aws-spot-advisor")
    assert r.code == 3, r.stderr  # some refused, the store updated from the rest
    lines = r.stderr.splitlines()
    assert lines[0].startswith("[1/2] skypilot: ") and " offers (" in lines[0]
    assert lines[1].startswith("[2/2] aws-spot-advisor: refused")
    assert "1 of 2 source(s) refused; the store was updated from the other 1 (exit 3)" in r.stderr
    assert store_path().is_file()
    before = store_files()
    full.overrides["/aws/us-east-1/index.json"] = _body(b"<html>maintenance</html>")
    r = cli("catalog", "update", "--fetch", "aws-spot-advisor", "aws-price-list")
    assert r.code == 2  # nothing could be fetched: the store is as it was
    assert "nothing was imported, the store is unchanged (exit 2)" in r.stderr
    assert store_files() == before


def test_default_fetch_exits_0_and_azure_pages_through_a_443_link(
    cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The done-when run: every default source from recordings on loopback over HTTPS on port 443
    of a 127/8 address (a self-signed certificate the client is told to trust), the Azure API's
    next links spelling out ``:443`` as the real API does, the whole Spot Advisor file."""
    host = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
    tls, cert = self_signed_tls(host, tmp_path)
    try:
        srv = _Full(host, 443, tls)
    except OSError:
        pytest.skip("cannot bind port 443 on a loopback address (needs root)")
    try:
        _serve(monkeypatch, srv)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        assert srv.base == f"https://{host}" and srv.next_base == f"https://{host}:443"
        r = cli("catalog", "update", "--fetch", "--json")
        assert r.code == 0, r.stderr
        assert "/azure/page2" in srv.hits  # reached through https://<host>:443/azure/page2
        by = {s["source"]: s for s in r.json()["sources"]}
        assert by["aws-spot-advisor"]["spot_risks"] >= 800
        assert by["azure-prices"]["reserved_prices"] == 2
    finally:
        srv.close()


def test_a_fetch_keeps_your_csv_rows_and_says_it_drops_bundled_ones(
    cli, full: RecordedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """`--from-csv` merges into the catalog in effect, so the store holds bundled AWS rows too; a
    fetch covering AWS drops those (said in its notes) and keeps the CSV's own row."""
    from gpuwise.catalog import OFFER_COLUMNS

    mine = tmp_path / "mine.csv"
    row = ["aws", "us-east-1", "", "my-deal.8x", "H100", "8", "80", "", "", "12.5", "", "x86_64"]
    mine.write_text(
        ",".join(OFFER_COLUMNS[:14]) + "\n" + ",".join([*row, "my-broker", "2026-11"]) + "\n"
    )
    assert cli("catalog", "update", "--from-csv", mine).code == 0
    assert _counts(cli, "aws")["bundled"] > 1000
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "aws")
    r = cli("catalog", "update", "--fetch", "skypilot", "--json")
    assert r.code == 0, r.stderr
    counts = _counts(cli, "aws")
    assert "bundled" not in counts and counts["my-broker"] == 1 and counts["skypilot"] > 0
    (sky,) = r.json()["sources"]
    assert any(
        "offer(s) of the bundled snapshot kept in the store dropped" in n for n in sky["notes"]
    )


def test_a_partial_run_records_the_refused_source_in_the_history(
    cli, full: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "nebius")
    full.overrides["/spot-advisor-data.json"] = _body(b"<html>maintenance</html>")
    assert cli("catalog", "update", "--fetch", "skypilot", "aws-spot-advisor").code == 3
    history = cli("catalog", "info", "--json").json()["history"]
    (bad,) = [h for h in history if h["source"] == "aws-spot-advisor"]
    assert "not valid JSON" in bad["refused"]
    assert "source refused" in cli("catalog", "info").stdout


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.473657, "0.47 s"), (1.0, "1 s"), (3.21, "3.2 s"), (41.7, "42 s")]
)
def test_seconds_in_messages_are_rounded(seconds: float, text: str) -> None:
    from gpuwise.catalog import seconds_text

    assert seconds_text(seconds) == text


def test_progress_is_a_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    from gpuwise.cli.catalog import _FetchProgress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("TERM", "xterm")
    with _FetchProgress(2) as progress:
        progress.start("skypilot")
        progress.done("skypilot", "10 offers")
        progress.start("azure-prices")
        progress.done("azure-prices", "refused (error below)")
        assert progress.bar is not None and progress.bar.tasks[0].completed == 2
    out = err.getvalue()
    assert "[1/2] skypilot: 10 offers" in out and "[2/2] azure-prices: refused" in out
    assert "\x1b[" in out  # drawn with terminal control codes, unlike the plain lines


def test_a_source_replacing_many_rows_of_another_with_few_is_refused(
    cli, full: RecordedServer, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """SkyPilot lists AWS per zone; gpuhunt per region. Ranked first, gpuhunt would replace the
    zone rows of each type it lists with one row: the store's AWS shrinks, across sources."""
    monkeypatch.setenv("GPUWISE_SKYPILOT_CLOUDS", "aws")
    monkeypatch.setenv("GPUWISE_GPUHUNT_PROVIDERS", "aws")
    monkeypatch.setattr(full, "gpuhunt_dir", RECORDED / "gpuhunt")
    assert cli("catalog", "update", "--fetch", "skypilot").code == 0
    sky = _counts(cli, "aws")["skypilot"]
    before = store_files()
    monkeypatch.setenv("GPUWISE_CATALOG_PRECEDENCE", "aws=gpuhunt,skypilot")
    r = cli("catalog", "update", "--fetch", "gpuhunt")
    assert r.code == 2, r.stderr
    assert f"aws would go from {sky} offers in the store ({sky} from skypilot)" in r.stderr
    assert store_files() == before
    r = cli("catalog", "update", "--fetch", "gpuhunt", "--allow-shrink", "--json")
    assert r.code == 0, r.stderr
    assert _counts(cli, "aws")["gpuhunt"] > 0
