"""Weighted multi-criteria vendor scoring, with the normalization spelled out and a sensitivity check.

Five dimensions by default, each a weighted group of metrics (the evaluation framework of the
issue: performance 30%, cost 25%, network 20%, support 15%, ecosystem 10%). Every metric is
min–max normalized across the vendors, so the best vendor on a metric gets 1 and the worst 0:

* higher is better: ``(x − min) / (max − min)``
* lower is better:  ``(max − x) / (max − min)``
* all vendors equal: every vendor gets 1 (the metric does not separate them).

A vendor's score is Σ_dimension W_d · Σ_metric w_{d,m} · normalized_{m}. The scores are relative
to the vendors compared: adding a vendor can change the others' normalized values.

**Weights must sum to 1** (dimension weights, and the metric weights within each dimension),
within 1e-6. A file whose weights do not is rejected with exit 2, because silently rescaling a
typo (0.3 written as 3) changes the ranking; pass ``normalize_weights=True``
(``--normalize-weights``) to rescale them explicitly, which adds a note saying so.

Performance and cost metrics are filled in when a vendor does not give them: ``fp16_tflops`` and
``memory_bandwidth_tb_s`` from the hardware table for the vendor's ``gpu``, ``usd_per_gpu_hour``
from the catalog's cheapest on-demand offer of that GPU on the vendor's ``cloud``, and
``monthly_discount`` from the 1-year reserved discount of that cloud (when known).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpuwise.base.validate import finite_number
from gpuwise.errors import DataFileError, GpuwiseError, InputError, parse_error_text

Direction = Literal["higher", "lower"]

DEFAULT_WEIGHTS: dict[str, float] = {
    "performance": 0.30,
    "cost": 0.25,
    "network": 0.20,
    "support": 0.15,
    "ecosystem": 0.10,
}
DEFAULT_CRITERIA: dict[str, dict[str, Direction]] = {
    "performance": {"fp16_tflops": "higher", "memory_bandwidth_tb_s": "higher"},
    "cost": {"usd_per_gpu_hour": "lower", "monthly_discount": "higher"},
    "network": {"inter_node_latency_us": "lower", "vpc_bandwidth_gbps": "higher"},
    "support": {"sla_percent": "higher", "ticket_response_hours": "lower"},
    "ecosystem": {"container_compatibility": "higher", "dataset_storage": "higher"},
}
AUTO_FILLED = ("fp16_tflops", "memory_bandwidth_tb_s", "usd_per_gpu_hour", "monthly_discount")
_TOL = 1e-6


@dataclass(frozen=True)
class Metric:
    """One measurable criterion inside a dimension."""

    dimension: str
    """Dimension it belongs to, e.g. ``performance``."""
    name: str
    """Metric name, e.g. ``fp16_tflops``."""
    weight: float
    """Weight within its dimension."""
    direction: Direction
    """Whether a higher or a lower value is better."""


@dataclass(frozen=True)
class Vendor:
    """A vendor and its raw metric values."""

    name: str
    """Display name."""
    cloud: str | None
    """Catalog cloud name, for auto-filled prices and discounts."""
    gpu: str | None
    """GPU model offered, for auto-filled performance and price."""
    values: dict[str, float]
    """Raw value per metric."""
    value_sources: dict[str, str]
    """Where each value came from: ``given``, ``hardware table``, ``catalog``, ``reserved terms``."""


@dataclass(frozen=True)
class Criteria:
    """What to score and how much each part weighs."""

    weights: dict[str, float]
    """Dimension → weight (sums to 1)."""
    metrics: tuple[Metric, ...]
    """Metrics, with weights summing to 1 within each dimension."""
    vendors: tuple[Vendor, ...]
    """Vendors compared."""
    notes: tuple[str, ...] = ()
    """Warnings raised while reading (e.g. weights rescaled)."""


@dataclass(frozen=True)
class Normalization:
    """How one metric was normalized."""

    metric: str
    """Metric name."""
    dimension: str
    """Its dimension."""
    direction: Direction
    """Higher or lower is better."""
    min_value: float
    """Smallest raw value."""
    max_value: float
    """Largest raw value."""
    formula: str
    """The formula applied, in words."""
    normalized: dict[str, float]
    """Vendor → normalized value in [0, 1]."""


@dataclass(frozen=True)
class VendorScore:
    """One vendor's place in the ranking."""

    rank: int
    """1 = best."""
    vendor: str
    """Vendor name."""
    score: float
    """Weighted score in [0, 1]."""
    by_dimension: dict[str, float]
    """Contribution of each dimension (W_d × its dimension score); they sum to ``score``."""
    by_metric: dict[str, float]
    """Contribution of each metric (W_d × w_m × normalized)."""


