"""The 30-day report on a CPU (issue 34 goal: ≤ 5 s and ≤ 200 MB RSS); prints a table.

    PYTHONPATH=src python benchmarks/monitor_report_30d.py [--days 30]

Builds the history of 8 GPUs read every 10 s for 30 days (2,073,600 rows, the layout
`benchmarks/monitor_perf.py` fills), then runs `gpuwise report --db … --since 30d --json` in a
fresh process, measuring its CPU time, wall clock and peak RSS (getrusage of the child), imports
included. On a shared machine the wall clock also waits for others' work: compare CPU time. The window is folded into 5-minute rows in SQL
(`HistoryStore.read`); the same report over the raw rows, in a second process, is the before.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from monitor_perf import fill_month

from gpuwise.monitor.store import HistoryStore

END = 1_800_000_000
RAW = """
import sys, time
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.report import build_report, report_to_dict
from gpuwise.monitor.store import HistoryStore
with HistoryStore(sys.argv[1], create=False) as store:
    h = store.read(float(sys.argv[2]), float(sys.argv[3]), bucket_s=0)
report_to_dict(build_report(h, PriceBook(price_usd_per_hour=3.0)))
"""


def _run(cmd: list[str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MB) of the child, its stdout. On
    a shared machine the wall clock waits for other work; the CPU time is what the report costs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, check=True, env=os.environ.copy())
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # getrusage keeps the largest child's peak: run the smaller child first
    return wall, cpu, after.ru_maxrss / 1024, r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=30.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "month.sqlite"
        with HistoryStore(db) as store:
            rows = fill_month(store, args.days, END)
            store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        start = END - args.days * 86400
        since = f"{args.days:g}d"
        cli = [sys.executable, "-m", "gpuwise", "report", "--db", str(db), "--since", since]
        cli += ["--until", str(END), "--price-usd-per-hour", "3", "--json"]
        wall, cpu, rss, out = _run(cli)
        doc = json.loads(out)
        raw = _run([sys.executable, "-c", RAW, str(db), str(start), str(END)])
    raw_wall, raw_cpu, raw_rss, _ = raw
    print(f"{'measure':52s} {'value':>12s} {'goal':>8s}")
    print(f"{f'{args.days:g} days x 8 GPUs at 10 s: rows':52s} {rows:12,d} {'':>8s}")
    print(f"{'gpuwise report --since 30d --json: CPU (s)':52s} {cpu:12.2f} {'<= 5':>8s}")
    print(f"{'gpuwise report --since 30d --json: wall (s)':52s} {wall:12.2f} {'':>8s}")
    print(f"{'gpuwise report --since 30d --json: peak RSS (MB)':52s} {rss:12.0f} {'<= 200':>8s}")
    print(f"{'  allocated GPU-hours in the report':52s} {doc['allocated_hours']:12.1f} {'':>8s}")
    print(f"{'before (raw rows, in-process): CPU (s)':52s} {raw_cpu:12.2f} {'':>8s}")
    print(f"{'before (raw rows, in-process): wall (s)':52s} {raw_wall:12.2f} {'':>8s}")
    print(f"{'before (raw rows, in-process): peak RSS (MB)':52s} {raw_rss:12.0f} {'':>8s}")


if __name__ == "__main__":
    main()
