"""How fast is `gpuwise plan`? In process over the full bundled catalog, and end to end as a CLI.

Prints a table (medians of ``--runs``: wall time, and CPU time for the in-process measures).
Targets (issue 4, kept by issue 12 with the per-offer settings search on): plan over
the full catalog (all clouds, regions, billings, 1-8 nodes) < 200 ms in process; the CLI < 1 s wall.
Also prints how many job settings the search evaluated.

Optionally, side by side with SkyPilot on the same catalog rows: give a Python that has
SkyPilot installed (``--sky-python``) and the SkyPilot-schema CSVs the bundled snapshot was built
from (``--sky-catalog``, one ``<cloud>.csv`` per cloud). The script puts them in a temporary
``~/.sky/catalogs/v8/<cloud>/vms.csv`` (plus ``common/accelerators.csv``) so SkyPilot runs
offline, then times (a) its optimizer choosing among every accelerator:count the catalog has
(SkyPilot assumes a 1-hour runtime and ranks by hourly price) and (b) ``list_accelerators``
over all regions, the work behind ``sky show-gpus --all-regions``.

    PYTHONPATH=src python benchmarks/plan_speed.py [--runs 5] \\
        [--sky-python /path/to/venv-with-skypilot/bin/python --sky-catalog DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MAIN_JOB = ["--model", "llama-3.1-8b", "--task", "lora", "--tokens", "2B", "--deadline", "24h"]

SKY_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
import sky
from sky import catalog, check, optimizer
from sky.utils import registry
t1 = time.perf_counter()
clouds = sys.argv[1].split(",")
accs = json.loads(sys.argv[2])
enabled = [registry.CLOUD_REGISTRY.from_str(c) for c in clouds]
# no credentials offline: tell the optimizer which clouds are enabled
check.get_cached_enabled_clouds_or_refresh = lambda *a, **k: enabled
optimizer.sky_check.get_cached_enabled_clouds_or_refresh = lambda *a, **k: enabled
times = []
for _ in range(int(sys.argv[3])):
    with sky.Dag() as dag:
        task = sky.Task(run="echo", num_nodes=1)
        task.set_resources({sky.Resources(accelerators=a, use_spot=s) for a in accs for s in (False, True)})
    t = time.perf_counter()
    optimizer.Optimizer.optimize(dag, minimize=sky.OptimizeTarget.COST, quiet=True)
    times.append(time.perf_counter() - t)
t = time.perf_counter()
catalog.list_accelerators(gpus_only=True, name_filter=None, region_filter=None, quantity_filter=None,
                          clouds=clouds, case_sensitive=False, all_regions=True)
show = time.perf_counter() - t
print(json.dumps({"import_s": t1 - t0, "optimize_s": sorted(times)[len(times) // 2], "show_gpus_s": show,
                  "chosen": str(task.best_resources)}))
"""


CPU: dict[str, float] = {}
"""Median CPU time (this process) of each in-process measure, by name: the wall time on a shared
machine includes waiting for a core; the CPU time is the work."""


def median_time(fn, runs: int, name: str = "") -> float:  # type: ignore[no-untyped-def]
    times, cpu = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    if name:
        CPU[name] = statistics.median(cpu)
    return statistics.median(times)


