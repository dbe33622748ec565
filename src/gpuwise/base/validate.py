"""Checks for numbers read from data files (YAML, JSON, CSV cells), shared by every capability.

Each returns the value as a plain ``float``/``int`` or raises
:class:`~gpuwise.errors.DataFileError` naming where the value was (``where``: file and field)
and how to fix it. Booleans are refused as numbers (YAML's ``yes`` is not 1). Numbers typed on
the command line go through :mod:`gpuwise.units` instead, whose errors name the flag.
"""

from __future__ import annotations

import math
from typing import Any

from gpuwise.errors import DataFileError

_FIX = "fix that value in the file"


def _bounds(minimum: float | None, positive: bool, maximum: float | None) -> str:
    low = "" if minimum is None else (f"> {minimum:g}" if positive else f"≥ {minimum:g}")
    if maximum is None:
        return low
    return f"from {minimum:g} to {maximum:g}" if minimum is not None else f"≤ {maximum:g}"


def finite_number(
    value: Any,
    where: str,
    *,
    minimum: float | None = 0.0,
    positive: bool = False,
    maximum: float | None = None,
    text_ok: bool = False,
    hint: str = _FIX,
) -> float:
    """A finite number within bounds (``positive``: > ``minimum``; else ≥ ``minimum``).

    ``text_ok``: accept a numeric string (CSV cells); otherwise only JSON/YAML numbers.
    The message always reads ``<where>: expected a finite number <bounds>, got <value>``.
    """
    want = f"{where}: expected a finite number {_bounds(minimum, positive, maximum)}".rstrip()
    out = _as_float(value, text_ok=text_ok)
    if out is None or not math.isfinite(out):
        shown = value if not isinstance(value, str) or len(value) < 40 else value[:37] + "..."
        got = "a number too large to read" if out is None and _huge(value) else repr(shown)
        raise DataFileError(f"{want}, got {got}", hint=hint)
    low_ok = minimum is None or out > minimum or (out == minimum and not positive)
    if not low_ok or (maximum is not None and out > maximum):
        raise DataFileError(f"{want}, got {value!r}", hint=hint)
    return out


def _huge(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_float(value: Any, *, text_ok: bool) -> float | None:
    """The value as a float, or None when it is not a number (bools are not numbers)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer with hundreds of digits
            return None
    if text_ok and isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def whole_number(value: Any, where: str, *, minimum: int = 0, hint: str = _FIX) -> int:
    """An integer ≥ ``minimum`` (a float with a fractional part, or a bool, is refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DataFileError(
            f"{where}: expected a whole number ≥ {minimum}, got {value!r}", hint=hint
        )
    return value


def ratio(value: Any, where: str, *, top: float = 1.0, hint: str = _FIX) -> float:
    """A number from 0 to ``top`` (``top`` = 100 for percentages)."""
    return finite_number(value, where, minimum=0.0, maximum=top, hint=hint)