@dataclass(frozen=True)
class WeightSensitivity:
    """How far one dimension weight must move before the winner changes."""

    dimension: str
    """Dimension whose weight moves (the others are rescaled in proportion to keep the sum 1)."""
    weight: float
    """Its current weight."""
    switch_weight: float | None
    """The weight at which another vendor takes first place (None: never in [0, 1])."""
    change: float | None
    """switch_weight − weight."""
    new_winner: str | None
    """Who wins past that point."""


@dataclass(frozen=True)
class VendorRanking:
    """The result of scoring."""

    ranking: tuple[VendorScore, ...]
    """Best first."""
    normalization: tuple[Normalization, ...]
    """Per metric, how raw values became [0, 1]."""
    sensitivity: tuple[WeightSensitivity, ...]
    """Per dimension weight."""
    weights: dict[str, float]
    """Dimension weights used."""
    metrics: tuple[Metric, ...]
    """Metrics used."""
    vendors: tuple[Vendor, ...]
    """Vendors with their raw (given or filled) values."""
    notes: tuple[str, ...]
    """Warnings (rescaled weights, auto-filled values)."""


# ---------------------------------------------------------------- reading the file


def _finite(value: Any, where: str) -> float:
    return finite_number(value, where, minimum=None, hint="write a plain number")


def _check_sum(
    weights: Mapping[str, float], where: str, normalize: bool, notes: list[str]
) -> dict[str, float]:
    for k, w in weights.items():
        if w < 0:
            raise DataFileError(
                f"{where}.{k}: weight {w:g} is negative", hint="weights are fractions ≥ 0"
            )
    total = sum(weights.values())
    if total <= 0:
        raise DataFileError(
            f"{where}: the weights sum to 0", hint="give at least one positive weight"
        )
    if abs(total - 1) > _TOL:
        if not normalize:
            raise DataFileError(
                f"{where}: the weights sum to {total:g}, not 1",
                hint="make them sum to 1, or rescale them with normalize_weights=True",
            )
        notes.append(f"{where}: weights summed to {total:g}; rescaled to sum to 1")
        return {k: w / total for k, w in weights.items()}
    return dict(weights)


