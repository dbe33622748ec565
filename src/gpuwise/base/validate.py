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


def _as_float(value: Any, where: str, hint: str, *, text_ok: bool) -> float:
    if isinstance(value, bool):
        raise DataFileError(f"{where}: {value!r} is not a number", hint=hint)
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer with hundreds of digits
            raise DataFileError(f"{where}: the number is too large", hint=hint) from None
    if text_ok and isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    shown = value if not isinstance(value, str) or len(value) < 40 else value[:37] + "..."
    raise DataFileError(f"{where}: {shown!r} is not a number", hint=hint)


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
    """
    out = _as_float(value, where, hint, text_ok=text_ok)
    if not math.isfinite(out):
        raise DataFileError(f"{where}: {value!r} is not a finite number", hint=hint)
    if minimum is not None and (out < minimum or (positive and out == minimum)):
        bound = f"> {minimum:g}" if positive else f"≥ {minimum:g}"
        raise DataFileError(f"{where}: expected a number {bound}, got {value!r}", hint=hint)
    if maximum is not None and out > maximum:
        raise DataFileError(f"{where}: expected a number ≤ {maximum:g}, got {value!r}", hint=hint)
    return out


def whole_number(value: Any, where: str, *, minimum: int = 0, hint: str = _FIX) -> int:
    """An integer ≥ ``minimum`` (a float with a fractional part, or a bool, is refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DataFileError(
            f"{where}: expected a whole number ≥ {minimum}, got {value!r}", hint=hint
        )
    return value


def ratio(value: Any, where: str, *, top: float = 1.0, hint: str = _FIX) -> float:
    """A number in [0, ``top``] (``top`` = 100 for percentages)."""
    return finite_number(value, where, minimum=0.0, maximum=top, hint=hint)
