"""`gpuwise gpus`, `gpuwise offers`, `gpuwise catalog info` and the CLI's error contract."""

from __future__ import annotations

import pytest

from tests.conftest import run_module


def test_gpus_json_fields_and_prices(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("gpus", "--json")
    assert r.code == 0, r.stderr
    rows = {row["gpu"]: row for row in r.json()["gpus"]}
    for key in (
        "gpu",
        "memory_gib",
        "memory_bandwidth_tb_s",
        "peak_bf16_tflops",
        "min_on_demand_usd_per_gpu_hour",
        "min_spot_usd_per_gpu_hour",
    ):
        assert key in rows["H100"]
    assert rows["H100"]["peak_bf16_tflops"] == 989.5
    assert rows["MI300X"]["min_on_demand_usd_per_gpu_hour"] is None  # no offer in the catalog: null
    assert rows["H100"]["min_on_demand_usd_per_gpu_hour"] > 0
    assert rows["H100"]["usd_per_bf16_pflop_hour"] == pytest.approx(
        rows["H100"]["min_on_demand_usd_per_gpu_hour"] / 0.9895
    )


def test_gpus_filters(cli) -> None:  # type: ignore[no-untyped-def]
    rows = cli("gpus", "--min-memory", "100", "--json").json()["gpus"]
    assert rows and all(row["memory_gib"] >= 100 for row in rows)
    # `offers` spells the same filter --min-gpu-memory: both spellings work on `gpus`
    assert cli("gpus", "--min-gpu-memory", "100", "--json").json()["gpus"] == rows
    lam = {row["gpu"]: row for row in cli("gpus", "--cloud", "lambda", "--json").json()["gpus"]}
    assert lam["H100"]["min_on_demand_where"].startswith("lambda")
    assert lam["H100"]["min_spot_usd_per_gpu_hour"] is None  # Lambda sells no spot
    spot = cli("gpus", "--spot", "--json").json()["gpus"]
    assert all(row["min_spot_usd_per_gpu_hour"] is not None for row in spot)


def test_offers_json_fields_and_ranking(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("offers", "--gpu", "H100", "--count", "8", "--limit", "0", "--json")
    assert r.code == 0, r.stderr
    offers = r.json()["offers"]
    assert offers and all(o["gpu"] == "H100" and o["gpu_count"] == 8 for o in offers)
    for key in (
        "cloud",
        "region",
        "zone",
        "instance_type",
        "gpu",
        "gpu_count",
        "vcpus",
        "memory_gib",
        "on_demand_usd_per_hour",
        "spot_usd_per_hour",
    ):
        assert key in offers[0]
    prices = [o["on_demand_usd_per_hour"] for o in offers]
    assert prices == sorted(prices)
    assert {o["cloud"] for o in offers} >= {"aws", "gcp", "lambda"}


def test_offers_spot_and_price_cap(cli) -> None:  # type: ignore[no-untyped-def]
    offers = cli("offers", "--gpu", "a100-80gb", "--spot", "--max-price", "$40", "--json").json()[
        "offers"
    ]
    assert offers
    assert all(
        o["spot_usd_per_hour"] <= 40
        and o["spot_usd_per_hour"] < (o["on_demand_usd_per_hour"] or 1e9)
        for o in offers
    )
    spots = [o["spot_usd_per_hour"] for o in offers]
    assert spots == sorted(spots)


UNDATED = (
    "some prices have no date — refresh with `gpuwise catalog update --fetch`, or raise "
    "--max-price-age"
)


def test_json_output_is_only_json(cli) -> None:  # type: ignore[no-untyped-def]
    import json

    for args in (
        ("gpus", "--json"),
        ("offers", "--gpu", "L4", "--json"),
        ("catalog", "info", "--json"),
    ):
        r = cli(*args)
        json.loads(r.stdout)
        # stderr holds at most the price-age warning (the bundled Azure rows are undated)
        assert r.stderr in ("", f"warning: {UNDATED}\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["offers", "--gpu", "H10"], "unknown GPU 'H10'"),  # did-you-mean
        (["offers", "--count", "-3"], "--count must be > 0"),
        (["offers", "--count", "nan"], "--count must be a finite number"),
        (["offers", "--max-price", "nan"], "--max-price must be a finite number"),
        (["offers", "--max-price", "-5"], "--max-price must be ≥ 0"),
        (["offers", "--limit", "-1"], "--limit must be ≥ 0"),
        (["offers", "--sort", "cheap"], "unknown --sort 'cheap'"),
        (["offers", "--cloud", "awz"], "unknown cloud 'awz'"),
        (["offers", "--region", "mars-*"], "no region matches"),
        (["offers", "--bogus"], "No such option: --bogus"),
        (["offers", "--catalog", "/nonexistent.csv"], "no such file or folder"),
        (["gpus", "--min-memory", "inf"], "--min-memory must be a finite number"),
        (
            ["offers", "--count", "8", "--min-count", "16"],
            "nothing can match",
        ),  # contradiction: was an empty table
        (["frobnicate"], "No such command"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    r = cli(*args)
    assert r.code == 2
    assert r.stderr.startswith("error: ") and message in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "To fix" in r.stderr


def test_did_you_mean(cli) -> None:  # type: ignore[no-untyped-def]
    assert "did you mean 'H100'" in cli("offers", "--gpu", "H10").stderr
    assert "did you mean 'aws'" in cli("offers", "--cloud", "awz").stderr


def test_end_to_end_process_exit_codes_and_debug() -> None:
    ok = run_module(["--version"])
    assert ok.returncode == 0 and ok.stdout.startswith("gpuwise ")
    bad = run_module(["offers", "--gpu", "H10"])
    assert bad.returncode == 2 and bad.stdout == "" and "Traceback" not in bad.stderr
    debug = run_module(["--debug", "offers", "--gpu", "H10"])
    assert debug.returncode == 2 and "Traceback" in debug.stderr


def test_catalog_info(cli) -> None:  # type: ignore[no-untyped-def]
    info = cli("catalog", "info", "--json").json()
    assert info["clouds"] == ["aws", "azure", "gcp", "lambda", "nebius"]
    (layer,) = info["layers"]
    assert (
        layer["kind"] == "bundled"
        and layer["as_of"] == "2026-11"
        and layer["rows"] == info["offers"]
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        # a truncated YAML trace: PyYAML's message spans lines and quotes the source
        (["report", "--fake", "{dir}/trace.yaml"], "line 3, column 1"),
        # a binary trace file: was "internal error: UnicodeDecodeError", exit 1
        (["exporter", "--once", "--fake", "{dir}/trace.json"], "not UTF-8 text"),
    ],
)
def test_file_errors_are_one_stderr_line(cli, tmp_path, argv: list[str], needle: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "trace.yaml").write_text("name: x\nframes: [\n")
    (tmp_path / "trace.json").write_bytes(b"\xa2\xff\x00binary")
    r = cli(*[a.format(dir=tmp_path) for a in argv])
    assert r.code == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ") and needle in r.stderr
    assert "To fix:" in r.stderr


def test_multi_line_messages_are_folded_to_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuwise.cli.main import _print_error

    _print_error("bad file (while parsing\n  in line 3\n   ^) — To fix: fix it")
    assert (
        capsys.readouterr().err == "error: bad file (while parsing in line 3 ^) — To fix: fix it\n"
    )
