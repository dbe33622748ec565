"""Every table command, asked something with no answer: exit 0 (or the command's documented 3)
and one clear line saying so, never an internal error.

`gpuwise offers --gpu H100 --max-price 0.5` and `gpuwise gpus --min-memory 1000` ended in
``internal error: TypeError`` when the table renderer took the widest cell of no rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuwise.cli._output import console, print_table


def test_an_empty_table_renders_its_header() -> None:
    # the renderer itself: max() over no rows raised TypeError
    out = console()
    with out.capture() as cap:
        print_table(("GPU", "price"), [], left=("GPU",), drop=("price",), out=out)
    assert "GPU" in cap.get()


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        # no GPU model has 1000 GiB
        (["gpus", "--min-memory", "1000"], 0, "No GPU model matches"),
        # no H100 rents for 50 cents an hour
        (["offers", "--gpu", "H100", "--max-price", "0.5"], 0, "No offer matches"),
        # Lambda sells no spot capacity: no model has a spot offer there
        (["gpus", "--spot", "--cloud", "lambda"], 0, "No GPU model matches"),
        # no option fits a one-dollar budget: plan's documented exit 3
        (["plan", "--params", "1B", "--gpu", "H100", "--budget", "1"], 3, "No option"),
    ],
)
def test_an_empty_answer_is_a_clear_line(cli: Any, args: list[str], code: int, line: str) -> None:
    r = cli(*args)
    assert r.code == code, r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    assert line in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["gpus", "--min-memory", "1000", "--json"],
        ["offers", "--gpu", "H100", "--max-price", "0.5", "--json"],
    ],
)
def test_an_empty_json_answer_is_an_empty_list(cli: Any, args: list[str]) -> None:
    r = cli(*args)
    assert r.code == 0, r.stderr
    doc = r.json()
    assert isinstance(doc, dict)
    assert doc.get("gpus", doc.get("offers")) == []


def test_fleet_with_no_demand_reserves_nothing(cli: Any, tmp_path: Path) -> None:
    # every hour asks for 0 GPUs: an answer of nothing to buy, not a crash
    demand = _write(
        tmp_path,
        "demand.csv",
        "timestamp,gpu,gpus,interruptible\n"
        "2026-01-01T00:00:00,H100,0,false\n2026-01-01T01:00:00,H100,0,false\n",
    )
    r = cli("fleet", "--demand", demand)
    assert r.code == 0, r.stderr
    assert "internal error" not in r.stderr
    assert "H100" in r.stdout


def test_report_of_a_window_with_no_samples_says_so(cli: Any, tmp_path: Path) -> None:
    # history exists, but not in the window asked for (it ends in 1970)
    db = tmp_path / "h.sqlite"
    assert cli("monitor", "--fake", "idle", "--reads", "1", "--db", db, "--json").code == 0
    r = cli("report", "--db", db, "--until", "100000", "--since", "1h")
    assert r.code == 0, r.stderr
    assert "no GPU samples between the window's start and end" in r.stdout


def test_vendors_with_no_vendor_is_one_error_line(cli: Any, tmp_path: Path) -> None:
    # weights and criteria may be left out (the defaults); no vendor at all is nothing to score
    r = cli("vendors", "--criteria", _write(tmp_path, "vendors.yaml", "vendors: []\n"))
    assert r.code == 2, r.stdout
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert "at least two vendors" in r.stderr