def bench_in_process(runs: int) -> dict[str, float]:
    from gpuwise.catalog import load_catalog
    from gpuwise.catalog.reserved import load_reserved_terms
    from gpuwise.estimate import workload_from_options
    from gpuwise.planner import EstimatorModel, PlanRequest, load_spot_defaults, plan_offers

    wl = workload_from_options(model="llama-3.1-8b", task="lora", tokens="2B")
    request = PlanRequest(deadline_hours=24.0, max_nodes=8)
    offers = load_catalog().offers
    spot, reserved = load_spot_defaults(), load_reserved_terms()
    last = {}

    def cold() -> (
        None
    ):  # a fresh estimator cache: every (GPU, count, nodes, network) searched again
        last["plan"] = plan_offers(
            offers, EstimatorModel(wl), request, spot=spot, reserved=reserved
        )

    def fixed() -> (
        None
    ):  # the workload's own settings, no search (what the planner did before issue 12)
        plan_offers(
            offers, EstimatorModel(wl, search=False), no_search, spot=spot, reserved=reserved
        )

    no_search = PlanRequest(deadline_hours=24.0, max_nodes=8, search_settings=False)

    model = EstimatorModel(wl)
    plan_offers(offers, model, request, spot=spot, reserved=reserved)

    def warm() -> None:
        plan_offers(offers, model, request, spot=spot, reserved=reserved)

    def with_catalog() -> None:
        from gpuwise.planner import plan

        plan(wl, request)

    big = ten_copies(offers)

    def ten_x() -> None:  # a fresh estimator cache on a catalog ten times the size
        plan_offers(big, EstimatorModel(wl), request, spot=spot, reserved=reserved)

    out = {
        "load_catalog_s": median_time(load_catalog, runs, "load_catalog_s"),
        "plan_cold_s": median_time(cold, runs, "plan_cold_s"),
        "plan_fixed_s": median_time(fixed, runs, "plan_fixed_s"),
        "plan_warm_s": median_time(warm, runs, "plan_warm_s"),
        "plan_incl_catalog_s": median_time(with_catalog, runs, "plan_incl_catalog_s"),
        "plan_10x_s": median_time(ten_x, max(1, runs // 2), "plan_10x_s"),
    }
    p = last["plan"]
    out.update(
        offers=len(offers),
        considered=p.considered,
        options=len(p.options),
        rejected_groups=len(p.rejected),
        settings_evaluated=p.settings_evaluated,
    )
    return out


def ten_copies(offers):  # type: ignore[no-untyped-def]
    """The catalog ten times over, each copy in its own regions (``us-east-1~3``) and with its
    prices varied (copy k: × (0.90 + 0.02 k), and ±3% per row from a hash of the row), so no two
    copies merge into one option: the planner prices 10× the sites."""
    import dataclasses
    import zlib

    out = []
    for k in range(10):
        for o in offers:
            h = zlib.crc32(f"{k}/{o.cloud}/{o.region}/{o.zone}/{o.instance_type}".encode())
            f = (0.90 + 0.02 * k) * (0.97 + 0.06 * (h % 1000) / 999)
            out.append(
                dataclasses.replace(
                    o,
                    region=f"{o.region}~{k}",
                    on_demand_usd_per_hour=None
                    if o.on_demand_usd_per_hour is None
                    else o.on_demand_usd_per_hour * f,
                    spot_usd_per_hour=None
                    if o.spot_usd_per_hour is None
                    else o.spot_usd_per_hour * f,
                )
            )
    return out


def bench_cli(runs: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        r = subprocess.run(
            [sys.executable, "-m", "gpuwise", "plan", *MAIN_JOB, "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        times.append(time.perf_counter() - t)
        if r.returncode not in (0, 3):
            raise SystemExit(f"gpuwise plan failed: {r.stderr}")
    return statistics.median(times)


def bench_sky(sky_python: str, sky_catalog: Path, runs: int) -> dict[str, object]:
    from gpuwise.catalog import load_catalog
    from gpuwise.hardware import gpu_table

    clouds = sorted(p.stem for p in sky_catalog.glob("*.csv"))
    table = gpu_table()
    # the GPUs gpuwise can plan (Inferentia, Trainium, ... have no datasheet row and no estimate)
    accs = sorted(
        {
            f"{o.gpu}:{int(o.gpu_count)}"
            for o in load_catalog().offers
            if o.gpu_count >= 1 and o.gpu_count == int(o.gpu_count) and table.get(o.gpu) is not None
        }
    )
    with tempfile.TemporaryDirectory() as home:
        root = Path(home) / ".sky" / "catalogs" / "v8"
        names: dict[str, set[str]] = {}
        for cloud in clouds:
            (root / cloud).mkdir(parents=True)
            text = (sky_catalog / f"{cloud}.csv").read_text()
            (root / cloud / "vms.csv").write_text(text)
            for row in csv.DictReader(text.splitlines()):
                if row.get("AcceleratorName"):
                    names.setdefault(row["AcceleratorName"], set()).add(cloud)
        (root / "common").mkdir()
        with open(root / "common" / "accelerators.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["AcceleratorName", "Clouds"])
            for name, cs in sorted(names.items()):
                w.writerow([name, ",".join(sorted(cs))])
        known = {n.lower() for n in names}
        accs = [a for a in accs if a.split(":")[0].lower() in known]
        t = time.perf_counter()
        r = subprocess.run(
            [
                sky_python,
                "-c",
                SKY_SCRIPT,
                ",".join(c for c in clouds if c != "azure"),
                json.dumps(accs),
                str(runs),
            ],
            env={**os.environ, "HOME": home},
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - t
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"}
    doc: dict[str, object] = json.loads(r.stdout.strip().splitlines()[-1])
    doc["wall_s"] = wall
    doc["candidates"] = len(accs) * 2
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sky-python", help="a python with SkyPilot installed")
    ap.add_argument("--sky-catalog", type=Path, help="folder of SkyPilot-schema <cloud>.csv files")
    args = ap.parse_args()
    t = time.perf_counter()
    import gpuwise.planner  # noqa: F401  (import cost is part of the CLI number, not the in-process one)

    ip = bench_in_process(args.runs)
    cli = bench_cli(args.runs)
    print(
        f"gpuwise plan speed (median of {args.runs}; {ip['offers']} catalog rows, {ip['considered']} offer x "
        f"nodes x billing combinations priced, {ip['options']} options, {ip['rejected_groups']} rejection groups, "
        f"{ip['settings_evaluated']} job settings evaluated by the search)"
    )
    print(f"{'measure':72} {'wall':>10} {'CPU':>8}  target")
    rows = [
        ("load the bundled catalog (load_catalog)", ip["load_catalog_s"], ""),
        (
            "plan_offers, cold cache, settings search on (all clouds/regions/billings, 1-8 nodes)",
            ip["plan_cold_s"],
            "< 200 ms",
        ),
        (
            "plan_offers, cold cache, the workload's own settings (no search)",
            ip["plan_fixed_s"],
            "",
        ),
        ("plan_offers, warm estimator cache", ip["plan_warm_s"], ""),
        (
            "gpuwise.planner.plan(): catalog load + plan, in process",
            ip["plan_incl_catalog_s"],
            "< 200 ms",
        ),
        (
            "plan_offers, cold cache, search on, 10x catalog (prices varied per copy)",
            ip["plan_10x_s"],
            "<= 500 ms (goal)",
        ),
        ("CLI wall: python -m gpuwise plan <README main job> --json", cli, "< 1 s"),
    ]
    keys = [
        "load_catalog_s",
        "plan_cold_s",
        "plan_fixed_s",
        "plan_warm_s",
        "plan_incl_catalog_s",
        "plan_10x_s",
    ]
    for i, (name, secs, target) in enumerate(rows):
        cpu = f"{CPU[keys[i]] * 1000:5.0f} ms" if i < len(keys) and keys[i] in CPU else " " * 8
        print(f"{name[:72]:72} {secs * 1000:7.0f} ms {cpu}  {target}")
    if args.sky_python and args.sky_catalog:
        sky = bench_sky(args.sky_python, args.sky_catalog, args.runs)
        if "error" in sky:
            print(f"SkyPilot: not run ({sky['error']})")
        else:
            opt = float(sky["optimize_s"])  # type: ignore[arg-type]
            show = float(sky["show_gpus_s"])  # type: ignore[arg-type]
            print(
                f"{'SkyPilot optimizer, ' + str(sky['candidates']) + ' accelerator x spot candidates':72} "
                f"{opt * 1000:8.0f} ms  ratio to gpuwise cold plan: {opt / ip['plan_cold_s']:.1f}x"
            )
            print(
                f"{'SkyPilot list_accelerators (show-gpus --all-regions)':72} {show * 1000:8.0f} ms  "
                f"ratio: {show / ip['plan_cold_s']:.1f}x"
            )
            print(f"{'SkyPilot import':72} {float(sky['import_s']) * 1000:8.0f} ms")  # type: ignore[arg-type]
            print(f"SkyPilot's choice (1-hour runtime, hourly price): {sky['chosen']}")
    print(f"(total benchmark time {time.perf_counter() - t:.1f} s)")


if __name__ == "__main__":
    main()