def parse_criteria(
    data: Any,
    origin: str,
    *,
    normalize_weights: bool = False,
    fill: Callable[[Vendor, str], tuple[float, str] | None] | None = None,
) -> Criteria:
    """Validate a vendors document (the YAML's content) into :class:`Criteria`.

    ``fill(vendor, metric)`` supplies a value and its source for metrics a vendor leaves out
    (see :func:`catalog_filler`); without it every value must be given.
    """
    if not isinstance(data, dict):
        raise DataFileError(
            f"{origin}: expected a mapping with `vendors` (and optional `weights`, `criteria`)",
            hint="see examples/vendors.yaml",
        )
    unknown = set(data) - {"weights", "criteria", "vendors"}
    if unknown:
        raise DataFileError(
            f"{origin}: unknown key(s) {', '.join(sorted(map(str, unknown)))}",
            hint="the keys are weights, criteria and vendors",
        )
    notes: list[str] = []
    raw_criteria = data.get("criteria")
    metrics: list[Metric] = []
    if raw_criteria is None:
        spec: dict[str, dict[str, Any]] = {
            d: {m: {"direction": dirn} for m, dirn in ms.items()}
            for d, ms in DEFAULT_CRITERIA.items()
        }
    elif isinstance(raw_criteria, dict) and raw_criteria:
        spec = raw_criteria
    else:
        raise DataFileError(
            f"{origin}: criteria must map dimension → metric → {{weight, direction}}",
            hint="see examples/vendors.yaml",
        )
    for dim, ms in spec.items():
        where = f"{origin}: criteria.{dim}"
        if not isinstance(ms, dict) or not ms:
            raise DataFileError(
                f"{where}: expected metric → {{weight, direction}}", hint="list at least one metric"
            )
        raw_w: dict[str, float] = {}
        dirs: dict[str, Direction] = {}
        for name, entry in ms.items():
            entry = entry if isinstance(entry, dict) else {"direction": entry}
            direction = str(entry.get("direction", "higher")).lower()
            if direction not in ("higher", "lower"):
                raise DataFileError(
                    f"{where}.{name}.direction: {direction!r}", hint="write higher or lower"
                )
            dirs[str(name)] = direction  # type: ignore[assignment]
            raw_w[str(name)] = _finite(entry.get("weight", 1 / len(ms)), f"{where}.{name}.weight")
        for name, w in _check_sum(raw_w, f"criteria.{dim}", normalize_weights, notes).items():
            metrics.append(Metric(str(dim), name, w, dirs[name]))
    dims = list(dict.fromkeys(m.dimension for m in metrics))
    raw_weights = data.get("weights")
    if raw_weights is None:
        if set(dims) != set(DEFAULT_WEIGHTS):
            raise DataFileError(
                f"{origin}: weights are needed for the dimensions {', '.join(dims)}",
                hint="add a `weights:` mapping with one weight per dimension",
            )
        weights = dict(DEFAULT_WEIGHTS)
    elif isinstance(raw_weights, dict):
        extra = set(map(str, raw_weights)) - set(dims)
        missing = set(dims) - set(map(str, raw_weights))
        if extra or missing:
            raise DataFileError(
                f"{origin}: weights do not match the criteria dimensions "
                f"(missing: {', '.join(sorted(missing)) or '-'}; unknown: {', '.join(sorted(extra)) or '-'})",
                hint=f"give one weight per dimension: {', '.join(dims)}",
            )
        weights = _check_sum(
            {str(k): _finite(v, f"{origin}: weights.{k}") for k, v in raw_weights.items()},
            "weights",
            normalize_weights,
            notes,
        )
    else:
        raise DataFileError(
            f"{origin}: weights must map dimension → weight", hint="e.g. performance: 0.3"
        )
    raw_vendors = data.get("vendors")
    if not isinstance(raw_vendors, list) or len(raw_vendors) < 2:
        raise DataFileError(
            f"{origin}: vendors must be a list of at least two vendors",
            hint="each with name, optional cloud/gpu, and values",
        )
    vendors = []
    seen: set[str] = set()
    for i, v in enumerate(raw_vendors):
        where = f"{origin}: vendors[{i}]"
        if not isinstance(v, dict) or not v.get("name"):
            raise DataFileError(f"{where}: needs a name", hint="write `- name: aws`")
        name = str(v["name"])
        if name in seen:
            raise DataFileError(f"{where}: duplicate vendor {name!r}", hint="give each vendor once")
        seen.add(name)
        values_raw = v.get("values") or {}
        if not isinstance(values_raw, dict):
            raise DataFileError(
                f"{where}.values: expected metric → number", hint="e.g. sla_percent: 99.9"
            )
        known = {m.name for m in metrics}
        for k in values_raw:
            if k not in known:
                from gpuwise.errors import did_you_mean

                raise DataFileError(
                    f"{where}.values.{k}: not a metric of the criteria",
                    hint=f"the metrics are {', '.join(sorted(known))}",
                    suggestions=did_you_mean(str(k), known),
                )
        values = {str(k): _finite(x, f"{where}.values.{k}") for k, x in values_raw.items()}
        sources = dict.fromkeys(values, "given")
        vendor = Vendor(
            name,
            str(v["cloud"]).lower() if v.get("cloud") else None,
            str(v["gpu"]) if v.get("gpu") else None,
            values,
            sources,
        )
        for m in metrics:
            if m.name in values:
                continue
            try:
                got = fill(vendor, m.name) if fill is not None else None
            except (
                GpuwiseError
            ) as exc:  # an unknown `gpu:` or `cloud:`; say which vendor of which file
                raise DataFileError(
                    f"{where} ({name}): {exc.message}", hint=exc.hint, suggestions=exc.suggestions
                ) from None
            if got is None:
                hint = f"give vendors[{i}].values.{m.name}"
                if m.name in AUTO_FILLED:
                    hint += " (or a gpu/cloud the hardware table, catalog or reserved.yaml knows)"
                raise DataFileError(
                    f"{where} ({name}): no value for {m.dimension}.{m.name}", hint=hint
                )
            values[m.name], sources[m.name] = got
        vendors.append(vendor)
    return Criteria(weights, tuple(metrics), tuple(vendors), tuple(notes))


