"""How fast the catalog answers: load + `offers --gpu H100 --count 8` in process, and `--help` wall time.

    python benchmarks/catalog_speed.py [--repeat 20]

Targets (issue 2): load the bundled catalog and answer the query in < 100 ms in process;
`gpuwise --help` in < 0.3 s wall on a 2-core machine. Issue 13: with a catalog store 10× the
bundled one (~40,000 offers, as after `catalog update --fetch` of many clouds), `offers` answers in
≤ 150 ms in process and `plan` (gpt2 LoRA, 20M tokens) over it in ≤ 500 ms.

Issue 22 (``--fetch-only`` runs just these): `catalog update --fetch skypilot` of a SkyPilot file 10×
the recorded Lambda file, served on 127.0.0.1 (wall time through the CLI), and the peak RSS of
`catalog update --fetch aws-price-list` on a synthetic price list of ``--price-list-mb`` MB in the AWS
layout (goal: ≤ 2× the file size), next to the same file read with ``json.load`` (the old parser).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_big_store(home: Path, factor: int = 10) -> int:
    """A catalog store of ``factor`` × the bundled offers (regions renamed per copy); returns its size."""
    import dataclasses
    import hashlib
    import json

    from gpuwise.catalog.offer import offers_to_csv
    from gpuwise.catalog.sources import BundledSnapshot

    offers, _, _ = BundledSnapshot().read()
    big = [
        dataclasses.replace(
            o,
            region=f"{o.region}-copy{i}" if i else o.region,
            source="bench:10x",
            as_of="2026-11-24",
        )
        for i in range(factor)
        for o in offers
    ]
    folder = home / "data" / "catalog"
    folder.mkdir(parents=True, exist_ok=True)
    store = folder / "offers.csv"
    store.write_text(offers_to_csv(big))
    (folder / "manifest.json").write_text(
        json.dumps({"sha256": hashlib.sha256(store.read_bytes()).hexdigest()})
    )
    return len(big)


def big_store(
    repeat: int,
) -> tuple[int, list[float], list[float], list[float], list[float], list[float], list[float]]:
    """(offers, wall ms of load + offers query, of load + plan, then the same two as CPU ms, CPU ms of
    plan_offers alone, CPU ms of load + offers with no cache yet) in a fresh interpreter over a 10× store. CPU time is shown too: on a shared machine wall time
    mostly measures the other jobs."""
    code = (
        "import time; from gpuwise.catalog import load_catalog, query_offers, sort_offers, OfferQuery;"
        "from gpuwise.planner import plan_offers, PlanRequest, EstimatorModel, load_spot_defaults;"
        "from gpuwise.catalog.reserved import load_reserved_terms;"
        "from gpuwise.estimate import workload_from_options;"
        "c0=time.process_time(); t0=time.perf_counter(); c=load_catalog();"
        "r=sort_offers(query_offers(c.offers, OfferQuery(gpu='H100', count=8)));"
        "t1=time.perf_counter(); c1=time.process_time();"
        "w=workload_from_options(model='gpt2', task='lora', tokens='20M');"
        "c2=time.process_time(); t2=time.perf_counter(); c=load_catalog(); c4=time.process_time();"
        "p=plan_offers(c.offers, EstimatorModel(w), PlanRequest(), spot=load_spot_defaults(), "
        "reserved=load_reserved_terms()); t3=time.perf_counter(); c3=time.process_time();"
        "print((t1-t0)*1000, (t3-t2)*1000, (c1-c0)*1000, (c3-c2)*1000, (c3-c4)*1000)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        env = {**os.environ, "GPUWISE_SKYPILOT_CATALOG": "off", "GPUWISE_HOME": str(home)}
        n = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r});"
                f"from catalog_speed import make_big_store; from pathlib import Path;"
                f"print(make_big_store(Path({tmp!r})))",
            ],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout.strip()
        runs = [
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
            ).stdout.split()
            for _ in range(repeat + 1)
        ]
    # the first run parses the hand-written CSV and writes the parsed-store cache; later runs read it
    # (after `catalog update` every run is a later run: the update writes the cache)
    return int(n), *([float(r[i]) for r in runs[1:]] for i in range(5)), [float(runs[0][2])]  # type: ignore[return-value]


def in_process(repeat: int) -> tuple[list[float], list[float]]:
    code = (
        "import time; t0=time.perf_counter();"
        "from gpuwise.catalog import load_catalog, query_offers, sort_offers, OfferQuery;"
        "t1=time.perf_counter();"
        "c=load_catalog(); r=sort_offers(query_offers(c.offers, OfferQuery(gpu='H100', count=8)));"
        "t2=time.perf_counter(); print((t1-t0)*1000, (t2-t1)*1000)"
    )
    env = {**os.environ, "GPUWISE_SKYPILOT_CATALOG": "off"}
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        ).stdout.split()
        for _ in range(repeat)
    ]
    return [float(r[0]) for r in runs], [float(r[1]) for r in runs]


def wall(args: list[str], repeat: int) -> list[float]:
    env = {**os.environ, "GPUWISE_SKYPILOT_CATALOG": "off"}
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gpuwise", *args], capture_output=True, check=True, env=env
        )
        times.append((time.perf_counter() - t) * 1000)
    return times


RECORDED = Path(__file__).resolve().parents[1] / "tests" / "catalog" / "recorded"


def _serve(files: dict[str, bytes]) -> tuple[object, str]:
    """A loopback HTTP server for ``files`` (path → body); returns (server, base URL)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = files.get(self.path.split("?")[0])
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def _run_cli(args: list[str], env: dict[str, str]) -> tuple[float, int]:
    """(wall ms, peak RSS bytes) of ``python -m gpuwise ARGS`` in a fresh process."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwise", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall_ms = (time.perf_counter() - t) * 1000
    err = proc.stderr.read().decode() if proc.stderr else ""
    if status != 0:
        raise SystemExit(f"gpuwise {' '.join(args)} failed: {err.strip()}")
    return wall_ms, usage.ru_maxrss * 1024  # Linux reports KiB


def _fetch_env(home: Path, base: str) -> dict[str, str]:
    return {
        **os.environ,
        "GPUWISE_HOME": str(home),
        "GPUWISE_SKYPILOT_CATALOG": "off",
        "GPUWISE_SKYPILOT_CATALOG_URL": f"{base}/skypilot/v8",
        "GPUWISE_SKYPILOT_COMMITS_URL": "off",
        "GPUWISE_SKYPILOT_CLOUDS": "lambda",
        "GPUWISE_AWS_PRICE_LIST_URL": f"{base}/aws",
        "GPUWISE_AWS_PRICE_LIST_REGIONS": "us-east-1",
        "GPUWISE_FETCH_MAX_BYTES": str(4 << 30),
    }


def fetch_10x(repeat: int) -> tuple[int, int, list[float]]:
    """(rows, bytes, wall ms per run) of `catalog update --fetch skypilot` of a 10× Lambda file."""
    lines = (RECORDED / "skypilot" / "v8" / "lambda" / "vms.csv").read_text().splitlines()
    rows = [
        line.replace(",us-", f",c{i}-us-")
        .replace(",asia-", f",c{i}-asia-")
        .replace(",europe-", f",c{i}-europe-")
        if i
        else line
        for i in range(10)
        for line in lines[1:]
    ]
    body = ("\n".join([lines[0], *rows]) + "\n").encode()
    httpd, base = _serve({"/skypilot/v8/lambda/vms.csv": body})
    times = []
    try:
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                env = _fetch_env(Path(tmp), base)
                times.append(_run_cli(["catalog", "update", "--fetch", "skypilot"], env)[0])
    finally:
        httpd.shutdown()  # type: ignore[attr-defined]
    return len(rows), len(body), times


def synthetic_price_list(path: Path, target_mb: float) -> int:
    """An AWS EC2 price-list file of about ``target_mb`` MB in the published layout (products,
    terms.OnDemand, terms.Reserved; 1 product in 20 a GPU type); returns its size in bytes."""
    import json

    kinds = ["m5.large", "c5.xlarge", "r5.2xlarge", "t3.medium"] * 5
    kinds[7] = "p5.48xlarge"
    with open(path, "w") as fh:
        fh.write('{"formatVersion":"v1.0","disclaimer":"synthetic","offerCode":"AmazonEC2",')
        fh.write('"version":"20261120000000","publicationDate":"2026-11-20T00:00:00Z","products":{')
        n = 0
        skus = []
        while fh.tell() < target_mb * 1e6 * 0.21:  # products are ~1/5 of the file
            sku = f"SKU{n:010d}"
            itype = kinds[n % len(kinds)].replace(".", f".{n % 97}x" if n % 20 else ".")
            attrs = {
                "servicecode": "AmazonEC2",
                "location": "US East (N. Virginia)",
                "locationType": "AWS Region",
                "instanceType": itype,
                "currentGeneration": "Yes",
                "instanceFamily": "General purpose",
                "vcpu": "8",
                "physicalProcessor": "Intel Xeon",
                "memory": "32 GiB",
                "storage": "EBS only",
                "networkPerformance": "Up to 10 Gigabit",
                "processorArchitecture": "64-bit",
                "tenancy": "Shared",
                "operatingSystem": "Linux",
                "licenseModel": "No License required",
                "usagetype": f"BoxUsage:{itype}",
                "operation": "RunInstances",
                "capacitystatus": "Used",
                "preInstalledSw": "NA",
                "regionCode": "us-east-1",
                "servicename": "Amazon Elastic Compute Cloud",
            }
            fh.write(
                ("," if n else "")
                + json.dumps(sku)
                + ":"
                + json.dumps({"sku": sku, "productFamily": "Compute Instance", "attributes": attrs})
            )
            skus.append(sku)
            n += 1
        fh.write('},"terms":{"Reserved":{')
        for i, sku in enumerate(skus):
            terms = {}
            for j, (length, option) in enumerate(
                [
                    (y, o)
                    for y in ("1yr", "3yr")
                    for o in ("No Upfront", "Partial Upfront", "All Upfront")
                ]
            ):
                code = f"{sku}.R{j:04d}"
                terms[code] = {
                    "offerTermCode": code,
                    "sku": sku,
                    "effectiveDate": "2026-11-01T00:00:00Z",
                    "priceDimensions": {
                        f"{code}.6YS6EN2CT7": {
                            "rateCode": f"{code}.6YS6EN2CT7",
                            "description": "synthetic",
                            "beginRange": "0",
                            "endRange": "Inf",
                            "unit": "Hrs",
                            "pricePerUnit": {"USD": f"{1.5 + j / 10:.10f}"},
                            "appliesTo": [],
                        }
                    },
                    "termAttributes": {
                        "LeaseContractLength": length,
                        "OfferingClass": "standard",
                        "PurchaseOption": option,
                    },
                }
            fh.write(("," if i else "") + json.dumps(sku) + ":" + json.dumps(terms))
        fh.write("}}}\n")
        return fh.tell()


def price_list_rss(target_mb: float) -> tuple[int, int, int, int, float]:
    """(file bytes, peak RSS of the fetch, of the same fetch on a tiny file, of json.load, wall ms)."""
    tiny = (
        Path(__file__).resolve().parents[1]
        / "tests/catalog/fixtures/aws-price-list/us-east-1/index.json"
    )
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "index.json"
        size = synthetic_price_list(big, target_mb)
        out = []
        for body in (big.read_bytes(), tiny.read_bytes()):
            httpd, base = _serve({"/aws/us-east-1/index.json": body})
            del body
            try:
                with tempfile.TemporaryDirectory() as home:
                    env = _fetch_env(Path(home), base)
                    out.append(_run_cli(["catalog", "update", "--fetch", "aws-price-list"], env))
            finally:
                httpd.shutdown()  # type: ignore[attr-defined]
        code = f"import json; json.load(open({str(big)!r}, 'rb'))"
        proc = subprocess.Popen([sys.executable, "-c", code])
        _, _, usage = os.wait4(proc.pid, 0)
    return size, out[0][1], out[1][1], usage.ru_maxrss * 1024, out[0][0]


def fetch_rows(repeat: int, price_list_mb: float) -> None:
    rows, nbytes, times = fetch_10x(repeat)
    size, peak, base, old, wall_ms = price_list_rss(price_list_mb)
    print()
    print(f"{'fetch (issue 22)':<72} {'median':>10} {'min':>8} {'target':>8}")
    print(
        f"{f'catalog update --fetch skypilot, 10x Lambda file ({rows:,} rows, {nbytes / 1e6:.1f} MB), ms':<72} "
        f"{statistics.median(times):>10.1f} {min(times):>8.1f} {'—':>8}"
    )
    mb = 1 << 20
    print(f"{'price list file, MiB':<72} {size / mb:>10.1f}")
    print(
        f"{f'catalog update --fetch aws-price-list: peak RSS, MiB ({wall_ms / 1000:.1f} s)':<72} {peak / mb:>10.1f} {'':>8} {'<' + format(2 * size / mb, '.0f'):>8}"
    )
    print(f"{'  peak RSS / file size':<72} {peak / size:>10.2f} {'':>8} {'≤2.00':>8}")
    print(f"{'  same command on a 5 KB price list (baseline), MiB':<72} {base / mb:>10.1f}")
    print(f"{'  (peak - baseline) / file size':<72} {(peak - base) / size:>10.2f}")
    print(
        f"{'json.load of the same file (the parser before), peak RSS / file size':<72} {old / size:>10.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--fetch-only", action="store_true", help="only the issue-22 fetch rows")
    parser.add_argument("--price-list-mb", type=float, default=140.0)
    opts = parser.parse_args()
    n = opts.repeat
    if opts.fetch_only:
        fetch_rows(max(3, n // 4), opts.price_list_mb)
        return
    imports, load_query = in_process(n)
    size, big_offers, big_plan, big_offers_cpu, big_plan_cpu, plan_only_cpu, cold_cpu = big_store(
        max(3, n // 4)
    )
    rows = [
        ("import gpuwise.catalog (fresh interpreter)", imports, None),
        ("load bundled catalog + offers --gpu H100 --count 8 (in process)", load_query, 100.0),
        ("gpuwise --help (wall)", wall(["--help"], n), 300.0),
        (
            "gpuwise offers --gpu H100 --count 8 --json (wall)",
            wall(["offers", "--gpu", "H100", "--count", "8", "--json"], n),
            None,
        ),
        (
            f"10x store ({size:,} offers): load + offers --gpu H100 --count 8 (in process)",
            big_offers,
            150.0,
        ),
        (
            f"10x store ({size:,} offers): load + plan gpt2 lora 20M tokens (in process)",
            big_plan,
            500.0,
        ),
        (f"10x store ({size:,} offers): load + offers, CPU time", big_offers_cpu, 150.0),
        (f"10x store ({size:,} offers): load + plan, CPU time", big_plan_cpu, 500.0),
        (f"10x store ({size:,} offers): plan_offers alone, CPU time", plan_only_cpu, None),
        (
            f"10x store ({size:,} offers): load + offers, CPU, first run (no cache yet)",
            cold_cpu,
            None,
        ),
    ]
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'what':<72} {'median ms':>10} {'min ms':>8} {'target':>8}")
    for name, times, target in rows:
        print(
            f"{name:<72} {statistics.median(times):>10.1f} {min(times):>8.1f} "
            f"{(f'<{target:.0f}' if target else '—'):>8}"
        )
    fetch_rows(max(3, n // 4), opts.price_list_mb)


if __name__ == "__main__":
    main()
