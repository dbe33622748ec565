"""Every failure a user can cause or fix, as one tree of exceptions.

::

    GpuwiseError                 a problem the user can fix: exit code 2 in the CLI
     ├── InputError              a flag, a number, a duration, a name that does not parse or resolve
     ├── DataFileError           a catalog/hardware/demand/config file that is malformed (names file, row, column)
     │    └── CatalogError       an offers catalog problem (missing source, bad row, refused update)
     ├── HardwareError           a GPU model that is unknown, or lacks the figure asked for
     ├── EstimateError           a workload that cannot be estimated as given
     ├── PlanError               a plan that cannot be made (no offers at all, impossible constraints)
     ├── CheckpointError         a checkpoint that cannot be written, found or trusted
     ├── StorageError            object storage or disk refused an operation
     ├── DeviceError             NVML / driver / torch missing or failing
     └── MissingExtraError       an optional dependency is not installed (names the pip extra)
          └── MissingExtraAttributeError  ... for a lazily exported name (also an AttributeError)

Anything else that escapes is a bug: exit code 1 and a request to report it.

Messages follow one shape: the problem, then "To fix: ...", then "did you mean ...?" when a
name was close to a known one. Build them with :func:`did_you_mean`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class GpuwiseError(Exception):
    """A problem the user can fix. ``hint`` says how."""

    def __init__(self, message: str, hint: str = "", suggestions: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.suggestions = tuple(suggestions)

    def __str__(self) -> str:
        return self.one_line()

    def one_line(self) -> str:
        """The message, the fix and the suggestions on one line (no ``error:`` prefix)."""
        text = self.message
        if self.hint:
            text += f" — To fix: {self.hint}"
        if self.suggestions:
            text += f" (did you mean {', '.join(repr(s) for s in self.suggestions)}?)"
        return text


class InputError(GpuwiseError):
    """A flag value, number, duration or name that does not parse or resolve."""


class DataFileError(GpuwiseError):
    """A data file (CSV, YAML, JSON) that is malformed; the message names file, row and column."""


class CatalogError(DataFileError):
    """An offers catalog that cannot be read, updated or queried as asked."""


class HardwareError(GpuwiseError):
    """A GPU model that is unknown, or that lacks a figure the caller needs."""


class EstimateError(GpuwiseError):
    """A workload that cannot be estimated as given."""


class PlanError(GpuwiseError):
    """A plan that cannot be made."""


class CheckpointError(GpuwiseError):
    """A checkpoint that cannot be written, found or trusted."""


class StorageError(GpuwiseError):
    """Disk or object storage refused an operation."""


class DeviceError(GpuwiseError):
    """NVML, the driver or torch is missing or failing."""


class MissingExtraError(GpuwiseError):
    """An optional dependency is not installed."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"this needs the optional dependency {module!r}, which is not installed",
            hint=f"pip install 'gpuwise[{extra}]'",
        )


class MissingExtraAttributeError(MissingExtraError, AttributeError):
    """``gpuwise.Checkpointer`` without torch: the missing extra, raised as an attribute lookup.

    Also an :class:`AttributeError`, because that is what ``help(gpuwise)``, ``inspect`` and
    ``hasattr`` expect from a module attribute that is not there: they skip the name instead of
    failing, and everything else in the package stays documented.
    """

    def __init__(self, qualname: str, cause: MissingExtraError) -> None:
        GpuwiseError.__init__(self, f"{qualname}: {cause.message}", hint=cause.hint)
        self.name = qualname.rpartition(".")[2]


def parse_error_text(exc: BaseException) -> str:
    """A one-line description of a JSON/YAML/decoding error: ``line 3, column 1: expected ','``.

    PyYAML's messages span several lines and quote the source; error lines must stay one line.
    """
    mark = getattr(exc, "problem_mark", None)  # yaml.MarkedYAMLError
    problem = getattr(exc, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start})"
    return " ".join(str(exc).split())


def check_choice(value: str, choices: Iterable[str], what: str) -> str:
    """``value`` when it is one of ``choices``; else InputError ``unknown <what> 'value'`` listing them."""
    known = tuple(choices)
    if value not in known:
        raise InputError(
            f"unknown {what} {value!r}",
            hint=f"use one of {', '.join(known)}",
            suggestions=did_you_mean(value, known),
        )
    return value


def did_you_mean(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` names from ``known`` close to ``name`` (case-insensitive)."""
    by_lower: dict[str, str] = {}
    for k in known:
        by_lower.setdefault(k.lower(), k)
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[c] for c in close]
