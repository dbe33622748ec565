"""CSV cells a spreadsheet would run, and characters that reorder text on screen.

Both used to be stored and written back verbatim. Now a text cell starting with ``=``, ``+``,
``-`` or ``@`` is written with a leading ``'`` (OWASP "CSV Injection": a spreadsheet shows it
as text) and read back without it, and a bidirectional control character (the "Trojan Source"
trick, CVE-2021-42574) in an imported CSV is refused naming the row and column.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from gpuwise.catalog import OFFER_COLUMNS, Offer, offers_to_csv, parse_offer_csv
from gpuwise.catalog.risk import SpotRisk, parse_spot_risks, spot_risks_to_csv
from gpuwise.catalog.sources import store_path
from gpuwise.errors import CatalogError, DataFileError
from gpuwise.fleet.demand import parse_demand_csv

HEADER = ",".join(OFFER_COLUMNS)
# Cells an attacker would plant in a price file a team member later opens in a spreadsheet
_FORMULAS = ['=HYPERLINK("http://x","y")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)*cmd|'x'!A0"]


def _offer(region: str, instance_type: str, source: str) -> Offer:
    return Offer(
        "onprem", region, None, instance_type, "H100", 8.0, 80.0, 96.0, 1024.0, 20.0, None,
        "x86_64", source, "2026-11",
    )  # fmt: skip


def _cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


@pytest.mark.parametrize("formula", _FORMULAS)
def test_offers_csv_neutralises_formulas_and_round_trips(formula: str) -> None:
    offers = [_offer(formula, f"box-{i}", formula) for i in range(2)]
    text = offers_to_csv(offers)
    assert not [c for c in _cells(text) if c.startswith(("=", "+", "-", "@"))]
    assert f"'{formula}" in _cells(text)
    assert parse_offer_csv(text, "store") == offers  # the quote is removed on reading
    assert offers_to_csv(parse_offer_csv(text, "store")) == text


def test_spot_risk_csv_neutralises_formulas_and_round_trips() -> None:
    rows = [SpotRisk("aws", "us-east-1", "p5.48xlarge", "-5%", 60.0, "=cmd()", "2026-11")]
    text = spot_risks_to_csv(rows)
    assert "'=cmd()" in _cells(text) and "'-5%" in _cells(text)
    assert parse_spot_risks(text, "spot-risk.csv") == rows


def test_imported_formula_cells_are_stored_neutralised(cli: Any, tmp_path: Path) -> None:
    src = tmp_path / "quote.csv"
    src.write_text(
        f'{HEADER}\nonprem,dc1,,"=HYPERLINK(""http://x"")",H100,8,80,96,1024,20,,x86_64,q,2026-11\n'
    )
    r = cli("catalog", "update", "--from-csv", src, "--json")
    assert r.code == 0, r.stderr
    stored = store_path().read_text()
    assert "'=HYPERLINK" in stored and ",=HYPERLINK" not in stored
    offers = cli("offers", "--cloud", "onprem", "--json").json()["offers"]
    assert [o["instance_type"] for o in offers] == ['=HYPERLINK("http://x")']  # the value itself


@pytest.mark.parametrize(
    "char",
    ["\u202e", "\u2066", "\u200f", "\u061c"],  # override, isolate, mark, Arabic mark
)
def test_offers_csv_with_a_bidi_control_is_refused(char: str) -> None:
    text = f"{HEADER}\nonprem,dc1,,box1,H100,8,80,96,1024,20,,x86_64,q,2026-11\n"
    text += f"onprem,dc{char}2,,box2,H100,8,80,96,1024,20,,x86_64,q,2026-11\n"
    with pytest.raises(CatalogError) as err:
        parse_offer_csv(text, "prices.csv")
    message = str(err.value)
    assert "prices.csv, row 3, column region" in message
    assert f"U+{ord(char):04X}" in message
    assert char not in message  # the message itself cannot be reordered on screen


def test_cli_import_with_a_bidi_control_exits_2_and_stores_nothing(
    cli: Any, tmp_path: Path
) -> None:
    src = tmp_path / "evil.csv"
    src.write_text(f"{HEADER}\nonprem,dc1,,box\u202e1,H100,8,80,96,1024,20,,x86_64,q,2026-11\n")
    r = cli("catalog", "update", "--from-csv", src, "--json")
    assert r.code == 2
    assert "column instance_type" in r.stderr and "U+202E" in r.stderr
    assert not store_path().exists()


def test_demand_csv_with_a_bidi_control_is_refused() -> None:
    text = "timestamp,gpu,gpus,interruptible\n2026-01-01T00:00:00Z,H1\u202e00,4,false\n"
    with pytest.raises(DataFileError, match=r"demand.csv, row 2, column gpu: .* U\+202E"):
        parse_demand_csv(text, "demand.csv")
