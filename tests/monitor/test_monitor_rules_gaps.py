"""Accounting through gaps, in promtool: failed scrapes, samples that stop without a stale marker,
exporter restarts, three days of history, an all-idle MIG GPU, two prices on one host; rented
time billed through scrape gaps at 15 s to 2 min and a 10-minute crash loop, a GPU seen for 30
minutes, a doubly scraped exporter and an unpriced GPU.

Billing runs 15 minutes behind the clock (the minute whose middle was 15m30s ago), so a day's
figures are read at its end + 15 minutes.

Each scenario is written here as input series (a value per scrape: a number, ``None`` for no
sample, ``STALE`` for the stale marker Prometheus writes when a scrape fails) and the answers a
person would compute by hand; promtool's own rule engine evaluates the shipped rules on them.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy/prometheus/gpuwise-rules.yml"
OLD_RULES = REPO / "tests/monitor/fixtures/rules_instant_vector.yml"
OBSERVED_RULES = (
    REPO / "tests/monitor/fixtures/rules_observed_minutes.yml"
)  # before billing rented time
PROMTOOL = shutil.which("promtool")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian prometheus)"),
]
STALE = "stale"
GPU = 'instance="n1:9835",job="gpuwise",gpu="{gpu}",uuid="GPU-{gpu}",model="{model}",host="n1"'
BILLED = (
    'gpu="{gpu}",uuid="GPU-{gpu}",model="{model}",host="n1"'  # billing records: per GPU, any job
)
TARGET = 'instance="n1:9835",job="gpuwise"'
Value = float | str | None


def _values(values: Sequence[Value], from_zero: bool = False) -> str:
    """promtool's notation; the first scrape (time 0) is left empty unless ``from_zero``."""
    return " ".join(
        "_" if v is None or (i == 0 and not from_zero) else v if isinstance(v, str) else repr(v)
        for i, v in enumerate(values)
    )


def _series(
    name: str, labels: str, values: Sequence[Value], from_zero: bool = False
) -> dict[str, str]:
    return {"series": f"{name}{{{labels}}}", "values": _values(values, from_zero)}


def _gpu_series(
    scrapes_ok: Sequence[bool],
    *,
    gpu: int = 0,
    model: str = "H100",
    price: Sequence[float] | float = 10.0,
    util: Sequence[float] | float = 0.9,
    processes: int = 1,
    price_source: str = "configured",
    from_zero: bool = False,
) -> list[dict[str, str]]:
    """One GPU's series: every successful scrape has a sample, a failed one a stale marker."""
    n = len(scrapes_ok)

    def per_scrape(v: Sequence[float] | float) -> list[Value]:
        seq = [float(v)] * n if isinstance(v, (int, float)) else list(v)
        return [x if ok else STALE for x, ok in zip(seq, scrapes_ok, strict=True)]

    labels = GPU.format(gpu=gpu, model=model)
    z = from_zero
    return [
        _series("gpuwise_gpu_up", labels, per_scrape(1.0), z),
        _series("gpuwise_gpu_processes", labels, per_scrape(float(processes)), z),
        _series("gpuwise_gpu_utilization_ratio", labels, per_scrape(util), z),
        _series(
            "gpuwise_gpu_cost_usd_per_hour",
            f'{labels},price_source="{price_source}"',
            per_scrape(price),
            z,
        ),
    ]


def _up(scrapes_ok: Sequence[bool], from_zero: bool = False) -> dict[str, str]:
    return _series("up", TARGET, [1.0 if ok else 0.0 for ok in scrapes_ok], from_zero)


def _check(expr: str, at: str, value: float, labels: str = "{}") -> dict[str, Any]:
    return {"expr": expr, "eval_time": at, "exp_samples": [{"labels": labels, "value": value}]}


