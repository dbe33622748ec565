"""The shared parsers for what people type: durations, counts, money, fractions."""

from __future__ import annotations

import pytest

from gpuwise.errors import InputError
from gpuwise.units import (
    HOURS_PER_YEAR,
    parse_count,
    parse_duration_hours,
    parse_duration_seconds,
    parse_fraction,
    parse_money_usd,
)


@pytest.mark.parametrize(
    ("text", "hours"),
    [
        ("48h", 48.0),  # as documented
        ("1d12h", 36.0),  # compound
        ("90m", 1.5),  # minutes
        (
            "500ms",
            500 / 3_600_000,
        ),  # milliseconds: the exporter's help used to say "500ms is not supported"
        ("48 hours", 48.0),  # spelled out: was "cannot read duration"
        ("2 days", 48.0),  # spelled out, plural
        ("30 seconds", 30 / 3600),  # spelled out
        ("10 mins", 10 / 60),  # common abbreviation
        ("1 week", 168.0),  # singular
        ("1 year", HOURS_PER_YEAR),  # 365 days
    ],
)
def test_durations(text: str, hours: float) -> None:
    assert parse_duration_hours(text) == pytest.approx(hours)


@pytest.mark.parametrize(
    "text",
    [
        "",  # empty
        "0h",  # zero
        "-1h",  # negative
        "nan",  # not a number
        "inf",  # infinite
        "48 fortnights",  # unknown unit
        "h",  # unit without a number
        "1h garbage",  # trailing text
        "12",  # no unit: used to mean 12 hours here and 12 seconds elsewhere
    ],
)
def test_bad_durations(text: str) -> None:
    with pytest.raises(InputError):
        parse_duration_hours(text, "--since")
    with pytest.raises(InputError):
        parse_duration_seconds(text, "--interval")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("1d12h", 129_600.0),
        ("500ms", 0.5),
        ("1.5 minutes", 90.0),
    ],
)
def test_durations_in_seconds(text: str, seconds: float) -> None:
    assert parse_duration_seconds(text) == seconds  # exact: the table is in seconds


@pytest.mark.parametrize("text", ["2", "10", "2.5", "0", "-3"])
def test_a_bare_number_is_refused_with_the_fix(text: str) -> None:
    with pytest.raises(InputError) as err:
        parse_duration_seconds(text, "interval")
    assert "has no unit" in err.value.message and "30s" in err.value.hint


def test_zero_only_where_allowed_and_numbers_in_the_named_unit() -> None:
    with pytest.raises(InputError, match="must be > 0"):
        parse_duration_seconds("0s", "interval")
    assert parse_duration_seconds("0s", "restart_delay", allow_zero=True) == 0.0
    assert parse_duration_seconds(2.5) == 2.5  # a Python number: seconds, as the name says
    assert parse_duration_hours(2.5) == 2.5  # ... hours here
    assert parse_duration_hours("30m") == 0.5
    with pytest.raises(InputError):
        parse_duration_seconds(True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("7B", 7e9),
        ("1.5T", 1.5e12),
        ("300k", 3e5),
        ("2,000", 2000.0),
        ("7e9", 7e9),
    ],
)
def test_counts(text: str, value: float) -> None:
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["7 billion", "-7B", "nan", "inf", "", "1e400", "80GB"])
def test_bad_counts(text: str) -> None:
    with pytest.raises(InputError):
        parse_count(text, "--params")


def test_money_and_fractions() -> None:
    assert parse_money_usd("$2,000") == 2000.0
    assert parse_money_usd("2k USD") == 2000.0
    assert parse_fraction("60%") == pytest.approx(0.6)
    with pytest.raises(InputError):
        parse_fraction("60")  # a percentage without its sign is not a fraction


@pytest.mark.parametrize(
    ("parse", "text", "hint"),
    [
        (parse_fraction, "nan", "e.g. 0.6 or 60%"),  # was "write it as e.g. 7e9, 7B, 1.5T or 300k"
        (parse_fraction, "150%", "e.g. 0.6 or 60%"),  # above 1
        (parse_fraction, "-5%", "e.g. 0.6 or 60%"),  # negative
        (parse_money_usd, "abc", "e.g. 2000, $2,000 or 2k"),  # was the parameter-count hint
        (parse_money_usd, "-$5", "e.g. 2000, $2,000 or 2k"),
    ],
)
def test_fraction_and_money_errors_say_how_to_write_them(parse, text: str, hint: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError) as exc:
        parse(text, "--flag")
    assert hint in exc.value.hint and "--flag" in exc.value.hint
