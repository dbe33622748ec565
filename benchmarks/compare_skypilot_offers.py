"""gpuwise's catalog answers side by side with SkyPilot's, on the same catalog rows, and timed.

    python benchmarks/compare_skypilot_offers.py --sky-python /path/to/skyvenv/bin/python \\
        --catalog-dir DIR [--clouds aws,gcp,lambda,nebius] [--repeat 5]

SkyPilot runs in its own interpreter (``--sky-python``; it is not a gpuwise dependency) with HOME
set to a temporary folder holding ``.sky/catalogs/v8/<cloud>/vms.csv`` copied from
``--catalog-dir/<cloud>.csv``, so both tools read byte-identical rows and SkyPilot needs no
credentials, server or network. SkyPilot is asked through ``sky.catalog.list_accelerators``
(``all_regions=True``: one row per instance type and region, the cheapest zone) and
``sky.catalog.get_hourly_cost``/``get_accelerator_hourly_cost``; gpuwise through
``load_catalog`` + ``query_offers`` in process.

For each question (GPU:count) and cloud the script compares (a) the set of (instance type,
region) offers, on-demand and spot, (b) the cheapest on-demand and spot price, (c) per-region
prices for a few named rows, and prints every difference with the reason it found in the rows.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent / "src")
)  # gpuwise from this checkout

QUESTIONS = [
    ("H100", 8),
    ("A100-80GB", 8),
    ("A100", 1),
    ("A100", 8),
    ("L4", 1),
    ("T4", 1),
    ("H200", 8),
    ("B200", 8),
    ("A10G", 1),
    ("L40S", 1),
    ("V100", 8),
]
# (cloud, instance type, region, SkyPilot accelerator, count) for the per-region price check (c).
REGION_ROWS = [
    ("aws", "p5.48xlarge", "us-east-1", "H100", 8),
    ("aws", "p4d.24xlarge", "us-west-2", "A100", 8),
    ("aws", "g6.xlarge", "us-east-1", "L4", 1),
    ("aws", "p5e.48xlarge", "us-east-2", "H200", 8),
    ("gcp", "a3-highgpu-8g", "us-central1", "H100", 8),
    ("gcp", "a2-highgpu-1g", "us-central1", "A100", 1),
    ("gcp", "g2-standard-4", "us-central1", "L4", 1),
    ("gcp", "a4-highgpu-8g", "us-central1", "B200", 8),
    ("lambda", "gpu_8x_h100_sxm5", "us-east-1", "H100", 8),
    ("lambda", "gpu_1x_a100", "us-east-1", "A100", 1),
    ("nebius", "gpu-h100-sxm_8gpu-128vcpu-1600gb", "eu-north1", "H100", 8),
    ("nebius", "gpu-h200-sxm_8gpu-128vcpu-1600gb", "eu-north1", "H200", 8),
    ("azure", "Standard_ND96asr_v4", "eastus", "A100", 8),
    ("azure", "Standard_NC4as_T4_v3", "eastus", "T4", 1),
]

SKY_CHILD = r"""
import json, math, re, sys, time
t0 = time.perf_counter()
from sky import catalog
t_import = time.perf_counter() - t0
req = json.load(sys.stdin)

def num(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)

def ask(name, count):
    out = []
    res = catalog.list_accelerators(name_filter="^" + re.escape(name) + "$", quantity_filter=count,
                                    clouds=req["clouds"], all_regions=True, case_sensitive=True)
    for acc, infos in res.items():
        for i in infos:
            out.append([i.cloud.lower(), i.instance_type, i.region, acc, float(i.accelerator_count),
                        num(i.price), num(i.spot_price)])
    return out

answers, times = {}, []
for rep in range(req["repeat"]):
    for name, count in req["questions"]:
        t = time.perf_counter()
        rows = ask(name, count)
        times.append([rep, name, count, time.perf_counter() - t])
        answers[f"{name}:{count}"] = rows
