"""How fast the catalog answers: load + `offers --gpu H100 --count 8` in process, and `--help` wall time.

    python benchmarks/catalog_speed.py [--repeat 20]

Targets (issue 2): load the bundled catalog and answer the query in < 100 ms in process;
`gpuwise --help` in < 0.3 s wall on a 2-core machine. Issue 13: with a catalog store 10× the
bundled one (~40,000 offers, as after `catalog update --fetch` of many clouds), `offers` answers in
≤ 150 ms in process and `plan` (gpt2 LoRA, 20M tokens) over it in ≤ 500 ms.
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    n = parser.parse_args().repeat
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


if __name__ == "__main__":
    main()
