"""Units and the parsers for numbers people type.

Names carry their unit everywhere in gpuwise (``memory_gib``, ``price_usd_per_hour``,
``peak_bf16_tflops``); this module holds the conversion constants and the parsers that turn
``7B``, ``1.5T``, ``48h`` or ``$2,000`` into plain floats, rejecting NaN, infinities and
negatives with an :class:`~gpuwise.errors.InputError` that says how to write the value.
"""

from __future__ import annotations

import math
import re

from gpuwise.errors import InputError

BYTES_PER_GIB = 1024**3
BYTES_PER_MIB = 1024**2
BYTES_PER_GB = 1000**3
MIB_PER_GIB = 1024
HOURS_PER_DAY = 24.0
HOURS_PER_YEAR = 8760.0  # 365 days; the convention cloud price lists use for "1 year"
HOURS_PER_MONTH = HOURS_PER_YEAR / 12  # 730 h, AWS's and GCP's monthly billing convention
TFLOPS = 1e12

_SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_NUMBER = re.compile(r"^\s*([+-]?(?:\d[\d_,]*\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*([kmbgt]?)\s*$", re.I)

_DURATION_UNITS_H = {
    "ms": 1 / 3_600_000,
    "s": 1 / 3600,
    "sec": 1 / 3600,
    "secs": 1 / 3600,
    "second": 1 / 3600,
    "seconds": 1 / 3600,
    "m": 1 / 60,
    "min": 1 / 60,
    "mins": 1 / 60,
    "minute": 1 / 60,
    "minutes": 1 / 60,
    "h": 1.0,
    "hr": 1.0,
    "hrs": 1.0,
    "hour": 1.0,
    "hours": 1.0,
    "d": 24.0,
    "day": 24.0,
    "days": 24.0,
    "w": 168.0,
    "wk": 168.0,
    "week": 168.0,
    "weeks": 168.0,
    "y": HOURS_PER_YEAR,
    "yr": HOURS_PER_YEAR,
    "year": HOURS_PER_YEAR,
    "years": HOURS_PER_YEAR,
}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)", re.I)


def check_finite(value: float, what: str, *, minimum: float | None = 0.0, strict: bool = False,
                 maximum: float | None = None) -> float:
    """Return ``value`` as a float if it is finite and within bounds, else raise InputError."""
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        raise InputError(f"{what} must be a finite number, got {value!r}", hint=f"give {what} as a plain number")
    if minimum is not None and (v < minimum or (strict and v == minimum)):
        cmp = ">" if strict else "≥"
        raise InputError(f"{what} must be {cmp} {minimum:g}, got {v:g}", hint=f"give a {what} {cmp} {minimum:g}")
    if maximum is not None and v > maximum:
        raise InputError(f"{what} must be ≤ {maximum:g}, got {v:g}", hint=f"give a {what} ≤ {maximum:g}")
    return v


def parse_count(text: str | float | int, what: str = "value", *, allow_zero: bool = True) -> float:
    """Parse ``7e9``, ``7B``, ``1.5T``, ``300k``, ``2,000`` into a non-negative float.

    ``B``/``G`` both mean 1e9 (billions), as in "7B parameters"; ``M`` is millions.
    """
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _NUMBER.match(text)
        if not m:
            raise InputError(
                f"cannot read {what} {text!r} as a number",
                hint=f"write {what} as e.g. 7e9, 7B, 1.5T or 300k",
            )
        try:
            value = float(m.group(1).replace(",", "").replace("_", "")) * _SUFFIXES[m.group(2).lower()]
        except ValueError as exc:
            raise InputError(f"cannot read {what} {text!r} as a number",
                             hint=f"write {what} as e.g. 7e9, 7B, 1.5T or 300k") from exc
    return check_finite(value, what, minimum=0.0, strict=not allow_zero)


def parse_duration_hours(text: str | float | int, what: str = "duration") -> float:
    """Parse ``48h``, ``2d``, ``90m``, ``1d12h``, ``1.5w``, ``500ms``, ``48 hours`` or a bare number of hours."""
    if isinstance(text, (int, float)):
        return check_finite(float(text), what, strict=True)
    s = text.strip().lower()
    try:
        return check_finite(float(s), what, strict=True)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if s[pos:m.start()].strip():
            break
        unit = m.group(2)
        if unit not in _DURATION_UNITS_H:
            break
        total += float(m.group(1)) * _DURATION_UNITS_H[unit]
        pos = m.end()
    else:
        if pos and not s[pos:].strip():
            return check_finite(total, what, strict=True)
    raise InputError(f"cannot read {what} {text!r}", hint="write it as e.g. 48h, 2d, 90m, 30s, 500ms, 1d12h or 1w")


def parse_money_usd(text: str | float | int, what: str = "amount") -> float:
    """Parse ``2000``, ``$2,000``, ``2k`` into US dollars."""
    if isinstance(text, str):
        text = text.strip().removeprefix("$").removesuffix("USD").strip()
    try:
        return parse_count(text, what)
    except InputError as exc:  # the count hint ("7B parameters") reads oddly for money
        raise InputError(exc.message, hint=f"write {what} in US dollars, e.g. 2000, $2,000 or 2k") from None


def parse_fraction(text: str | float, what: str = "fraction") -> float:
    """Parse ``0.6`` or ``60%`` into a fraction in [0, 1]."""
    try:
        if isinstance(text, str) and text.strip().endswith("%"):
            value = parse_count(text.strip()[:-1], what) / 100
        else:
            value = parse_count(text, what)
        return check_finite(value, what, minimum=0.0, maximum=1.0)
    except InputError as exc:  # the count hint ("7B parameters") reads oddly for a fraction
        raise InputError(exc.message, hint=f"write {what} as a fraction from 0 to 1 or a percentage, e.g. 0.6 or 60%") \
            from None