def _promtool(tmp_path: Path, rules: Path, test: dict[str, Any]) -> tuple[bool, str]:
    body = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [test]}
    path = tmp_path / "gaps.test.yml"
    path.write_text(yaml.safe_dump(body, width=10**9))
    r = subprocess.run(
        [str(PROMTOOL), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return r.returncode == 0, r.stdout + r.stderr


def _assert_passes(tmp_path: Path, test: dict[str, Any]) -> None:
    ok, out = _promtool(tmp_path, RULES, test)
    assert ok, out


DAY_15S = 24 * 60 * 4  # scrapes in a day at a 15 s interval


def _failing(n: int, share: float, seed: int) -> list[bool]:
    """Scrape 0 and then ``n`` scrapes of which exactly ``share`` fail, at random places."""
    bad = set(random.Random(seed).sample(range(1, n + 1), round(n * share)))
    return [i not in bad for i in range(n + 1)]


def test_a_fifth_of_scrapes_failing_costs_nothing_and_shows_80_percent(tmp_path: Path) -> None:
    """A day at $10/h, 15 s scrapes, 20 % failing at random: busy the first 12 h, idle after.
    Truth: $240 spent, $120 wasted; the observed share is 80 %. The old instant-vector rules
    lost every minute whose last scrape failed and said about $192."""
    ok = _failing(DAY_15S, 0.2, seed=24)
    half = DAY_15S // 2
    test = {
        "interval": "15s",
        "input_series": [
            _up(ok),
            *_gpu_series(ok, util=[0.9] * (half + 1) + [0.0] * half),
        ],
        "promql_expr_test": [
            _check("abs(gpuwise:cost_usd:1d - 240) / 240 < bool 0.02", "24h15m", 1),
            _check("abs(gpuwise:wasted_usd:1d - 120) / 120 < bool 0.02", "24h15m", 1),
            _check("abs(gpuwise:observed_share:1d - 0.8) < bool 1e-9", "24h", 1),
            _check(
                "abs(gpuwise:gpu_observed_share:1d - 0.8) < bool 1e-9",
                "24h",
                1,
                "{" + BILLED.format(gpu=0, model="H100") + "}",
            ),
        ],
    }
    _assert_passes(tmp_path, test)
    ok_old, out = _promtool(tmp_path, OLD_RULES, test)
    assert not ok_old and "gpuwise:cost_usd:1d" in out


def test_samples_that_stop_without_a_stale_marker_count_one_minute_at_most(
    tmp_path: Path,
) -> None:
    """30 minutes of 15 s samples that end without a stale marker (Prometheus restarted, or a
    federated copy): 30 minutes observed, $5 at $10/h; the old rules' 5-minute lookback said
    34 minutes (+13 %). A minute is the resolution: the minute the data stops in counts whole."""
    ok = [True] * 120
    test = {
        "interval": "15s",
        "input_series": _gpu_series(ok),
        "promql_expr_test": [
            _check("round(gpuwise:cost_usd:1d, 0.001)", "2h", 5),
            _check("round(sum(gpuwise:gpu_hours_rented:1d) * 60)", "2h", 30),
        ],
    }
    _assert_passes(tmp_path, test)
    ok_old, out = _promtool(tmp_path, OLD_RULES, test)
    assert not ok_old and "5.667" in out  # 34 minutes at $10/h


def test_exporter_restarts_bill_the_rented_day_and_show_the_observed_share(
    tmp_path: Path,
) -> None:
    """A day at $10/h with a 30 s restart at 6 h (2 scrapes fail) and a 3-minute outage at 18 h
    (12 scrapes fail): the node was rented throughout, so the day bills $240 (the rules before
    said $239.50, dropping the outage), and the observed share shows both gaps."""
    ok = [True] * (DAY_15S + 1)
    for i in (6 * 240 + 1, 6 * 240 + 2, *range(18 * 240 + 1, 18 * 240 + 13)):
        ok[i] = False
    test = {
        "interval": "15s",
        "input_series": [_up(ok), *_gpu_series(ok)],
        "promql_expr_test": [
            _check("round(gpuwise:cost_usd:1d, 0.001)", "24h15m", 240),
            _check(
                f"abs(gpuwise:observed_share:1d - {(DAY_15S - 14) / DAY_15S!r}) < bool 1e-9",
                "24h",
                1,
            ),
        ],
    }
    _assert_passes(tmp_path, test)


def test_three_days_of_history_report_the_last_day(tmp_path: Path) -> None:
    """Three days at $10/h, busy for two days and idle on the third: at 48 h nothing is wasted,
    at 72 h the last day is $240 spent and $240 wasted, 24 observed hours, not 72."""
    minutes = 3 * 24 * 60
    ok = [True] * (minutes + 1)
    util = [0.9] * (2 * 24 * 60) + [0.0] * (24 * 60 + 1)  # the sample at 48 h is idle
    test = {
        "interval": "1m",
        "input_series": [_up(ok), *_gpu_series(ok, util=util)],
        "promql_expr_test": [
            _check("round(gpuwise:wasted_usd:1d, 0.001)", "48h15m", 0),
            _check("round(gpuwise:cost_usd:1d, 0.001)", "72h15m", 240),
            _check("round(gpuwise:wasted_usd:1d, 0.001)", "72h15m", 240),
            _check("round(sum(gpuwise:gpu_hours_rented:1d), 0.001)", "72h15m", 24),
            _check("gpuwise:observed_share:1d", "72h", 1, "gpuwise:observed_share:1d"),
        ],
    }
    _assert_passes(tmp_path, test)


def test_a_mig_gpu_with_every_instance_idle_is_all_waste(tmp_path: Path) -> None:
    """A MIG A100 at $7/h for 2 h with two 3-slice instances, SM-active 0 and no process in
    either: $14 spent, $14 wasted, no active hour; the idle share reads 1 (a ratio, not a count)."""
    n = 120
    ok = [True] * (n + 1)
    labels = GPU.format(gpu=0, model="A100")
    series = [
        _up(ok, True),
        *_gpu_series(ok, model="A100", price=7.0, processes=0, from_zero=True),
        _series("gpuwise_mig_gpu_slices", labels, [7.0] * (n + 1), True),
    ]
    for k in (1, 2):
        mig = f'{labels},mig_uuid="MIG-{k}",gpu_instance="{k}",profile="3g.40gb"'
        series += [
            _series("gpuwise_mig_slices", mig, [3.0] * (n + 1), True),
            _series("gpuwise_mig_processes", mig, [0.0] * (n + 1), True),
            _series("gpuwise_mig_sm_active_ratio", mig, [0.0] * (n + 1), True),
        ]
    test = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            _check("round(gpuwise:cost_usd:1d, 0.001)", "2h15m", 14),
            _check("round(gpuwise:wasted_usd:1d, 0.001)", "2h15m", 14),
            _check("sum(gpuwise:gpu_hours_active:1d)", "2h15m", 0),
            _check("gpuwise:idle_share:ratio", "2h", 1, "gpuwise:idle_share:ratio"),
        ],
    }
    _assert_passes(tmp_path, test)


