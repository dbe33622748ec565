"""How fast the catalog answers: load + `offers --gpu H100 --count 8` in process, and `--help` wall time.

    python benchmarks/catalog_speed.py [--repeat 20]

Targets (issue 2): load the bundled catalog and answer the query in < 100 ms in process;
`gpuwise --help` in < 0.3 s wall on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def in_process(repeat: int) -> tuple[list[float], list[float]]:
    code = (
        "import time; t0=time.perf_counter();"
        "from gpuwise.catalog import load_catalog, query_offers, sort_offers, OfferQuery;"
        "t1=time.perf_counter();"
        "c=load_catalog(); r=sort_offers(query_offers(c.offers, OfferQuery(gpu='H100', count=8)));"
        "t2=time.perf_counter(); print((t1-t0)*1000, (t2-t1)*1000)"
    )
    env = {**os.environ, "GPUWISE_SKYPILOT_CATALOG": "off"}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env=env).stdout.split() for _ in range(repeat)]
    return [float(r[0]) for r in runs], [float(r[1]) for r in runs]


def wall(args: list[str], repeat: int) -> list[float]:
    env = {**os.environ, "GPUWISE_SKYPILOT_CATALOG": "off"}
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gpuwise", *args], capture_output=True, check=True, env=env)
        times.append((time.perf_counter() - t) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    n = parser.parse_args().repeat
    imports, load_query = in_process(n)
    rows = [
        ("import gpuwise.catalog (fresh interpreter)", imports, None),
        ("load bundled catalog + offers --gpu H100 --count 8 (in process)", load_query, 100.0),
        ("gpuwise --help (wall)", wall(["--help"], n), 300.0),
        ("gpuwise offers --gpu H100 --count 8 --json (wall)", wall(["offers", "--gpu", "H100", "--count", "8", "--json"], n), None),
    ]
    print(f"{'what':<72} {'median ms':>10} {'min ms':>8} {'target':>8}")
    for name, times, target in rows:
        print(f"{name:<72} {statistics.median(times):>10.1f} {min(times):>8.1f} "
              f"{(f'<{target:.0f}' if target else '—'):>8}")


if __name__ == "__main__":
    main()
