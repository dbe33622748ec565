"""Tables in a narrow terminal (or piped with ``$COLUMNS``): numbers whole, names whole, no "…".

``offers`` used to cut every price to "$3…" and ``gpus`` every long name in 80 columns, and piped
output ignored ``COLUMNS``. Each command runs in a subprocess so its stdout really is a pipe.
"""

from __future__ import annotations

import json
import os

import pytest
from rich.cells import cell_len

from tests.conftest import run_module


def _run(args: list[str], columns: int | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    r = run_module(args, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _table(text: str) -> list[str]:
    """The table's lines (the price-age line below may list its sources as "a, b, …")."""
    return [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]


def _money(x: float | None) -> str:
    return "—" if x is None else f"${x:,.2f}"


@pytest.mark.parametrize("columns", [80, 60])  # the terminal, and a phone-sized one
def test_offers_in_a_narrow_terminal_show_whole_prices(columns: int) -> None:
    args = ["offers", "--gpu", "H100", "--limit", "8"]
    text = _run(args, columns)
    assert "…" not in "".join(_table(text))
    assert max(cell_len(line) for line in text.splitlines()) <= columns
    assert f"Not shown in {columns} columns:" in text  # what was dropped is said
    rows = [line for line in text.splitlines() if line.startswith("│ ") and "$" in line]
    offers = json.loads(_run([*args, "--json"], None))["offers"]
    assert len(rows) == len(offers) == 8
    for row, offer in zip(rows, offers, strict=True):
        assert _money(offer["on_demand_usd_per_gpu_hour"]) in row  # whole, on the offer's line


def test_gpus_in_80_columns_show_whole_names_and_prices() -> None:
    text = _run(["gpus"], 80)
    assert "…" not in "".join(_table(text))
    assert max(cell_len(line) for line in text.splitlines()) <= 80
    for gpu in json.loads(_run(["gpus", "--json"], None))["gpus"]:
        line = next(ln for ln in text.splitlines() if ln.startswith(f"│ {gpu['gpu']} "))
        assert _money(gpu["min_on_demand_usd_per_gpu_hour"]) in line


def test_piped_output_without_columns_keeps_every_column() -> None:
    text = _run(["offers", "--gpu", "H100", "--limit", "3"], None)
    assert "Not shown" not in text
    header = next(line for line in text.splitlines() if "cloud" in line)
    for column in ("zone", "vCPU", "RAM GiB", "GiB/GPU", "spot $/h"):
        assert column in header
