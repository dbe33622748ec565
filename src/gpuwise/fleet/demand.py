"""Hourly GPU demand: the :class:`Demand` record, its CSV reader/writer and a synthetic year.

The CSV has one row per (hour, GPU model, workload class)::

    timestamp,gpu,gpus,interruptible
    2026-01-01T00:00:00,H100,12,false
    2026-01-01T00:00:00,H100,30,true

``interruptible=false`` rows are firm work (it must never run on spot); ``true`` rows may run on
spot. Every (GPU, class) series that appears must cover every hour from the first timestamp in the
file to the last one: a missing hour is an error, not a zero, because a hole in an export is far
more often a bug than an idle hour (write a ``0`` row for an idle hour). Pure Python + numpy.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuwise.base.datafiles import refuse_bidi_controls
from gpuwise.errors import DataFileError, InputError, did_you_mean
from gpuwise.units import check_finite

COLUMNS = ("timestamp", "gpu", "gpus", "interruptible")
MAX_GPUS_PER_HOUR = 1e7
"""More GPUs than this in one hour is taken for a unit mistake (the largest clusters are ~1e5)."""
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}
_HOUR = dt.timedelta(hours=1)


@dataclass(frozen=True, eq=False)
class Demand:
    """GPUs wanted per hour, per GPU model, split into firm and interruptible work."""

    start: dt.datetime
    """The first hour (naive UTC)."""
    gpus: tuple[str, ...]
    """GPU models (canonical names), one per row of the arrays."""
    firm: np.ndarray
    """GPUs of non-interruptible work, shape (len(gpus), hours); never runs on spot."""
    interruptible: np.ndarray
    """GPUs of interruptible work, shape (len(gpus), hours); may run on spot."""
    origin: str = "demand"
    """Where it came from (a file name or ``synthetic profile (seed N)``)."""

    def __post_init__(self) -> None:
        if self.firm.shape != self.interruptible.shape or self.firm.shape[0] != len(self.gpus):
            raise InputError(
                "demand arrays do not match the GPU list",
                hint="give firm and interruptible arrays of shape (GPUs, hours)",
            )
        if self.firm.shape[1] == 0:
            raise InputError(f"{self.origin}: no hours of demand", hint="give at least one hour")
        for arr in (self.firm, self.interruptible):
            if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > MAX_GPUS_PER_HOUR):
                raise InputError(
                    f"{self.origin}: demand must be finite, ≥ 0 and ≤ {MAX_GPUS_PER_HOUR:g} GPUs",
                    hint="fix the negative or non-finite values",
                )

    @property
    def hours(self) -> int:
        return int(self.firm.shape[1])

    @property
    def total(self) -> np.ndarray:
        """Firm + interruptible GPUs per hour, shape (GPUs, hours)."""
        return np.asarray(self.firm + self.interruptible, dtype=float)

    def timestamps(self) -> list[dt.datetime]:
        return [self.start + i * _HOUR for i in range(self.hours)]

    def month_index(self) -> tuple[list[str], np.ndarray]:
        """Calendar months (``YYYY-MM``) and, per hour, the index of its month."""
        labels: list[str] = []
        index = np.empty(self.hours, dtype=np.int64)
        for i, ts in enumerate(self.timestamps()):
            label = f"{ts.year:04d}-{ts.month:02d}"
            if not labels or labels[-1] != label:
                labels.append(label)
            index[i] = len(labels) - 1
        return labels, index

    def scaled(self, factor: float) -> Demand:
        """The same profile with every hour multiplied by ``factor`` (for sensitivity)."""
        return Demand(
            self.start,
            self.gpus,
            self.firm * factor,
            self.interruptible * factor,
            f"{self.origin} ×{factor:g}",
        )


def _parse_timestamp(raw: str, where: str) -> dt.datetime:
    text = raw.strip()
    try:
        ts = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise DataFileError(
            f"{where}, column timestamp: {raw!r} is not an ISO time",
            hint="write e.g. 2026-01-01T13:00:00 or 2026-01-01T13:00:00Z",
        ) from None
    if ts.tzinfo is not None:
        ts = ts.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if ts.minute or ts.second or ts.microsecond:
        raise DataFileError(
            f"{where}, column timestamp: {raw!r} is not on the hour",
            hint="give one row per whole hour (minutes and seconds = 0)",
        )
    return ts


def _parse_gpus(raw: str, where: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise DataFileError(
            f"{where}, column gpus: {raw!r} is not a number",
            hint="write the GPUs wanted that hour as a plain number",
        ) from None
    if not math.isfinite(value) or value < 0:
        raise DataFileError(
            f"{where}, column gpus: {raw!r} must be a finite number ≥ 0",
            hint="demand cannot be negative; write 0 for an idle hour",
        )
    if value > MAX_GPUS_PER_HOUR:
        raise DataFileError(
            f"{where}, column gpus: {raw!r} GPUs in one hour is implausible",
            hint=f"give GPUs wanted that hour (at most {MAX_GPUS_PER_HOUR:,.0f}); is it GPU-seconds?",
        )
    return value


def _parse_bool(raw: str, where: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise DataFileError(
        f"{where}, column interruptible: {raw!r} is not true/false",
        hint="write true (may run on spot) or false (must not)",
    )


def _resolve_gpu(raw: str, where: str, cache: dict[str, str]) -> str:
    name = raw.strip()
    if name in cache:
        return cache[name]
    from gpuwise.hardware import gpu_table

    table = gpu_table()
    spec = table.get(name)
    if spec is None:
        raise DataFileError(
            f"{where}, column gpu: unknown GPU {name!r}",
            hint="use a model from `gpuwise gpus`",
            suggestions=did_you_mean(name, table.names),
        )
    cache[name] = spec.name
    return spec.name


def parse_demand_csv(text: str, origin: str) -> Demand:
    """Read demand CSV text; every problem names ``origin``, the row and the column."""
    # Excel's "CSV UTF-8" starts with a byte-order mark, which would glue onto the first column's name
    text = text.removeprefix("\ufeff")
    refuse_bidi_controls(text, origin)
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise DataFileError(
            f"{origin}: missing column(s) {', '.join(missing)}",
            hint=f"the header must be {','.join(COLUMNS)}",
        )
    cache: dict[str, str] = {}
    cells: dict[tuple[str, bool], dict[dt.datetime, float]] = {}
    rows_of: dict[tuple[str, bool, dt.datetime], int] = {}
    first: dt.datetime | None = None
    last: dt.datetime | None = None
    for lineno, row in enumerate(reader, start=2):
        where = f"{origin}, row {lineno}"
        if None in row:
            raise DataFileError(
                f"{where}: more cells than columns", hint=f"use the columns {','.join(COLUMNS)}"
            )
        for col in COLUMNS:
            if not (row.get(col) or "").strip():
                raise DataFileError(
                    f"{where}, column {col}: empty", hint=f"give {col} on every row"
                )
        ts = _parse_timestamp(row["timestamp"], where)
        gpu = _resolve_gpu(row["gpu"], where, cache)
        flexible = _parse_bool(row["interruptible"], where)
        key = (gpu, flexible, ts)
        if key in rows_of:
            raise DataFileError(
                f"{where}: duplicate hour {ts.isoformat()} for {gpu} "
                f"interruptible={str(flexible).lower()} (first at row {rows_of[key]})",
                hint="keep one row per hour, GPU and class (sum them first)",
            )
        rows_of[key] = lineno
        cells.setdefault((gpu, flexible), {})[ts] = _parse_gpus(row["gpus"], where)
        first = ts if first is None or ts < first else first
        last = ts if last is None or ts > last else last
    if first is None or last is None:
        raise DataFileError(f"{origin}: no rows", hint="the file has a header but no demand")
    hours = int((last - first) / _HOUR) + 1
    gpus = tuple(sorted({g for g, _ in cells}))
    firm = np.zeros((len(gpus), hours))
    flex = np.zeros((len(gpus), hours))
    for (gpu, flexible), series in cells.items():
        if len(series) != hours:
            gap = _first_gap(series, first, hours)
            before = rows_of.get((gpu, flexible, gap - _HOUR))
            raise DataFileError(
                f"{origin}: gap: no row for {gpu} interruptible={str(flexible).lower()} at "
                f"{gap.isoformat()}"
                + (f" (after row {before})" if before else "")
                + f"; the file spans {first.isoformat()} to {last.isoformat()}",
                hint="give every hour in the span, writing 0 for idle hours",
            )
        arr = flex if flexible else firm
        idx = np.fromiter((int((ts - first) / _HOUR) for ts in series), dtype=np.int64, count=hours)
        arr[gpus.index(gpu), idx] = np.fromiter(series.values(), dtype=float, count=hours)
    return Demand(first, gpus, firm, flex, origin)


def _first_gap(series: dict[dt.datetime, float], first: dt.datetime, hours: int) -> dt.datetime:
    for i in range(hours):
        ts = first + i * _HOUR
        if ts not in series:
            return ts
    return first  # not reached: called only when an hour is missing


def read_demand_csv(path: Path) -> Demand:
    """Read a demand CSV file (see the module docstring for the columns)."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise InputError(
            f"demand file {str(path)!r} not found",
            hint="give the path of a demand CSV, or use --profile for a synthetic year",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFileError(f"{path}: cannot read ({exc})", hint="give a UTF-8 CSV file") from None
    return parse_demand_csv(text, str(path))