def read_criteria(path: Path, **kwargs: Any) -> Criteria:
    """Read a vendors YAML file (see examples/vendors.yaml)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text("utf-8"))
    except FileNotFoundError:
        raise InputError(
            f"criteria file {str(path)!r} not found", hint="give the path of a vendors YAML"
        ) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise DataFileError(
            f"{path}: not valid YAML ({parse_error_text(exc)})", hint="fix the file"
        ) from None
    return parse_criteria(data, str(path), **kwargs)


def catalog_filler(
    offers: Sequence[Any], terms: Mapping[tuple[str, int], Any]
) -> Callable[[Vendor, str], tuple[float, str] | None]:
    """A ``fill`` for :func:`parse_criteria` backed by the hardware table, catalog and reserved terms."""
    from gpuwise.catalog.query import cheapest_per_gpu
    from gpuwise.errors import did_you_mean
    from gpuwise.hardware import find_gpu

    clouds = sorted({o.cloud for o in offers} | {cloud for cloud, _ in terms})

    def fill(vendor: Vendor, metric: str) -> tuple[float, str] | None:
        if (
            vendor.cloud is not None
            and vendor.cloud not in clouds
            and metric in ("usd_per_gpu_hour", "monthly_discount")
        ):
            raise InputError(
                f"unknown cloud {vendor.cloud!r}",
                hint=f"use one of: {', '.join(clouds)}, or give values.{metric} yourself",
                suggestions=did_you_mean(vendor.cloud, clouds),
            )
        if vendor.gpu is None:
            return None
        spec = find_gpu(vendor.gpu)
        if metric == "fp16_tflops" and spec.peak_fp16_tflops is not None:
            return spec.peak_fp16_tflops, f"hardware table ({spec.name} dense FP16)"
        if metric == "memory_bandwidth_tb_s" and spec.memory_bandwidth_tb_s is not None:
            return spec.memory_bandwidth_tb_s, f"hardware table ({spec.name})"
        if metric == "usd_per_gpu_hour" and vendor.cloud:
            cheapest = cheapest_per_gpu(
                [o for o in offers if o.cloud == vendor.cloud], spot=False
            ).get(spec.name)
            if cheapest is not None:
                return (
                    cheapest.usd_per_gpu_hour,
                    f"catalog (cheapest {vendor.cloud} {spec.name} on-demand)",
                )
        if metric == "monthly_discount" and vendor.cloud:
            term = terms.get((vendor.cloud, 1))
            if term is not None:
                return term.discount, f"reserved terms ({term.source})"
        return None

    return fill


# ---------------------------------------------------------------- scoring


def _normalize(metric: Metric, vendors: Sequence[Vendor]) -> Normalization:
    xs = {v.name: v.values[metric.name] for v in vendors}
    lo, hi = min(xs.values()), max(xs.values())
    if hi - lo <= 1e-12 * max(1.0, abs(hi)):
        return Normalization(
            metric.name,
            metric.dimension,
            metric.direction,
            lo,
            hi,
            "all vendors equal: 1 for everyone",
            dict.fromkeys(xs, 1.0),
        )
    if metric.direction == "higher":
        norm = {k: (x - lo) / (hi - lo) for k, x in xs.items()}
        formula = f"(x − {lo:g}) / ({hi:g} − {lo:g}); higher is better"
    else:
        norm = {k: (hi - x) / (hi - lo) for k, x in xs.items()}
        formula = f"({hi:g} − x) / ({hi:g} − {lo:g}); lower is better"
    return Normalization(metric.name, metric.dimension, metric.direction, lo, hi, formula, norm)


def _scores(
    weights: Mapping[str, float],
    metrics: Sequence[Metric],
    norms: Mapping[str, Normalization],
    vendors: Sequence[Vendor],
) -> dict[str, dict[str, float]]:
    """Vendor → dimension → dimension score (Σ_m w_m × normalized, before W_d)."""
    out: dict[str, dict[str, float]] = {}
    for v in vendors:
        dims = dict.fromkeys(weights, 0.0)
        for m in metrics:
            dims[m.dimension] += m.weight * norms[m.name].normalized[v.name]
        out[v.name] = dims
    return out


def score_vendors(criteria: Criteria) -> VendorRanking:
    """Rank the vendors; explain the normalization; find how far each weight can move."""
    norms = {m.name: _normalize(m, criteria.vendors) for m in criteria.metrics}
    dim_scores = _scores(criteria.weights, criteria.metrics, norms, criteria.vendors)
    totals = {
        v: sum(criteria.weights[d] * s for d, s in ds.items()) for v, ds in dim_scores.items()
    }
    order = sorted(totals, key=lambda v: (-totals[v], v))
    ranking = []
    for rank, v in enumerate(order, start=1):
        by_metric = {
            m.name: criteria.weights[m.dimension] * m.weight * norms[m.name].normalized[v]
            for m in criteria.metrics
        }
        ranking.append(
            VendorScore(
                rank,
                v,
                totals[v],
                {d: criteria.weights[d] * s for d, s in dim_scores[v].items()},
                by_metric,
            )
        )
    winner = order[0]
    sens = []
    for d, w in criteria.weights.items():
        best: tuple[float, str] | None = None
        if w < 1 - 1e-12:
            for c in order[1:]:
                rest_w = totals[winner] - w * dim_scores[winner][d]
                rest_c = totals[c] - w * dim_scores[c][d]
                alpha = (rest_w - rest_c) / (1 - w)
                beta = (dim_scores[winner][d] - dim_scores[c][d]) - alpha
                if abs(beta) < 1e-15:
                    continue
                root = -alpha / beta
                # Past the root c leads; a root at 0 or 1 has no "past" inside [0, 1]: there the
                # two only tie (e.g. every vendor scores the same on d), and the winner never changes.
                if (
                    1e-9 < root < 1 - 1e-9
                    and abs(root - w) > 1e-12
                    and (best is None or abs(root - w) < abs(best[0] - w))
                ):
                    best = (root, c)
        sens.append(
            WeightSensitivity(
                d,
                w,
                best[0] if best else None,
                (best[0] - w) if best else None,
                best[1] if best else None,
            )
        )
    notes = list(criteria.notes)
    filled = sorted(
        {
            f"{v.name}.{k} from {src}"
            for v in criteria.vendors
            for k, src in v.value_sources.items()
            if src != "given"
        }
    )
    if filled:
        notes.append("filled in: " + "; ".join(filled))
    return VendorRanking(
        tuple(ranking),
        tuple(norms.values()),
        tuple(sens),
        dict(criteria.weights),
        criteria.metrics,
        criteria.vendors,
        tuple(notes),
    )