region_prices = []
for cloud, itype, region, acc, count in req["region_rows"]:
    got = {}
    for spot in (False, True):
        try:
            p = catalog.get_hourly_cost(itype, use_spot=spot, region=region, zone=None, clouds=cloud)
            if cloud == "gcp":
                p += catalog.get_accelerator_hourly_cost(acc, count, use_spot=spot, region=region,
                                                         zone=None, clouds=cloud)
            got["spot" if spot else "od"] = num(p)
        except Exception as e:  # SkyPilot raises ValueError/AssertionError for 'not offered'
            got["spot" if spot else "od"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
    region_prices.append([cloud, itype, region, got])
gcp_rules = {}
if "gcp" in req["clouds"]:  # SkyPilot's own host rules, to explain GCP differences from its code, not a guess
    from sky.catalog import gcp_catalog as g
    gcp_rules = {"hosts": {a: {str(n): t for n, t in d.items()} for a, d in g._ACC_INSTANCE_TYPE_DICTS.items()},
                 "cpus": {a: {str(n): c for n, c in d.items()} for a, d in g._NUM_ACC_TO_NUM_CPU.items()},
                 "mem_per_cpu": g._DEFAULT_GPU_MEMORY_CPU_RATIO, "families": list(g._DEFAULT_HOST_VM_FAMILY)}
json.dump({"import_s": t_import, "answers": answers, "times": times, "region_prices": region_prices,
           "gcp_rules": gcp_rules}, sys.stdout)
"""


def run_skypilot(sky_python: str, catalog_dir: Path, clouds: list[str], repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="skycmp-home-") as home:
        for cloud in clouds:
            dest = Path(home, ".sky", "catalogs", "v8", cloud)
            dest.mkdir(parents=True)
            shutil.copyfile(catalog_dir / f"{cloud}.csv", dest / "vms.csv")
        req = {
            "clouds": clouds,
            "questions": QUESTIONS,
            "repeat": repeat,
            "region_rows": [r for r in REGION_ROWS if r[0] in clouds],
        }
        env = {"HOME": home, "PATH": "/usr/bin:/bin", "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
        t = time.perf_counter()
        proc = subprocess.run(
            [sky_python, "-c", SKY_CHILD],
            input=json.dumps(req),
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"SkyPilot child failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout)
    out["wall_s"] = wall
    return out


def run_gpuwise(catalog_dir: Path, clouds: list[str], repeat: int) -> dict:
    t0 = time.perf_counter()
    from gpuwise.catalog import OfferQuery, load_catalog, query_offers
    from gpuwise.errors import GpuwiseError

    t_import = time.perf_counter() - t0
    paths = [catalog_dir / f"{c}.csv" for c in clouds]
    t = time.perf_counter()
    cat = load_catalog(paths)
    t_load = time.perf_counter() - t
    answers: dict[str, dict[str, list]] = {}
    times = []
    for rep in range(repeat):
        for name, count in QUESTIONS:
            t = time.perf_counter()
            try:
                od = query_offers(
                    cat.offers, OfferQuery(gpu=name, count=count, clouds=tuple(clouds))
                )
                spot = query_offers(
                    cat.offers, OfferQuery(gpu=name, count=count, clouds=tuple(clouds), spot=True)
                )
            except GpuwiseError as exc:
                od, spot = [], []
                answers[f"{name}:{count}"] = {"error": [str(exc)]}
            times.append((rep, name, count, time.perf_counter() - t))
            answers.setdefault(f"{name}:{count}", {"od": od, "spot": spot})
    return {
        "import_s": t_import,
        "load_s": t_load,
        "answers": answers,
        "times": times,
        "catalog": cat,
    }


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


def _fmt(x: object) -> str:
    return "—" if x is None else (f"{x:.4f}" if isinstance(x, float) else str(x))


def raw_accelerator_names(catalog_dir: Path, clouds: list[str]) -> dict[tuple[str, str], str]:
    """(cloud, instance type) → the accelerator name SkyPilot's row gives it (before gpuwise's aliases)."""
    import csv

    from gpuwise.catalog.skypilot import _gcp_fixed_accelerator

    names: dict[tuple[str, str], str] = {}
    for cloud in clouds:
        with open(catalog_dir / f"{cloud}.csv", newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                itype, acc = row.get("InstanceType") or "", row.get("AcceleratorName") or ""
                if cloud == "gcp" and itype and not acc:
                    fixed = _gcp_fixed_accelerator(itype)
                    acc = fixed[0] if fixed else ""
                if itype and acc:
                    names[(cloud, itype)] = acc
    return names


def explain(
    side: str,
    cloud: str,
    itype: str,
    region: str,
    name: str,
    count: int,
    billing: str,
    offers_all: list,
    raw_names: dict,
    gcp_rules: dict,
) -> tuple[str, str]:
    """(category, detail): why an (instance type, region) offer is listed by only one tool, read from the rows."""
    from gpuwise.catalog.resolve import instance_override

    here = [
        o
        for o in offers_all
        if o.cloud == cloud
        and o.instance_type == itype
        and o.region == region
        and o.gpu_count == count
    ]
    if side == "sky":
        other_gpu = sorted({o.gpu for o in here if o.gpu != name})
        if other_gpu:
            ov = instance_override(cloud, itype)
            return (
                f"gpuwise files {cloud} {itype} under {other_gpu[0]}",
                f"instance_gpus.csv: {ov.source}" if ov else "alias",
            )
        if billing == "spot" and here and all(not o.has_spot_discount for o in here):
            return (
                "spot ≥ on-demand: gpuwise counts no spot discount",
                f"spot {_fmt(here[0].spot_usd_per_hour)} = on-demand {_fmt(here[0].on_demand_usd_per_hour)} "
                f"in every zone of the region",
            )
        if billing == "od" and here and all(o.on_demand_usd_per_hour is None for o in here):
            return ("reservation only (no on-demand price)", "")
        return ("not in gpuwise's catalog", "?")
    ov = instance_override(cloud, itype)
    if ov is not None and ov.gpu_count is not None:
        return (
            f"gpuwise corrects the row's GPU count to {ov.gpu_count:g}",
            f"instance_gpus.csv: {ov.source}",
        )
    raw = raw_names.get((cloud, itype), name)
    if raw != name:
        arch = {o.arch for o in here}
        return (
            f"alias: SkyPilot name {raw} is gpuwise {name}",
            f"host arch {', '.join(sorted(arch))}",
        )
    if cloud == "gcp" and gcp_rules:
        fixed = gcp_rules["hosts"].get(name, {})
        if fixed:
            if itype in fixed.get(str(count), []):
                return (
                    "GCP: SkyPilot keeps only the cheapest fitting host per zone; gpuwise lists every host",
                    "",
                )
            return (
                f"GCP: {itype} is not in SkyPilot's {name}:{count} host table",
                "gcp_catalog._ACC_INSTANCE_TYPE_DICTS",
            )
        cpus = gcp_rules["cpus"].get(name, gcp_rules["cpus"]["DEFAULT"]).get(str(count))
        o = here[0] if here else None
        if (
            cpus is not None
            and o is not None
            and (o.vcpus or 0) >= cpus
            and (o.memory_gib or 0) >= cpus * gcp_rules["mem_per_cpu"]
        ):
            return (
                "GCP: SkyPilot keeps only the cheapest fitting host per zone; gpuwise lists every host",
                "",
            )
        return (
            f"GCP: SkyPilot wants a host with ≥{cpus} vCPUs for {name}:{count}; the extract's n1 hosts have 8",
            "gcp_catalog._NUM_ACC_TO_NUM_CPU ('Based on p3 on AWS': a SkyPilot policy, not a GCP limit)",
        )
    return ("not in SkyPilot's answer", "?")


def compare(
    sky: dict, gw: dict, clouds: list[str], raw_names: dict
) -> tuple[list, list, list, dict]:
    offers_all = gw["catalog"].offers
    set_rows, cheap_rows, diffs = [], [], []
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, count in QUESTIONS:
        q = f"{name}:{count}"
        sky_rows = sky["answers"].get(q, [])
        gwa = gw["answers"][q]
        for cloud in clouds:
            for billing in ("od", "spot"):
                s_idx = 5 if billing == "od" else 6
                s_map: dict[tuple[str, str], list] = {}
                for r in sky_rows:
                    if r[0] == cloud and r[s_idx] is not None:
                        k = (r[1], r[2])
                        if k not in s_map or r[s_idx] < s_map[k][s_idx]:
                            s_map[k] = r
                g_map: dict[tuple[str, str], float] = {}
                for o in gwa.get(billing, []):
                    if o.cloud != cloud:
                        continue
                    p = o.on_demand_usd_per_hour if billing == "od" else o.spot_usd_per_hour
                    k = (o.instance_type, o.region)
                    g_map[k] = min(p, g_map.get(k, math.inf))
                only_s, only_g = set(s_map) - set(g_map), set(g_map) - set(s_map)
                both = set(s_map) & set(g_map)
                price_diff = [k for k in both if not _close(s_map[k][s_idx], g_map[k])]
                agree = not only_s and not only_g and not price_diff
                counts["offer sets (cloud × question × billing)"][0 if agree else 1] += 1
                if s_map or g_map:
                    set_rows.append(
                        (
                            q,
                            cloud,
                            billing,
                            len(s_map),
                            len(g_map),
                            len(only_s),
                            len(only_g),
                            len(price_diff),
                        )
                    )
                for k in sorted(only_s):
                    diffs.append(
                        (
                            q,
                            cloud,
                            billing,
                            "only SkyPilot",
                            k[0],
                            k[1],
                            *explain(
                                "sky",
                                cloud,
                                k[0],
                                k[1],
                                name,
                                count,
                                billing,
                                offers_all,
                                raw_names,
                                sky.get("gcp_rules", {}),
                            ),
                        )
                    )
                for k in sorted(only_g):
                    diffs.append(
                        (
                            q,
                            cloud,
                            billing,
                            "only gpuwise",
                            k[0],
                            k[1],
                            *explain(
                                "gw",
                                cloud,
                                k[0],
                                k[1],
                                name,
                                count,
                                billing,
                                offers_all,
                                raw_names,
                                sky.get("gcp_rules", {}),
                            ),
                        )
                    )
                for k in sorted(price_diff):
                    diffs.append(
                        (
                            q,
                            cloud,
                            billing,
                            "price",
                            k[0],
                            k[1],
                            "price differs",
                            f"SkyPilot {_fmt(s_map[k][s_idx])} vs gpuwise {_fmt(g_map[k])}",
                        )
                    )
                # (b) cheapest
                s_best = min(((r[s_idx], r[1], r[2]) for r in s_map.values()), default=None)
                g_best = min(((p, k[0], k[1]) for k, p in g_map.items()), default=None)
                if s_best or g_best:
                    ok = _close(s_best[0] if s_best else None, g_best[0] if g_best else None)
                    counts["cheapest price per (cloud, question, billing)"][0 if ok else 1] += 1
                    cheap_rows.append((q, cloud, billing, s_best, g_best, ok))
    return set_rows, cheap_rows, diffs, counts


def region_check(sky: dict, gw: dict, counts: dict) -> list:
    offers = gw["catalog"].offers
    rows = []
    for cloud, itype, region, got in sky["region_prices"]:
        acc = next(r for r in REGION_ROWS if r[:3] == (cloud, itype, region))
        here = [o for o in offers if (o.cloud, o.instance_type, o.region) == (cloud, itype, region)]
        g_od = min(
            (o.on_demand_usd_per_hour for o in here if o.on_demand_usd_per_hour is not None),
            default=None,
        )
        g_spot = min((o.spot_usd_per_hour for o in here if o.has_spot_discount), default=None)
        g_spot_raw = min(
            (o.spot_usd_per_hour for o in here if o.spot_usd_per_hour is not None), default=None
        )
        for billing, s, g in (("od", got["od"], g_od), ("spot", got["spot"], g_spot)):
            s_val = s if isinstance(s, float) else None
            ok = _close(s_val, g)
            note = ""
            if (
                not ok
                and billing == "spot"
                and g is None
                and g_spot_raw is not None
                and _close(s_val, g_spot_raw)
            ):
                note = "spot ≥ on-demand in every zone: gpuwise says no spot discount"
            elif not ok and billing == "od" and g is None and isinstance(s, float):
                note = "gpuwise: reservation-only"
            counts["per-region price (named rows)"][0 if ok else 1] += 1
            rows.append(
                (
                    cloud,
                    itype,
                    region,
                    f"{acc[3]}:{acc[4]}",
                    billing,
                    s if isinstance(s, float) else (s or "")[:60],
                    g,
                    "agree" if ok else note or "DIFFER",
                )
            )
    return rows


def table(headers: list[str], rows: list[tuple]) -> None:
    cells = [[_fmt(c) for c in r] for r in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)
    ]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sky-python", required=True, help="python of a venv with SkyPilot installed")
    ap.add_argument(
        "--catalog-dir",
        required=True,
        type=Path,
        help="folder with <cloud>.csv in SkyPilot's schema",
    )
    ap.add_argument(
        "--clouds",
        default="aws,gcp,lambda,nebius,azure",
        help="comma-separated; azure.csv is SkyPilot schema v6, which 0.14.1 reads as v8",
    )
    ap.add_argument("--repeat", type=int, default=5, help="times each question is asked (timing)")
    args = ap.parse_args()
    clouds = [c.strip() for c in args.clouds.split(",") if c.strip()]
    catalog_dir = args.catalog_dir.expanduser().resolve()
    missing = [c for c in clouds if not (catalog_dir / f"{c}.csv").is_file()]
    if missing:
        sys.exit(
            f"{catalog_dir}: no {', '.join(c + '.csv' for c in missing)} (give --catalog-dir or --clouds)"
        )

    sky = run_skypilot(args.sky_python, catalog_dir, clouds, args.repeat)
    gw = run_gpuwise(catalog_dir, clouds, args.repeat)
    set_rows, cheap_rows, diffs, counts = compare(
        sky, gw, clouds, raw_accelerator_names(catalog_dir, clouds)
    )
    region_rows = region_check(sky, gw, counts)

    print("## (a) offer sets: (instance type, region) per cloud, question and billing\n")
    table(
        ["question", "cloud", "billing", "SkyPilot", "gpuwise", "only Sky", "only gw", "price ≠"],
        set_rows,
    )
    print("## (b) cheapest instance price per (question, cloud, billing)\n")
    table(
        [
            "question",
            "cloud",
            "billing",
            "SkyPilot $/h (type, region)",
            "gpuwise $/h (type, region)",
            "agree",
        ],
        [
            (
                q,
                c,
                b,
                f"{s[0]:.4f} {s[1]} {s[2]}" if s else "—",
                f"{g[0]:.4f} {g[1]} {g[2]}" if g else "—",
                "yes" if ok else "NO",
            )
            for q, c, b, s, g, ok in cheap_rows
        ],
    )
    print("## (c) per-region prices (SkyPilot get_hourly_cost [+ GPU row on GCP] vs gpuwise)\n")
    table(
        ["cloud", "instance type", "region", "GPU", "billing", "SkyPilot", "gpuwise", "result"],
        region_rows,
    )

    print(
        f"## differences: {len(diffs)} (instance type, region) pairs, grouped, each with its reason\n"
    )
    groups: dict[tuple[str, str, str, str, str], list] = defaultdict(list)
    for q, c, b, kind, itype, region, why, detail in diffs:
        groups[(q, c, b, kind, why)].append((itype, region, detail))
    table(
        ["question", "cloud", "billing", "kind", "why", "instance types (regions)"],
        [
            (
                *k,
                ", ".join(
                    f"{t} ({sum(1 for x in v if x[0] == t)})" for t in sorted({x[0] for x in v})
                ),
            )
            for k, v in groups.items()
        ],
    )
    details = sorted({d[7] for d in diffs if d[7]})
    if details:
        print("details: " + "; ".join(details[:8]) + "\n")

    print("## agreement\n")
    table(["compared", "agree", "differ"], [(k, v[0], v[1]) for k, v in counts.items()])

    n_q = len(QUESTIONS)
    s_cold = sum(t[3] for t in sky["times"] if t[0] == 0)
    s_warm = [t[3] for t in sky["times"] if t[0] > 0] or [t[3] for t in sky["times"]]
    g_cold = sum(t[3] for t in gw["times"] if t[0] == 0)
    g_warm = [t[3] for t in gw["times"] if t[0] > 0] or [t[3] for t in gw["times"]]
    print(f"## time ({n_q} questions × {len(clouds)} clouds, repeat {args.repeat})\n")
    ms = 1000.0
    table(
        ["step", "SkyPilot ms", "gpuwise ms", "SkyPilot / gpuwise"],
        [
            ("import", sky["import_s"] * ms, gw["import_s"] * ms, sky["import_s"] / gw["import_s"]),
            (
                "load catalog + first pass of all questions",
                s_cold * ms,
                (gw["load_s"] + g_cold) * ms,
                s_cold / (gw["load_s"] + g_cold),
            ),
            (
                "one question, warm (median)",
                statistics.median(s_warm) * ms,
                statistics.median(g_warm) * ms,
                statistics.median(s_warm) / statistics.median(g_warm),
            ),
        ],
    )
    print(f"SkyPilot child wall time {sky['wall_s']:.2f} s (interpreter + import + all calls).")
    print(
        f"SkyPilot's first pass includes its lazy CSV reads (pandas); gpuwise's includes load_catalog "
        f"({gw['load_s'] * ms:.1f} ms of it)."
    )


if __name__ == "__main__":
    main()
