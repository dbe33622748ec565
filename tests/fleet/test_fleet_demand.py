"""Demand CSV parsing, its errors (file, row, column), and the synthetic profile."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwise.errors import DataFileError
from gpuwise.fleet.demand import demand_to_csv, parse_demand_csv, synthetic_demand

HEADER = "timestamp,gpu,gpus,interruptible\n"
GOOD = (
    HEADER
    + """2026-01-01T00:00:00,H100,2,false
2026-01-01T00:00:00,H100,5,true
2026-01-01T01:00:00,H100,3,false
2026-01-01T01:00:00,H100,0,true
2026-01-01T02:00:00Z,h100,1,no
2026-01-01T02:00:00+00:00,H100,4,yes
"""
)


def test_parse_good_file() -> None:
    d = parse_demand_csv(GOOD, "d.csv")
    assert d.gpus == ("H100",)
    assert d.hours == 3
    assert d.firm.tolist() == [[2, 3, 1]]
    assert d.interruptible.tolist() == [[5, 0, 4]]


def test_round_trip() -> None:
    d = synthetic_demand(("H100", "L4"), hours=50, seed=3)
    back = parse_demand_csv(demand_to_csv(d), "x.csv")
    assert back.gpus == d.gpus and back.start == d.start
    assert np.array_equal(back.firm, d.firm) and np.array_equal(back.interruptible, d.interruptible)


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        # a gap: hour 01:00 missing for the firm series
        (
            HEADER + "2026-01-01T00:00:00,H100,1,false\n2026-01-01T02:00:00,H100,1,false\n",
            ["d.csv", "gap", "2026-01-01T01:00:00", "after row 2"],
        ),
        # the same hour twice
        (
            HEADER + "2026-01-01T00:00:00,H100,1,false\n2026-01-01T00:00:00,H100,2,false\n",
            ["d.csv, row 3", "duplicate hour", "first at row 2"],
        ),
        # negative demand
        (HEADER + "2026-01-01T00:00:00,H100,-1,false\n", ["d.csv, row 2, column gpus", "≥ 0"]),
        # NaN demand
        (HEADER + "2026-01-01T00:00:00,H100,nan,false\n", ["row 2, column gpus"]),
        # unknown GPU, with a suggestion
        (
            HEADER + "2026-01-01T00:00:00,H1000,1,false\n",
            ["row 2, column gpu", "unknown GPU 'H1000'", "did you mean"],
        ),
        # malformed timestamp
        (HEADER + "yesterday,H100,1,false\n", ["row 2, column timestamp", "not an ISO time"]),
        # not on the hour
        (
            HEADER + "2026-01-01T00:30:00,H100,1,false\n",
            ["row 2, column timestamp", "not on the hour"],
        ),
        # bad boolean
        (HEADER + "2026-01-01T00:00:00,H100,1,maybe\n", ["row 2, column interruptible"]),
        # missing column
        ("timestamp,gpu,gpus\n2026-01-01T00:00:00,H100,1\n", ["missing column(s) interruptible"]),
        # empty cell
        (HEADER + "2026-01-01T00:00:00,,1,false\n", ["row 2, column gpu: empty"]),
        # header only
        (HEADER, ["no rows"]),
    ],
)
def test_bad_files_name_file_row_column(text: str, needles: list[str]) -> None:
    with pytest.raises(DataFileError) as exc:
        parse_demand_csv(text, "d.csv")
    message = exc.value.one_line()
    for needle in needles:
        assert needle in message, message


def test_synthetic_is_deterministic_and_shaped() -> None:
    a = synthetic_demand(("H100",), hours=24 * 14, seed=5)
    b = synthetic_demand(("H100",), hours=24 * 14, seed=5)
    c = synthetic_demand(("H100",), hours=24 * 14, seed=6)
    assert np.array_equal(a.total, b.total)
    assert not np.array_equal(a.total, c.total)
    assert np.all(a.total >= 0) and np.all(a.total == np.rint(a.total))
    # working hours on weekdays carry more interruptible work than nights (daily/weekly cycle)
    hours = np.arange(a.hours)
    day = (hours % 24 >= 9) & (hours % 24 < 18) & ((hours // 24 + a.start.weekday()) % 7 < 5)
    assert a.interruptible[0, day].mean() > a.interruptible[0, ~day].mean()


def test_implausible_demand_is_rejected() -> None:
    with pytest.raises(DataFileError, match="implausible"):
        parse_demand_csv(HEADER + "2026-01-01T00:00:00,H100,1e12,false\n", "d.csv")


def test_a_byte_order_mark_is_not_part_of_the_header() -> None:
    # Excel's "CSV UTF-8" starts with U+FEFF: it was read as "missing column(s) timestamp"
    with_bom = parse_demand_csv("\ufeff" + GOOD, "excel.csv")
    plain = parse_demand_csv(GOOD, "excel.csv")
    assert with_bom.firm.tolist() == plain.firm.tolist() == [[2, 3, 1]]
    assert with_bom.interruptible.tolist() == plain.interruptible.tolist()