def test_two_prices_on_one_host(tmp_path: Path) -> None:
    """One host, an H100 and an L4, 2 h at 15 s. The H100 costs $10/h for the first hour, then
    $6/h from a new price source (a new series; the old one gets its stale marker); the L4 costs
    $1/h throughout. Truth: H100 $16, L4 $2, fleet $18; no minute is priced twice."""
    n = 2 * 240
    ok = [True] * (n + 1)
    labels = GPU.format(gpu=0, model="H100")
    first = [10.0] * 241 + [STALE] + [None] * (n - 241)  # the new price from 1 h 15 s
    second = [None] * 241 + [6.0] * (n - 240)
    series = [
        _up(ok),
        *[s for s in _gpu_series(ok) if "cost" not in s["series"]],
        _series("gpuwise_gpu_cost_usd_per_hour", f'{labels},price_source="configured"', first),
        _series("gpuwise_gpu_cost_usd_per_hour", f'{labels},price_source="catalog"', second),
        *_gpu_series(ok, gpu=1, model="L4", price=1.0),
    ]
    test = {
        "interval": "15s",
        "input_series": series,
        "promql_expr_test": [
            _check("round(gpuwise:cost_usd:1d, 0.001)", "2h15m", 18),
            _check(
                'round(gpuwise:gpu_cost_usd:1d{gpu="0"}, 0.001)',
                "2h15m",
                16,
                "{" + BILLED.format(gpu=0, model="H100") + "}",
            ),
        ],
    }
    _assert_passes(tmp_path, test)


def _failing_at(n: int, share: float, seed: int) -> list[bool]:
    """``n + 1`` scrapes (0 … n) of which ``share`` fail at random places, never the first or
    the last (a GPU's rental starts and ends where it is seen)."""
    bad = set(random.Random(seed).sample(range(1, n), round((n - 1) * share)))
    return [i not in bad for i in range(n + 1)]


def _from_zero(scrapes_ok: Sequence[bool], price: float = 10.0) -> list[dict[str, str]]:
    """One GPU's series from time 0 (``_gpu_series`` leaves time 0 empty)."""
    vals = ["1" if ok else STALE for ok in scrapes_ok]
    cost = [repr(price) if ok else STALE for ok in scrapes_ok]
    labels = GPU.format(gpu=0, model="H100")
    return [
        {"series": f"gpuwise_gpu_up{{{labels}}}", "values": " ".join(vals)},
        {"series": f"gpuwise_gpu_processes{{{labels}}}", "values": " ".join(vals)},
        {"series": f"gpuwise_gpu_utilization_ratio{{{labels}}}", "values": " ".join(vals)},
        {
            "series": f'gpuwise_gpu_cost_usd_per_hour{{{labels},price_source="configured"}}',
            "values": " ".join(cost),
        },
        {"series": f"up{{{TARGET}}}", "values": " ".join("1" if ok else "0" for ok in scrapes_ok)},
    ]


@pytest.mark.parametrize("interval_s", [15, 30, 60, 120])
def test_a_fifth_of_scrapes_failing_bills_the_rented_hours_at_any_interval(
    tmp_path: Path, interval_s: int
) -> None:
    """4 hours rented at $10/h, scraped every 15 s to 2 min with 20 % of the scrapes failing:
    $40, exactly. The rules before billed only minutes with a sample: $32.17 at 60 s, $16.17 at 120 s."""
    n = 4 * 3600 // interval_s
    ok = _failing_at(n, 0.2, seed=interval_s)
    test = {
        "interval": f"{interval_s}s",
        "input_series": _from_zero(ok),
        "promql_expr_test": [_check("round(gpuwise:cost_usd:1d, 0.001)", "4h15m", 40)],
    }
    _assert_passes(tmp_path, test)
    if interval_s >= 60:
        ok_old, _ = _promtool(tmp_path, OBSERVED_RULES, test)
        assert not ok_old


