"""Young/Daly checkpoint interval: the paper's own examples, and the async clamps."""

from __future__ import annotations

import math

import pytest

from gpuwise.errors import InputError
from gpuwise.train.interval import (
    DEFAULT_MAX_INTERVAL_S,
    DEFAULT_MTBF_HOURS,
    checkpoint_interval_s,
    daly_interval_s,
    waste_fraction,
    young_interval_s,
)


@pytest.mark.parametrize(
    ("mtbf_min", "cost_min", "expected_min"),
    [
        (24 * 60, 5, 117),  # Daly 2006, FGCS 22(3): M = 24 h, δ = 5 min → 117 min
        (6 * 60, 5, 57),  # M = 6 h → 57 min
        (15, 5, 9.1),  # M = 15 min → 9.1 min
    ],
)
def test_daly_reproduces_the_papers_examples(
    mtbf_min: float, cost_min: float, expected_min: float
) -> None:
    got = daly_interval_s(cost_min * 60, mtbf_min * 60) / 60
    assert got == pytest.approx(expected_min, abs=0.6 if expected_min > 20 else 0.1)


def test_young_is_sqrt_2cm() -> None:
    assert young_interval_s(60, 3600) == pytest.approx(math.sqrt(2 * 60 * 3600))


def test_daly_caps_at_mtbf_when_the_cost_is_huge() -> None:
    assert daly_interval_s(100, 40) == 40


@pytest.mark.parametrize(
    ("stall_s", "write_s", "nodes", "expected_s"),
    [
        (
            1.0,
            0.0,
            1,
            DEFAULT_MAX_INTERVAL_S,
        ),  # 1 s stall, Spot-advisor MTBF: Daly says 81 min, cap 30
        (0.05, 0.0, 1, 1085.6),  # 50 ms stall: √(2·0.05·3271 h) ≈ 18 min
        (0.05, 4000.0, 1, DEFAULT_MAX_INTERVAL_S),  # never above the cap...
        (1e-4, 30.0, 4000, 30.0),  # ...never below the background write time
    ],
)
def test_checkpoint_interval_clamps(
    stall_s: float, write_s: float, nodes: int, expected_s: float
) -> None:
    assert checkpoint_interval_s(stall_s, write_s=write_s, nodes=nodes) == pytest.approx(
        expected_s, rel=1e-3
    )


def test_more_nodes_means_more_frequent_saves() -> None:
    one = checkpoint_interval_s(2.0, mtbf_hours=6, max_interval_s=1e9)
    many = checkpoint_interval_s(2.0, mtbf_hours=6, nodes=16, max_interval_s=1e9)
    assert many < one


def test_default_mtbf_is_the_spot_advisor_worst_band() -> None:
    assert (
        pytest.approx(3271, abs=1) == DEFAULT_MTBF_HOURS
    )  # 730 h / -ln(0.8): 20 %/month as a constant hazard


def test_waste_at_the_optimum_is_about_sqrt_2c_over_m() -> None:
    c, m = 60.0, 6 * 3600.0
    t = young_interval_s(c, m)
    assert waste_fraction(t, c, m) == pytest.approx(math.sqrt(2 * c / m), rel=1e-9)


@pytest.mark.parametrize(
    ("cost", "mtbf"), [(0, 10), (-1, 10), (1, float("nan")), (1, float("inf"))]
)
def test_bad_inputs_are_input_errors(cost: float, mtbf: float) -> None:
    with pytest.raises(InputError):
        daly_interval_s(cost, mtbf)
