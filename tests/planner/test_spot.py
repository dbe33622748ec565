"""The spot-overhead model against its closed forms, the Daly paper's examples, and simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuwise.errors import DataFileError, InputError
from gpuwise.planner.spot import (
    daly_interval_hours,
    load_spot_defaults,
    mean_loss_hours,
    monthly_probability_to_rate,
    p_meet_deadline,
    poisson_cdf,
    spot_outcome,
    young_interval_hours,
)


@pytest.mark.parametrize(
    ("mtbf_h", "dump_min", "want_min", "tol_min"),
    [
        (24.0, 5.0, 117.0, 1.0),  # Daly 2006, FGCS 22(3): M = 24 h, δ = 5 min → 117 min
        (6.0, 5.0, 57.0, 1.0),  # M = 6 h → 57 min
        (0.25, 5.0, 9.1, 0.1),  # M = 15 min → 9.1 min
    ],
)
def test_daly_interval_reproduces_the_papers_examples(
    mtbf_h: float, dump_min: float, want_min: float, tol_min: float
) -> None:
    assert daly_interval_hours(dump_min / 60, mtbf_h) * 60 == pytest.approx(want_min, abs=tol_min)


def test_daly_limits() -> None:
    assert daly_interval_hours(1.0, math.inf) == math.inf  # no failures: no periodic checkpoint
    assert daly_interval_hours(3.0, 1.0) == 1.0  # δ ≥ 2M: checkpoint every M
    assert daly_interval_hours(0.0, 10.0) == 0.0
    # for δ ≪ M Daly tends to Young's √(2δM)
    assert daly_interval_hours(1e-4, 1e3) == pytest.approx(
        young_interval_hours(1e-4, 1e3), rel=1e-3
    )


def test_monthly_probability_to_rate() -> None:
    assert monthly_probability_to_rate(0.10) == pytest.approx(-math.log(0.9) / 730)
    assert monthly_probability_to_rate(0.0) == 0.0
    with pytest.raises(InputError):
        monthly_probability_to_rate(1.0)
    with pytest.raises(InputError):
        monthly_probability_to_rate(float("nan"))


@pytest.mark.parametrize(
    ("work", "rate", "c", "r", "tau"),
    [
        (100.0, 0.05, 0.1, 0.2, 10.0),  # W a multiple of τ: 10 segments
        (12.0, 0.5, 0.01, 0.05, 0.5),  # hot pool
        (7.0, 0.01, 0.0, 1.0, 3.5),  # free checkpoints, slow restarts
    ],
)
def test_expected_time_equals_the_closed_form(
    work: float, rate: float, c: float, r: float, tau: float
) -> None:
    out = spot_outcome(
        work, rate_per_hour=rate, checkpoint_hours=c, restart_hours=r, interval_hours=tau
    )
    n = work / tau
    closed = n * (1 / rate + r) * (math.exp(rate * (tau + c)) - 1)
    assert out.expected_hours == pytest.approx(closed, rel=1e-12)
    assert out.failure_free_hours == pytest.approx(work + n * c)


def test_no_interruptions_means_no_overhead() -> None:
    out = spot_outcome(40.0, rate_per_hour=0.0, checkpoint_hours=0.1, restart_hours=0.2)
    assert out.expected_hours == 40.0
    assert out.interval_hours == math.inf
    assert p_meet_deadline(out, 40.0, 40.0) == 1.0
    assert p_meet_deadline(out, 40.0, 39.9) == 0.0


def test_overhead_matches_youngs_first_order_waste() -> None:
    # small C/M: waste ≈ C/τ + τ/(2M) + R/M (first order, Young 1974)
    c, m, r, w = 1 / 60, 200.0, 0.1, 1000.0
    out = spot_outcome(w, rate_per_hour=1 / m, checkpoint_hours=c, restart_hours=r)
    tau = out.interval_hours
    waste = c / tau + tau / (2 * m) + r / m
    assert out.expected_hours / w - 1 == pytest.approx(waste, rel=0.05)


def _simulate(
    work: float, rate: float, c: float, r: float, tau: float, runs: int, seed: int
) -> np.ndarray:
    """Monte Carlo of the renewal process the closed form describes."""
    rng = np.random.default_rng(seed)
    n_full = math.floor(work / tau)
    segs = [tau + c] * n_full + ([work - n_full * tau] if work - n_full * tau > 1e-12 else [])
    totals = np.zeros(runs)
    for i in range(runs):
        t = 0.0
        for a in segs:
            while True:
                x = rng.exponential(1 / rate)
                if x >= a:
                    t += a
                    break
                t += x + r
        totals[i] = t
    return totals


def test_expected_time_matches_simulation() -> None:
    work, rate, c, r = 20.0, 0.2, 0.05, 0.1
    out = spot_outcome(work, rate_per_hour=rate, checkpoint_hours=c, restart_hours=r)
    sim = _simulate(work, rate, c, r, out.interval_hours, runs=4000, seed=1)
    assert sim.mean() == pytest.approx(out.expected_hours, rel=0.02)


def test_deadline_probability_is_the_poisson_closed_form() -> None:
    from scipy.stats import poisson

    work, rate, c, r, deadline = 30.0, 0.1, 0.05, 0.2, 34.0
    out = spot_outcome(work, rate_per_hour=rate, checkpoint_hours=c, restart_hours=r)
    loss = mean_loss_hours(out, work)
    k_max = math.floor((deadline - out.failure_free_hours) / loss)
    mu = rate * out.failure_free_hours
    assert p_meet_deadline(out, work, deadline) == pytest.approx(poisson.cdf(k_max, mu), rel=1e-9)
    # one allowed interruption: e^-μ (1 + μ)
    d1 = out.failure_free_hours + loss * 1.5
    assert p_meet_deadline(out, work, d1) == pytest.approx(math.exp(-mu) * (1 + mu), rel=1e-9)


def test_deadline_probability_is_close_to_simulation() -> None:
    work, rate, c, r = 20.0, 0.2, 0.05, 0.1
    out = spot_outcome(work, rate_per_hour=rate, checkpoint_hours=c, restart_hours=r)
    sim = _simulate(work, rate, c, r, out.interval_hours, runs=4000, seed=2)
    for deadline in (out.failure_free_hours + 0.5, out.expected_hours, out.expected_hours + 1.0):
        assert p_meet_deadline(out, work, deadline) == pytest.approx(
            (sim <= deadline).mean(), abs=0.06
        )


def test_deadline_probability_is_monotone() -> None:
    out = spot_outcome(10.0, rate_per_hour=0.3, checkpoint_hours=0.02, restart_hours=0.2)
    ps = [p_meet_deadline(out, 10.0, d) for d in (10.0, 10.5, 11, 12, 14, 20)]
    assert ps == sorted(ps)
    assert ps[-1] > 0.99
    riskier = spot_outcome(10.0, rate_per_hour=0.6, checkpoint_hours=0.02, restart_hours=0.2)
    assert p_meet_deadline(riskier, 10.0, 12.0) < p_meet_deadline(out, 10.0, 12.0)


@pytest.mark.parametrize(("k", "mu"), [(0, 0.5), (3, 2.0), (50, 40.0), (900, 1000.0)])
def test_poisson_cdf(k: int, mu: float) -> None:
    from scipy.stats import poisson

    assert poisson_cdf(k, mu) == pytest.approx(poisson.cdf(k, mu), rel=1e-9, abs=1e-12)


def test_bundled_spot_defaults_have_sources() -> None:
    spot = load_spot_defaults()
    assert spot.for_cloud("aws").notice_seconds == 120
    assert spot.for_cloud("somecloud").cloud == "default"
    for risk in spot.clouds.values():
        assert risk.source and risk.confidence in ("high", "low", "assumption")
    assert spot.checkpoint_bandwidth_gb_s > 0 and spot.restart_hours > 0


def test_user_spot_file_overrides_key_by_key(isolated_env) -> None:  # type: ignore[no-untyped-def]
    cfg = isolated_env / "config"
    cfg.mkdir()
    (cfg / "spot.yaml").write_text(
        "clouds:\n  aws: {monthly_interruption_probability: 0.5}\nrestart_minutes: 3\n"
    )
    spot = load_spot_defaults()
    assert spot.for_cloud("aws").monthly_interruption_probability == 0.5
    assert spot.for_cloud("aws").notice_seconds == 120  # kept from the bundled file
    assert spot.restart_hours == pytest.approx(0.05)


@pytest.mark.parametrize(
    "text",
    [
        "clouds:\n  aws: {monthly_interruption_probability: 1.5}\n",  # not a probability
        "clouds:\n  aws: {monthly_interruption_probability: .nan}\n",
        "restart_minutes: -1\n",
        "[unclosed\n",  # not YAML
        "- a list\n",
    ],
)
def test_bad_user_spot_file_is_a_data_file_error(isolated_env, text: str) -> None:  # type: ignore[no-untyped-def]
    cfg = isolated_env / "config"
    cfg.mkdir()
    (cfg / "spot.yaml").write_text(text)
    with pytest.raises(DataFileError):
        load_spot_defaults()
