"""Units and the parsers for numbers people type.

Names carry their unit everywhere in gpuwise (``memory_gib``, ``price_usd_per_hour``,
``peak_bf16_tflops``); this module holds the conversion constants and the parsers that turn
``7B``, ``1.5T``, ``48h`` or ``$2,000`` into plain floats (a duration always carries its unit), rejecting NaN, infinities and
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

_S_PER_MIN, _S_PER_H, _S_PER_D = 60.0, 3600.0, 86400.0
_NOT_FINITE = {"nan", "inf", "infinity"}
_DURATION_UNITS_S = {
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": _S_PER_MIN,
    "min": _S_PER_MIN,
    "mins": _S_PER_MIN,
    "minute": _S_PER_MIN,
    "minutes": _S_PER_MIN,
    "h": _S_PER_H,
    "hr": _S_PER_H,
    "hrs": _S_PER_H,
    "hour": _S_PER_H,
    "hours": _S_PER_H,
    "d": _S_PER_D,
    "day": _S_PER_D,
    "days": _S_PER_D,
    "w": 7 * _S_PER_D,
    "wk": 7 * _S_PER_D,
    "week": 7 * _S_PER_D,
    "weeks": 7 * _S_PER_D,
    "y": HOURS_PER_YEAR * _S_PER_H,
    "yr": HOURS_PER_YEAR * _S_PER_H,
    "year": HOURS_PER_YEAR * _S_PER_H,
    "years": HOURS_PER_YEAR * _S_PER_H,
}
_DURATION_HINT = "write it with a unit, e.g. 30s, 10m, 2h, 2d, 500ms, 1d12h or 1w"
# How to write each kind of value: a parser's hint must fit the flag's kind (a bandwidth is not
# "7B", a duration is not "a plain number"). ``{what}`` is the flag.
COUNT_HINT = "write {what} as e.g. 7e9, 7B, 1.5T or 300k"
SIZE_GIB_HINT = "write {what} in GiB as a plain number, e.g. 40 or 140.5"
BANDWIDTH_GB_S_HINT = "write {what} in GB/s (gigabytes per second) as a plain number, e.g. 1 or 2.5"
NUMBER_HINT = "write {what} as a plain number, e.g. 3 or 1.5"
GPU_COUNT_HINT = "write {what} as a number of GPUs, e.g. 16 (or GPU=16, e.g. H100=16)"
# A number, then its unit: ``2h``, ``1.5d``, ``.5h``, ``1e3s`` (no sign: a negative is refused first).
_DURATION = re.compile(r"(\d+(?:\.\d*)?(?:e[+-]?\d+)?|\.\d+(?:e[+-]?\d+)?)\s*([a-z]+)", re.I)
# Longer than any job, lease or retention gpuwise plans for: a typo such as 1e30h, not a duration
# (the arithmetic on it would overflow or lose every second). Not a measured figure.
_MAX_DURATION_S = 1000 * HOURS_PER_YEAR * _S_PER_H


def check_finite(
    value: float,
    what: str,
    *,
    minimum: float | None = 0.0,
    strict: bool = False,
    maximum: float | None = None,
    hint: str | None = None,
) -> float:
    """Return ``value`` as a float if it is finite and within bounds, else raise InputError.

    ``hint`` says how to write a finite value of this kind (default: "a plain number").
    """
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        raise InputError(
            f"{what} must be a finite number, got {value!r}",
            hint=hint or f"give {what} as a plain number",
        )
    if minimum is not None and (v < minimum or (strict and v == minimum)):
        cmp = ">" if strict else "≥"
        raise InputError(
            f"{what} must be {cmp} {minimum:g}, got {v:g}", hint=f"give a {what} {cmp} {minimum:g}"
        )
    if maximum is not None and v > maximum:
        raise InputError(
            f"{what} must be ≤ {maximum:g}, got {v:g}", hint=f"give a {what} ≤ {maximum:g}"
        )
    return v


def parse_count(
    text: str | float | int,
    what: str = "value",
    *,
    allow_zero: bool = True,
    hint: str = COUNT_HINT,
) -> float:
    """Parse ``7e9``, ``7B``, ``1.5T``, ``300k``, ``2,000`` into a non-negative float.

    ``B``/``G`` both mean 1e9 (billions), as in "7B parameters"; ``M`` is millions. ``hint``
    (formatted with ``what``) says how to write the value; use :data:`SIZE_GIB_HINT` or
    :data:`BANDWIDTH_GB_S_HINT` (or :func:`parse_size_gib`, :func:`parse_bandwidth_gb_s`) for
    values that are not counts.
    """
    how = hint.format(what=what)
    if isinstance(text, (int, float)):
        value = float(text)
    elif text.strip().lower().lstrip("+-") in _NOT_FINITE:  # not "cannot read": say what is wrong
        raise InputError(
            f"{what} must be a finite number, got {text.strip()!r}",
            hint=how,
        )
    else:
        m = _NUMBER.match(text)
        if not m:
            raise InputError(f"cannot read {what} {text!r} as a number", hint=how)
        try:
            value = (
                float(m.group(1).replace(",", "").replace("_", "")) * _SUFFIXES[m.group(2).lower()]
            )
        except ValueError as exc:
            raise InputError(f"cannot read {what} {text!r} as a number", hint=how) from exc
    return check_finite(value, what, minimum=0.0, strict=not allow_zero, hint=how)


def parse_size_gib(
    text: str | float | int, what: str = "size", *, allow_zero: bool = True
) -> float:
    """A size in GiB people type (``40``, ``140.5``); the hint speaks of GiB, not of "7B"."""
    return parse_count(text, what, allow_zero=allow_zero, hint=SIZE_GIB_HINT)


def parse_bandwidth_gb_s(
    text: str | float | int, what: str = "bandwidth", *, allow_zero: bool = False
) -> float:
    """A bandwidth in GB/s people type (``1``, ``2.5``); the hint speaks of GB/s."""
    return parse_count(text, what, allow_zero=allow_zero, hint=BANDWIDTH_GB_S_HINT)


def parse_duration_seconds(
    text: str | float | int, what: str = "duration", *, allow_zero: bool = False
) -> float:
    """Parse a duration people type into seconds: ``30s``, ``10m``, ``2h``, ``1d12h``, ``500ms``, ``48 hours``.

    The one rule for every duration in gpuwise: **text needs a unit**. A bare ``"2"`` is an
    InputError (it used to mean 2 hours in one command and 2 seconds in another). A Python
    ``int``/``float`` is taken as seconds, as this function's name says. Zero is refused unless
    ``allow_zero`` (a restart delay may be 0s; an interval may not).
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return check_finite(float(text), what, strict=not allow_zero, hint=_DURATION_HINT)
    if not isinstance(text, str):
        raise InputError(f"cannot read {what} {text!r} as a duration", hint=_DURATION_HINT)
    s = text.strip().lower()
    try:
        bare = float(s)
    except ValueError:
        pass
    else:  # a number without a unit: say which unit is missing (NaN/inf get the finite-number message)
        check_finite(bare, what, minimum=None, hint=_DURATION_HINT)
        raise InputError(f"{what} {text.strip()!r} has no unit", hint=_DURATION_HINT)
    if s.startswith("-") and _DURATION.match(
        s[1:].strip()
    ):  # "-1h" is readable, and wrong: say so, not "write it with a unit"
        cmp = "≥ 0" if allow_zero else "positive"
        raise InputError(
            f"{what} must be {cmp}, got {text.strip()!r}",
            hint=f"give a {'' if allow_zero else 'positive '}duration with a unit, e.g. 10m or 2h",
        )
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if s[pos : m.start()].strip():
            break
        unit = m.group(2)
        if unit not in _DURATION_UNITS_S:
            break
        total += float(m.group(1)) * _DURATION_UNITS_S[unit]
        pos = m.end()
    else:
        if pos and not s[pos:].strip():
            seconds = check_finite(total, what, strict=not allow_zero, hint=_DURATION_HINT)
            if seconds > _MAX_DURATION_S:
                raise InputError(
                    f"{what} {text.strip()!r} is longer than 1000 years",
                    hint="check the number: write e.g. 48h, 30d or 1y",
                )
            return seconds
    raise InputError(f"cannot read {what} {text!r}", hint=_DURATION_HINT)


