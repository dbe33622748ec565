"""Vendor scoring against a hand-computed case; weights; missing values."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwise.errors import DataFileError
from gpuwise.fleet.vendors import parse_criteria, score_vendors


def doc(weights: dict[str, float] | None = None) -> dict[str, Any]:
    return {
        "weights": weights or {"a": 0.6, "b": 0.4},
        "criteria": {"a": {"m1": {"direction": "higher"}}, "b": {"m2": {"direction": "lower"}}},
        "vendors": [
            {"name": "X", "values": {"m1": 10, "m2": 5}},
            {"name": "Y", "values": {"m1": 20, "m2": 10}},
            {"name": "Z", "values": {"m1": 15, "m2": 0}},
        ],
    }


def test_hand_computed_ranking_and_sensitivity() -> None:
    r = score_vendors(parse_criteria(doc(), "v.yaml"))
    norm = {n.metric: n.normalized for n in r.normalization}
    assert norm["m1"] == {"X": 0.0, "Y": 1.0, "Z": 0.5}  # (x − 10) / (20 − 10)
    assert norm["m2"] == {"X": 0.5, "Y": 0.0, "Z": 1.0}  # (10 − x) / (10 − 0)
    assert [(s.vendor, round(s.score, 9)) for s in r.ranking] == [
        ("Z", 0.7),
        ("Y", 0.6),
        ("X", 0.2),
    ]
    assert r.ranking[0].by_dimension == pytest.approx({"a": 0.3, "b": 0.4})
    # Z = 1 − 0.5 w_a and Y = w_a cross at w_a = 2/3; symmetric for b at 1/3
    sens = {s.dimension: s for s in r.sensitivity}
    assert sens["a"].switch_weight == pytest.approx(2 / 3)
    assert sens["a"].change == pytest.approx(2 / 3 - 0.6)
    assert sens["a"].new_winner == "Y"
    assert sens["b"].switch_weight == pytest.approx(1 / 3)
    assert sens["b"].new_winner == "Y"


def test_weights_must_sum_to_one_unless_normalized() -> None:
    with pytest.raises(DataFileError, match="sum to 1.5, not 1"):
        parse_criteria(doc({"a": 0.9, "b": 0.6}), "v.yaml")
    crit = parse_criteria(doc({"a": 0.9, "b": 0.6}), "v.yaml", normalize_weights=True)
    assert crit.weights == pytest.approx({"a": 0.6, "b": 0.4})
    assert any("rescaled" in n for n in crit.notes)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (
            lambda d: d["vendors"][0]["values"].pop("m1"),
            "no value for a.m1",
        ),  # missing, nothing to fill
        (
            lambda d: d["vendors"][0]["values"].update(m1="fast"),
            "expected a finite number, got",
        ),  # not a number
        (lambda d: d["vendors"][0]["values"].update(m3=1), "not a metric"),  # unknown metric
        (lambda d: d["criteria"]["a"]["m1"].update(direction="up"), "direction"),  # bad direction
        (lambda d: d["weights"].update(a=-0.6, b=1.6), "negative"),  # negative weight
        (lambda d: d["vendors"].pop() and d["vendors"].pop(), "at least two vendors"),  # one vendor
        (lambda d: d["weights"].pop("b"), "do not match"),  # weight missing for a dimension
    ],
)
def test_bad_documents(mutate: Any, needle: str) -> None:
    d = doc()
    mutate(d)
    with pytest.raises(DataFileError, match=needle):
        parse_criteria(d, "v.yaml")


def test_equal_values_normalize_to_one() -> None:
    d = doc()
    for v in d["vendors"]:
        v["values"]["m1"] = 7
    r = score_vendors(parse_criteria(d, "v.yaml"))
    assert next(n for n in r.normalization if n.metric == "m1").normalized == {
        "X": 1.0,
        "Y": 1.0,
        "Z": 1.0,
    }


@pytest.mark.parametrize(
    ("vendor", "needle", "suggestion"),
    [
        # an unknown gpu: was "unknown GPU 'H10'" without the file or the vendor
        ({"gpu": "H10", "cloud": "aws"}, r"v\.yaml: vendors\[0\] \(X\): unknown GPU 'H10'", "H100"),
        # an unknown cloud: was "no value for ... usd_per_gpu_hour", which hid the typo
        (
            {"gpu": "H100", "cloud": "awz"},
            r"v\.yaml: vendors\[0\] \(X\): unknown cloud 'awz'",
            "aws",
        ),
    ],
)
def test_filled_values_name_the_vendor_and_suggest(
    vendor: dict[str, str], needle: str, suggestion: str
) -> None:
    from gpuwise.catalog import load_catalog
    from gpuwise.fleet.vendors import catalog_filler

    d = {
        "weights": {"cost": 1.0},
        "criteria": {"cost": {"usd_per_gpu_hour": {"direction": "lower"}}},
        "vendors": [{"name": "X", **vendor}, {"name": "Y", "values": {"usd_per_gpu_hour": 2.0}}],
    }
    fill = catalog_filler(load_catalog().offers, {})
    with pytest.raises(DataFileError, match=needle) as exc:
        parse_criteria(d, "v.yaml", fill=fill)
    assert suggestion in exc.value.suggestions


def test_a_tie_at_the_end_of_the_weight_range_is_not_a_winner_change() -> None:
    # Every vendor scores the same on m1: with all weight on dimension a they only tie, so moving
    # a's weight never changes the winner (it used to report a switch at weight 1.0).
    d = doc()
    for v in d["vendors"]:
        v["values"]["m1"] = 7
    r = score_vendors(parse_criteria(d, "v.yaml"))
    assert len({round(s.by_dimension["a"], 12) for s in r.ranking}) == 1
    sens = {s.dimension: s for s in r.sensitivity}
    assert (sens["a"].switch_weight, sens["a"].change, sens["a"].new_winner) == (None, None, None)
    # the other dimension still moves the winner somewhere strictly inside (0, 1), or never
    assert sens["b"].switch_weight is None or 0 < sens["b"].switch_weight < 1
