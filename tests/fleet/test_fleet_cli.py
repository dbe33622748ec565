"""`gpuwise fleet`, `tco` and `vendors` end to end: examples, JSON fields, charts, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

CATALOG = """cloud,region,zone,instance_type,gpu,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour
aws,us-east-1,,p5.48xlarge,H100,8,24.0,8.0
gcp,us-central1,,a3-highgpu-1g,H100,1,3.5,1.5
aws,us-east-1,,g6.xlarge,L4,1,0.8,0.3
"""


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "offers.csv"
    path.write_text(CATALOG)
    return path


@pytest.mark.slow
def test_fleet_on_example_json(cli, catalog: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "fleet",
        "--demand",
        EXAMPLES / "demand.csv",
        "--catalog",
        catalog,
        "--reserved-discount",
        "aws:1y=0.3",
        "--reserved-discount",
        "gcp:3y=0.5",
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = r.json()
    for key in (
        "commitments",
        "cost_usd",
        "on_demand_only_cost_usd",
        "savings_fraction",
        "monthly",
        "reserved_utilization",
        "sensitivity",
        "best_single_billing",
    ):
        assert key in doc
    assert doc["commitments"], "flat-ish example demand with a 50% 3y discount reserves something"
    for c in doc["commitments"]:
        assert {"gpu", "cloud", "term_years", "count"} <= set(c)
        assert isinstance(c["count"], int) and c["count"] > 0
    assert sum(m["total_usd"] for m in doc["monthly"]) == pytest.approx(doc["cost_usd"])
    assert 0 < doc["savings_fraction"] < 1


def test_fleet_default_catalog_says_reserved_unavailable(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("fleet", "--demand", EXAMPLES / "demand.csv", "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["commitments"] == []
    assert any("reserved billing unavailable" in n for n in doc["notes"])


@pytest.mark.slow
def test_fleet_profile_and_html(cli, catalog: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "fleet.html"
    r = cli(
        "fleet",
        "--profile",
        "--profile-gpus",
        "H100,L4",
        "--profile-hours",
        "720",
        "--seed",
        "3",
        "--catalog",
        catalog,
        "--reserved-discount",
        "aws:1y=0.35",
        "--html",
        out,
    )
    assert r.code == 0, r.stderr
    assert "saved" in r.stdout
    html = out.read_text()
    assert "plotly" in html.lower() and len(html) > 1_000_000  # plotly.js inlined
    assert '<script src="https://cdn.plot.ly' not in html


def test_tco_json(cli, catalog: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "tco.html"
    r = cli(
        "tco",
        "--gpu",
        "H100",
        "--gpus",
        "8",
        "--years",
        "3",
        "--utilization",
        "0.6",
        "--server-price",
        "250k",
        "--usd-per-kwh",
        "0.12",
        "--catalog",
        catalog,
        "--html",
        out,
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = r.json()
    for key in ("own_cost_usd", "cloud_cost_usd", "break_even_utilization", "break_even_month"):
        assert key in doc
    assert doc["cloud_cost_usd"]["on-demand"] == pytest.approx(
        3.0 * 8 * 3 * 8760 * 0.6
    )  # $24/8 per GPU-h
    assert (
        doc["cloud_cost_usd"]["reserved-1y"] is None
    )  # no known discount: unavailable, said in notes
    assert any("reserved billing unavailable" in n for n in doc["notes"])
    assert out.stat().st_size > 1_000_000


@pytest.mark.parametrize(
    ("flag", "percent", "fraction"),
    [
        ("--interest-rate", "5%", "0.05"),  # was a typer error "Input should be a valid number"
        ("--maintenance", "3%", "0.03"),  # same
        ("--residual", "10%", "0.1"),  # same
        ("--power-load", "70%", "0.7"),  # same; --utilization always took 60%
    ],
)
def test_tco_fractions_take_percent_like_utilization(
    cli,
    catalog: Path,
    flag: str,
    percent: str,  # type: ignore[no-untyped-def]
    fraction: str,
) -> None:
    base = (
        "tco",
        "--gpu",
        "H100",
        "--server-price",
        "250k",
        "--usd-per-kwh",
        "0.12",
        "--catalog",
        catalog,
        "--json",
    )
    a, b = cli(*base, flag, percent), cli(*base, flag, fraction)
    assert a.code == 0 and b.code == 0, (a.stderr, b.stderr)
    assert a.json() == b.json()


@pytest.mark.slow
def test_tco_takes_gpus_like_estimate(cli, catalog: Path) -> None:  # type: ignore[no-untyped-def]
    base = (
        "tco",
        "--gpu",
        "H100",
        "--server-price",
        "250k",
        "--usd-per-kwh",
        "0.12",
        "--catalog",
        catalog,
        "--json",
    )
    # estimate says --gpus for a number of GPUs; tco said --count, which in `offers` is GPUs per instance
    assert cli(*base, "--gpus", "16").json()["count"] == 16
    r = cli(*base, "--count", "16")
    assert r.code == 2 and "No such option: --count" in r.stderr


def test_vendors_on_example(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("vendors", "--criteria", EXAMPLES / "vendors.yaml", "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert [s["rank"] for s in doc["ranking"]] == [1, 2, 3]
    assert {s["dimension"] for s in doc["sensitivity"]} == {
        "performance",
        "cost",
        "network",
        "support",
        "ecosystem",
    }
    top = doc["ranking"][0]
    assert sum(top["by_dimension"].values()) == pytest.approx(top["score"])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # demand problems
        (["fleet", "--demand", "{gap}"], "gap"),
        (["fleet", "--demand", "{dup}"], "duplicate hour"),
        (["fleet", "--demand", "{neg}"], "column gpus"),
        (["fleet", "--demand", "{unknown}"], "did you mean"),
        (["fleet", "--demand", "missing.csv"], "not found"),
        (["fleet"], "exactly one of --demand FILE or --profile"),
        (["fleet", "--profile", "--profile-peak", "-5"], "profile peak"),
        (["fleet", "--profile", "--profile-hours", "0"], "--profile-hours"),
        (["fleet", "--profile", "--save-demand", "/nonexistent/dir/d.csv"], "cannot write"),
        (["fleet", "--profile", "--spot-capacity", "L4=3"], "not in the demand"),
        (["fleet", "--profile", "--terms", "2"], "only 1 and 3 years"),
        # an infeasible cap
        (["fleet", "--demand", "{ok}", "--budget", "1"], "no plan meets --budget"),
        (["fleet", "--demand", "{ok}", "--monthly-budget", "1"], "no plan meets --monthly-budget"),
        (["fleet", "--demand", "{ok}", "--spot-overhead", "nan"], "spot overhead"),
        (["fleet", "--demand", "{ok}", "--reserved-discount", "aws=0.3"], "CLOUD:1y=FRACTION"),
        (["fleet", "--demand", "{ok}", "--reserved-discount", "aws:1y=1.5"], "[0, 1)"),
        # a typo'd cloud in an override was silently ignored (no discount applied, no word said)
        (["fleet", "--demand", "{ok}", "--reserved-discount", "awz:1y=0.3"], "unknown cloud 'awz'"),
        # a negative seed reached numpy: "internal error: ValueError", exit 1
        (
            ["fleet", "--profile", "--profile-hours", "24", "--seed", "-1"],
            "seed must be a whole number ≥ 0",
        ),
        (
            ["fleet", "--profile", "--terms", "x"],
            "cannot read --terms 'x'",
        ),  # says what is wrong with it
        (
            ["fleet", "--demand", "{ok}", "--profile-gpus", "L4"],
            "applies to --profile",
        ),  # was silently ignored
        # tco
        (["tco", "--gpu", "H100"], "--server-price is required"),
        (["tco", "--gpu", "H100", "--server-price", "1e5"], "--usd-per-kwh is required"),
        (["tco", "--gpu", "H1000", "--server-price", "1e5", "--usd-per-kwh", "0.1"], "unknown GPU"),
        (
            ["tco", "--gpu", "H100", "--server-price", "-5", "--usd-per-kwh", "0.1"],
            "--server-price must be",
        ),
        (
            [
                "tco",
                "--gpu",
                "H100",
                "--server-price",
                "1e5",
                "--usd-per-kwh",
                "0.1",
                "--utilization",
                "2",
            ],
            "utilization",
        ),
        (
            [
                "tco",
                "--gpu",
                "H100",
                "--server-price",
                "1e5",
                "--usd-per-kwh",
                "0.1",  # typo'd cloud: was ignored
                "--reserved-discount",
                "gpc:1y=0.3",
            ],
            "did you mean 'gcp'",
        ),
        # vendors
        (["vendors", "--criteria", "{badweights}"], "sum to"),
        (["vendors", "--criteria", "missing.yaml"], "not found"),
        (
            ["vendors", "--criteria", "{ok_vendors}", "--reserved-discount", "nebiu:3y=0.2"],
            "did you mean 'nebius'",
        ),
    ],
)
def test_bad_input_exits_2(
    cli, catalog: Path, tmp_path: Path, args: list[str], needle: str
) -> None:  # type: ignore[no-untyped-def]
    samples = {
        "gap": ["2026-01-01T00:00:00,H100,1,false", "2026-01-01T02:00:00,H100,1,false"],
        "dup": ["2026-01-01T00:00:00,H100,1,false", "2026-01-01T00:00:00,H100,1,false"],
        "neg": ["2026-01-01T00:00:00,H100,-3,false"],
        "unknown": ["2026-01-01T00:00:00,H10,1,false"],
        "ok": ["2026-01-01T00:00:00,H100,4,false", "2026-01-01T01:00:00,H100,4,false"],
    }
    paths = {}
    for name, rows in samples.items():
        p = tmp_path / f"{name}.csv"
        p.write_text("timestamp,gpu,gpus,interruptible\n" + "\n".join(rows) + "\n")
        paths[name] = str(p)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (EXAMPLES / "vendors.yaml").read_text().replace("performance: 0.30", "performance: 3.0")
    )
    paths["badweights"] = str(bad)
    paths["ok_vendors"] = str(EXAMPLES / "vendors.yaml")
    argv = [a.format(**paths) for a in args]
    if argv[0] in ("fleet", "tco"):
        argv += ["--catalog", str(catalog)]
    r = cli(*argv)
    assert r.code == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert needle in r.stderr, r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize(
    ("terms", "allowed"),
    [
        ("1", [1]),  # as documented
        ("1,3", [1, 3]),  # as documented
        ("1y,3y", [1, 3]),  # as --reserved-discount spells terms (aws:1y=...): was refused
        ("3Y", [3]),  # any case
    ],
)
def test_terms_in_years_with_or_without_y(
    cli, catalog: Path, terms: str, allowed: list[int]
) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "fleet",
        "--profile",
        "--profile-hours",
        "24",
        "--profile-gpus",
        "H100",
        "--catalog",
        catalog,
        "--reserved-discount",
        "aws:1y=0.3",
        "--reserved-discount",
        "aws:3y=0.5",
        "--terms",
        terms,
        "--json",
    )
    assert r.code == 0, r.stderr
    # one integer variable per allowed (cloud, term) reservation plus one: the terms reached the solver
    assert r.json()["solver"]["variables"] == 1 + len(allowed)


def test_normalize_weights_warns_on_stderr(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "v.yaml"
    path.write_text(
        (EXAMPLES / "vendors.yaml").read_text().replace("performance: 0.30", "performance: 0.60")
    )
    r = cli("vendors", "--criteria", path, "--normalize-weights", "--json")
    assert r.code == 0, r.stderr
    assert "warning: weights: weights summed to 1.3; rescaled" in r.stderr
    assert r.json()["weights"]["performance"] == pytest.approx(0.6 / 1.3)


@pytest.mark.slow
def test_examples_run_as_documented() -> None:
    """The commands shown in docs/fleet.md run on the bundled catalog and examples/."""
    for args in (
        ["fleet", "--demand", "examples/demand.csv"],
        ["vendors", "--criteria", "examples/vendors.yaml"],
        [
            "tco",
            "--gpu",
            "A100-80GB",
            "--gpus",
            "8",
            "--years",
            "3",
            "--utilization",
            "0.6",
            "--server-price",
            "250k",
            "--usd-per-kwh",
            "0.12",
        ],
    ):
        p = subprocess.run(
            [sys.executable, "-m", "gpuwise", *args, "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert p.returncode == 0, p.stderr
        json.loads(p.stdout)


@pytest.mark.slow
def test_core_imports_no_cli_libraries() -> None:
    code = (
        "import sys, gpuwise.fleet, gpuwise.fleet.charts; "
        "bad = [m for m in ('typer', 'rich', 'torch', 'requests', 'httpx', 'plotly') if m in sys.modules]; "
        "print(bad)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]"


def _limit_file_size() -> (
    None
):  # runs in the child: files may not grow past 100 kB (plotly HTML is ~4 MB)
    import resource
    import signal

    signal.signal(
        signal.SIGXFSZ, signal.SIG_IGN
    )  # a write past the limit fails with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))


@pytest.mark.parametrize(
    "argv",
    [
        # --html over an existing chart: a failed write used to leave 100 kB of truncated HTML in its place
        [
            "tco",
            "--gpu",
            "H100",
            "--server-price",
            "1e5",
            "--usd-per-kwh",
            "0.1",
            "--html",
            "{out}",
        ],
        [
            "fleet",
            "--profile",
            "--profile-hours",
            "24",
            "--profile-gpus",
            "H100",
            "--html",
            "{out}",
        ],
    ],
)
@pytest.mark.slow
def test_failed_output_write_keeps_the_old_file(
    catalog: Path, tmp_path: Path, argv: list[str]
) -> None:
    out = tmp_path / "chart.html"
    out.write_text("the previous chart\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwise",
            *[a.format(out=out) for a in argv],
            "--catalog",
            str(catalog),
        ],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=_limit_file_size,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: cannot write") and r.stderr.count("\n") == 1
    assert out.read_text() == "the previous chart\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "chart.html",
        "offers.csv",
    ]  # no temporary left behind


def test_html_and_saved_demand_are_written_whole(cli, catalog: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    html, saved = tmp_path / "fleet.html", tmp_path / "year.csv"
    saved.write_text("old\n")
    r = cli(
        "fleet",
        "--profile",
        "--profile-hours",
        "24",
        "--profile-gpus",
        "H100",
        "--catalog",
        catalog,
        "--html",
        html,
        "--save-demand",
        saved,
        "--json",
    )
    assert r.code == 0, r.stderr
    assert html.read_text().rstrip().endswith("</html>")
    assert saved.read_text().startswith("timestamp,gpu,gpus,interruptible\n")
    assert oct(saved.stat().st_mode & 0o777) != oct(0o600)  # readable like any file the user writes


@pytest.mark.slow
def test_fleet_says_when_it_extrapolates_a_term_beyond_the_demand(cli, catalog: Path) -> None:  # type: ignore[no-untyped-def]
    # the example demand covers weeks; a 3-year reservation assumes it repeats for three years
    args = (
        "fleet",
        "--demand",
        EXAMPLES / "demand.csv",
        "--catalog",
        catalog,
        "--reserved-discount",
        "gcp:3y=0.5",
    )
    doc = cli(*args, "--json").json()
    assert any(c["term_years"] == 3 for c in doc["commitments"])
    assert doc["extrapolated"] is True
    assert doc["notes"][0].startswith("extrapolated: a 3-year reservation is proposed from ")
    text = cli(*args)
    assert text.code == 0 and "warning: extrapolated:" in text.stdout