def parse_duration_hours(
    text: str | float | int, what: str = "duration", *, allow_zero: bool = False
) -> float:
    """:func:`parse_duration_seconds` in hours (``"90m"`` → 1.5); a Python number is taken as hours."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return check_finite(float(text), what, strict=not allow_zero, hint=_DURATION_HINT)
    return parse_duration_seconds(text, what, allow_zero=allow_zero) / _S_PER_H


def parse_money_usd(text: str | float | int, what: str = "amount") -> float:
    """Parse ``2000``, ``$2,000``, ``2k`` into US dollars."""
    if isinstance(text, str):
        text = text.strip().removeprefix("$").removesuffix("USD").strip()
    try:
        return parse_count(text, what)
    except InputError as exc:  # the count hint ("7B parameters") reads oddly for money
        raise InputError(
            exc.message, hint=f"write {what} in US dollars, e.g. 2000, $2,000 or 2k"
        ) from None


def parse_fraction(text: str | float, what: str = "fraction") -> float:
    """Parse ``0.6`` or ``60%`` into a fraction in [0, 1]."""
    try:
        if isinstance(text, str) and text.strip().endswith("%"):
            value = parse_count(text.strip()[:-1], what) / 100
        else:
            value = parse_count(text, what)
        return check_finite(value, what, minimum=0.0, maximum=1.0)
    except InputError as exc:  # the count hint ("7B parameters") reads oddly for a fraction
        raise InputError(
            exc.message,
            hint=f"write {what} as a fraction from 0 to 1 or a percentage, e.g. 0.6 or 60%",
        ) from None