def test_a_ten_minute_crash_loop_bills_the_rented_hour(tmp_path: Path) -> None:
    """An hour at $10/h, 15 s scrapes; the exporter crash-loops from 20 to 30 minutes (every
    scrape fails, up = 0): the node was rented, $10. The rules before said $8.67."""
    ok = [not (80 <= i < 120) for i in range(241)]
    test = {
        "interval": "15s",
        "input_series": _from_zero(ok),
        "promql_expr_test": [
            _check("round(gpuwise:cost_usd:1d, 0.001)", "1h15m", 10),
            _check("round(gpuwise:observed_share:1d, 0.001)", "1h", round(201 / 241, 3)),
        ],
    }
    _assert_passes(tmp_path, test)
    ok_old, out = _promtool(tmp_path, OBSERVED_RULES, test)
    assert not ok_old and "gpuwise:cost_usd:1d" in out


def test_a_gpu_seen_for_30_minutes_bills_30(tmp_path: Path) -> None:
    """Seen from 0 to 30 minutes, scraped every minute (31 samples), then gone: 30 minutes,
    $5 at $10/h; the rules before billed 31 minutes."""
    test = {
        "interval": "1m",
        "input_series": _from_zero([True] * 31),
        "promql_expr_test": [
            _check("round(gpuwise:cost_usd:1d, 0.001)", "2h", 5),
            _check("round(sum(gpuwise:gpu_hours_rented:1d) * 60)", "2h", 30),
        ],
    }
    _assert_passes(tmp_path, test)
    ok_old, out = _promtool(tmp_path, OBSERVED_RULES, test)
    assert not ok_old and "5.167" in out


def test_an_exporter_scraped_by_two_jobs_bills_once(tmp_path: Path) -> None:
    """A ServiceMonitor and a PodMonitor both scrape the exporter (two jobs, the same GPU): one
    hour at $10/h is $10, not $20.33 as the rules before said."""
    series = _from_zero([True] * 241)
    twice = [
        {
            "series": x["series"].replace('job="gpuwise"', 'job="gpuwise-pods"'),
            "values": x["values"],
        }
        for x in series
    ]
    test = {
        "interval": "15s",
        "input_series": series + twice,
        "promql_expr_test": [
            _check("round(gpuwise:cost_usd:1d, 0.001)", "1h15m", 10),
            _check("count(gpuwise:gpu_cost_usd:1d)", "1h15m", 1),
        ],
    }
    _assert_passes(tmp_path, test)
    ok_old, out = _promtool(tmp_path, OBSERVED_RULES, test)
    assert not ok_old and "gpuwise:cost_usd:1d" in out


def test_an_unpriced_gpu_is_counted_and_alerted_not_free(tmp_path: Path) -> None:
    """Two GPUs for 2 h: one at $10/h, one whose exporter has no price (an instance type the
    catalog lacks). The fleet's dollars are the priced GPU's $20; the other's 2 hours are
    counted as unpriced, and GpuwiseGpuUnpriced fires for it after 30 minutes."""
    priced = _from_zero([True] * 481)
    unpriced = [
        {
            "series": x["series"].replace('gpu="0",uuid="GPU-0"', 'gpu="1",uuid="GPU-1"'),
            **{"values": x["values"]},
        }
        for x in priced
        if "cost_usd" not in x["series"] and not x["series"].startswith("up{")
    ]
    test = {
        "interval": "15s",
        "input_series": priced + unpriced,
        "promql_expr_test": [
            _check("round(gpuwise:cost_usd:1d, 0.001)", "2h15m", 20),
            _check("round(gpuwise:hours_unpriced:1d, 0.001)", "2h15m", 2),
        ],
        "alert_rule_test": [
            {
                "eval_time": "1h",
                "alertname": "GpuwiseGpuUnpriced",
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": "warning",
                            "gpu": "1",
                            "uuid": "GPU-1",
                            "model": "H100",
                            "host": "n1",
                        },
                        "exp_annotations": {
                            "summary": "GPU 1 on n1 is rented but has no price",
                            "description": _UNPRICED_DESCRIPTION,
                        },
                    }
                ],
            }
        ],
    }
    _assert_passes(tmp_path, test)


_UNPRICED_DESCRIPTION = next(
    r["annotations"]["description"]
    for g in yaml.safe_load(RULES.read_text())["groups"]
    for r in g["rules"]
    if r.get("alert") == "GpuwiseGpuUnpriced"
)