def demand_to_csv(demand: Demand) -> str:
    """The CSV form of ``demand`` (round-trips through :func:`parse_demand_csv`)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS)
    stamps = [ts.isoformat() for ts in demand.timestamps()]
    for g, gpu in enumerate(demand.gpus):
        for flexible, arr in ((False, demand.firm), (True, demand.interruptible)):
            for h, ts in enumerate(stamps):
                w.writerow([ts, gpu, f"{arr[g, h]:g}", str(flexible).lower()])
    return out.getvalue()


def synthetic_demand(
    gpus: Sequence[str] = ("H100", "A100-80GB"),
    *,
    hours: int = 8760,
    seed: int = 0,
    peak_gpus: float = 64.0,
    start: dt.datetime = dt.datetime(2026, 1, 1),
) -> Demand:
    """A realistic-looking year of hourly demand, the same for the same arguments.

    Per GPU model: a firm base load (serving, scheduled pipelines) with a mild daily cycle, an
    interruptible part (training and experiments) that follows working hours and weekdays, and
    project bursts of 2–14 days that add a large block of interruptible work. All whole GPUs.
    The shape is illustrative, not fitted to any trace.
    """
    if not 1 <= hours <= 10 * 8760:
        raise InputError(
            f"the synthetic profile needs 1 to 87,600 hours (10 years), got {hours}",
            hint="give hours=1 to 87600",
        )
    check_finite(peak_gpus, "profile peak (GPUs)", strict=True, maximum=MAX_GPUS_PER_HOUR / 4)
    if (
        isinstance(seed, bool) or not isinstance(seed, int) or seed < 0
    ):  # numpy refuses negative seeds
        raise InputError(
            f"the profile seed must be a whole number ≥ 0, got {seed!r}", hint="give seed=0 or more"
        )
    from gpuwise.hardware import find_gpu

    names = tuple(find_gpu(g).name for g in gpus)
    if len(set(names)) != len(names):
        raise InputError("a GPU model appears twice in the profile", hint="list each GPU once")
    rng = np.random.default_rng(seed)
    t = np.arange(hours)
    ts0 = start.hour + 24 * start.weekday()
    hour_of_day = (t + ts0) % 24
    weekday = ((t + ts0) // 24) % 7
    working = ((hour_of_day >= 8) & (hour_of_day < 20) & (weekday < 5)).astype(float)
    daily = 0.5 - 0.5 * np.cos(2 * np.pi * (hour_of_day - 3) / 24)  # low at 03:00, high at 15:00
    firm = np.zeros((len(names), hours))
    flex = np.zeros((len(names), hours))
    for g in range(len(names)):
        scale = peak_gpus / (1 + g)
        base = scale * (0.25 + 0.1 * daily)
        experiments = scale * (0.05 + 0.2 * working + 0.05 * daily)
        bursts = np.zeros(hours)
        n_bursts = max(1, hours // (24 * 30))
        for _ in range(n_bursts):
            begin = int(rng.integers(0, hours))
            length = int(rng.integers(48, 14 * 24))
            bursts[begin : begin + length] += scale * rng.uniform(0.2, 0.5)
        noise = rng.normal(0, 0.03 * scale, size=(2, hours))
        firm[g] = np.maximum(np.rint(base + noise[0]), 0)
        flex[g] = np.maximum(np.rint(experiments + bursts + noise[1]), 0)
    return Demand(start, names, firm, flex, f"synthetic profile (seed {seed})")
