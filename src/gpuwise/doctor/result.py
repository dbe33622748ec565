"""What one doctor check returns: a status, what it found and the exact fix.

The checks themselves live in ``checks_*.py``; this module holds only the value types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuwise.errors import InputError

Status = Literal["ok", "warn", "fail", "skip"]
STATUSES: tuple[Status, ...] = ("ok", "warn", "fail", "skip")


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one environment check."""

    name: str
    """Stable check name, e.g. ``cuda-compat``; ``gpuwise doctor --only NAME`` selects by it."""
    status: Status
    """``ok`` nothing to do; ``warn`` works but is slow or fragile; ``fail`` will break a run;
    ``skip`` could not be checked here (the finding says why)."""
    finding: str
    """What was found, with the values read (versions, sizes, names)."""
    fix: str
    """The exact fix (a command or setting); empty when the status is ``ok``."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise InputError(
                f"check {self.name!r}: unknown status {self.status!r}",
                hint=f"use one of {', '.join(STATUSES)}",
            )


def ok(name: str, finding: str, fix: str = "") -> CheckResult:
    return CheckResult(name, "ok", finding, fix)


def warn(name: str, finding: str, fix: str) -> CheckResult:
    return CheckResult(name, "warn", finding, fix)


def fail(name: str, finding: str, fix: str) -> CheckResult:
    return CheckResult(name, "fail", finding, fix)


def skip(name: str, finding: str, fix: str = "") -> CheckResult:
    return CheckResult(name, "skip", finding, fix)


def worst(results: tuple[CheckResult, ...] | list[CheckResult]) -> Status:
    """The most serious status among ``results`` (fail > warn > ok > skip)."""
    order = {"fail": 3, "warn": 2, "ok": 1, "skip": 0}
    return max((r.status for r in results), key=lambda s: order[s], default="ok")
