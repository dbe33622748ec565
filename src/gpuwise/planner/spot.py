"""Spot risk: what interruptions add to a job's time, and the chance it still meets a deadline.

The model (docs/plan.md, "Spot risk"), for a job of ``W`` failure-free hours on ``n`` nodes:

- interruptions arrive as a Poisson process; one node is reclaimed at rate ``λ`` per hour
  (from a monthly probability ``p``: ``λ = -ln(1 - p) / 730``), and any node's loss restarts
  the whole job (SkyPilot managed jobs do this, skypilot#3907), so the job sees ``Λ = n·λ``;
- the job checkpoints every ``τ`` hours of work, each checkpoint costing ``C`` hours;
  ``τ`` is Daly's higher-order optimum (Daly 2006, FGCS 22(3), eq. 20), which refines
  Young's ``√(2CM)`` (Young 1974) for ``M = 1/Λ``;
- after an interruption the job loses the work since its last checkpoint and pays ``R``
  hours to restart (re-provision, plus reloading the checkpoint).

Expected wall time, exact for this model (failures do not strike during a restart):
``E[T] = Σ_segments (1/Λ + R)(e^{Λ·a} - 1)`` with ``a = τ + C`` per full segment and the
remainder as the last one. With ``Λ → 0`` it becomes ``W + (checkpoints)·C``.

Deadline probability (an approximation, documented as such): each interruption costs its mean
loss ``L = R + 1/Λ - a/(e^{Λa} - 1)`` (≈ ``R + a/2``), the count ``K`` of interruptions is Poisson
with mean ``Λ·T₀`` (``T₀`` = failure-free time incl. checkpoints), and the job meets deadline
``D`` when ``T₀ + K·L ≤ D``: ``P = Σ_{k ≤ ⌊(D - T₀)/L⌋} e^{-μ} μ^k / k!``, ``μ = Λ·T₀``.

The model is conservative about notices: it assumes the notice-triggered emergency save may
fail, so every interruption loses the work since the last periodic checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from gpuwise.base.datafiles import read_user_yaml
from gpuwise.base.interval import (
    daly_interval_hours as daly_interval_hours,
)
from gpuwise.base.interval import (
    monthly_probability_to_rate as monthly_probability_to_rate,
)
from gpuwise.base.interval import (
    young_daly_waste as young_daly_waste,
)
from gpuwise.base.interval import (
    young_interval_hours as young_interval_hours,
)
from gpuwise.base.paths import config_dir
from gpuwise.errors import DataFileError
from gpuwise.units import check_finite


@dataclass(frozen=True)
class CloudSpotRisk:
    """Interruption defaults for one cloud's spot instances."""

    cloud: str
    """Cloud name, or ``default`` for clouds without their own entry."""
    monthly_interruption_probability: float
    """Chance one instance is reclaimed within a month (730 h), in [0, 1)."""
    confidence: str
    """``high``, ``low`` or ``assumption`` (a gpuwise placeholder, no public figure)."""
    source: str
    """Where the figure comes from."""
    notice_seconds: float | None
    """Warning before the instance is reclaimed; None when not published."""
    instance_type: str | None = None
    """Set for a per-instance figure (a provider's published band for this type and region)."""
    region: str | None = None
    band: str | None = None
    """The provider's band label (AWS Spot Instance Advisor: ``<5%`` … ``>20%``)."""

    @property
    def rate_per_node_hour(self) -> float:
        """Constant hazard λ per instance-hour: ``-ln(1 - p) / 730``."""
        return monthly_probability_to_rate(self.monthly_interruption_probability)

    @property
    def mtbf_hours(self) -> float:
        """Mean time between interruptions of one instance, in hours (inf when λ = 0)."""
        rate = self.rate_per_node_hour
        return math.inf if rate == 0 else 1 / rate


@dataclass(frozen=True)
class SpotDefaults:
    """The spot data file: per-cloud risks and the job-level checkpoint inputs."""

    clouds: dict[str, CloudSpotRisk]
    """Cloud → risk; key ``default`` applies to clouds not listed."""
    checkpoint_bandwidth_gb_s: float
    """Sustained checkpoint write/read rate in GB/s (10^9 bytes/s)."""
    restart_hours: float
    """Detect + re-provision + start time per interruption, before the checkpoint reload."""
    sources: dict[str, str]
    """Source notes for the job-level inputs."""
    instances: dict[tuple[str, str, str], CloudSpotRisk] = field(default_factory=dict)
    """(cloud, region, instance type) → per-instance risk, from fetched provider bands."""
    capacity_wait_hours: float = 0.0
    """Time to get spot capacity back after an interruption, every GPU (placeholder: 0)."""
    capacity_wait_scarce_hours: float = 0.0
    """The same for the scarce GPUs (startup.yaml ``scarce_gpus``; placeholder: 1 h)."""

    def for_cloud(self, cloud: str) -> CloudSpotRisk:
        return self.clouds.get(cloud) or self.clouds["default"]

    def for_instance(self, cloud: str, region: str, instance_type: str) -> CloudSpotRisk:
        """The instance type's own published risk in that region where known, else the cloud's default."""
        return self.instances.get((cloud, region, instance_type)) or self.for_cloud(cloud)


@dataclass(frozen=True)
class SpotOutcome:
    """What the spot model predicts for one job on one option."""

    expected_hours: float
    """E[wall time] including checkpoints, lost work and restarts."""
    failure_free_hours: float
    """Wall time with checkpoints but no interruption (T₀)."""
    interval_hours: float
    """Checkpoint interval τ (hours of work between checkpoints); inf = no periodic checkpoint."""
    checkpoint_hours: float
    """Time one checkpoint costs (C)."""
    restart_hours: float
    """Time one restart costs (R, incl. reloading the checkpoint)."""
    rate_per_hour: float
    """Job interruption rate Λ = nodes × λ."""
    expected_interruptions: float
    """Mean number of interruptions (Λ·T₀)."""


def _segment_hours(length_hours: float, rate: float, restart_hours: float) -> float:
    """E[time] to complete a segment of ``length_hours`` under rate ``rate``: (1/Λ + R)(e^{Λa} − 1)."""
    if rate == 0:
        return length_hours
    return (1 / rate + restart_hours) * math.expm1(rate * length_hours)


def spot_outcome(
    work_hours: float,
    *,
    rate_per_hour: float,
    checkpoint_hours: float,
    restart_hours: float,
    interval_hours: float | None = None,
) -> SpotOutcome:
    """Expected wall time of ``work_hours`` of work under interruptions (module docstring).

    ``interval_hours`` defaults to Daly's optimum for ``M = 1/rate``.
    """
    w = check_finite(work_hours, "work hours")
    rate = check_finite(rate_per_hour, "interruption rate")
    c = check_finite(checkpoint_hours, "checkpoint hours")
    r = check_finite(restart_hours, "restart hours")
    mtbf = math.inf if rate == 0 else 1 / rate
    tau = daly_interval_hours(c, mtbf) if interval_hours is None else interval_hours
    if rate == 0 or math.isinf(tau) or tau <= 0 or tau >= w:
        tau = math.inf
        full, rest = 0, w
    else:
        full = math.floor(w / tau)
        rest = w - full * tau
    t0 = w + full * c
    expected = (full * _segment_hours(tau + c, rate, r) if full else 0.0) + _segment_hours(
        rest, rate, r
    )
    return SpotOutcome(
        expected_hours=expected,
        failure_free_hours=t0,
        interval_hours=tau,
        checkpoint_hours=c,
        restart_hours=r,
        rate_per_hour=rate,
        expected_interruptions=rate * t0,
    )


def mean_loss_hours(outcome: SpotOutcome, work_hours: float) -> float:
    """Mean time one interruption costs: R + E[work lost | failure within a segment]."""
    rate = outcome.rate_per_hour
    seg = (
        outcome.interval_hours + outcome.checkpoint_hours
        if math.isfinite(outcome.interval_hours)
        else work_hours
    )
    if rate == 0 or seg <= 0:
        return outcome.restart_hours
    lost = 1 / rate - seg / math.expm1(rate * seg)
    return outcome.restart_hours + lost


def poisson_cdf(k: int, mu: float) -> float:
    """P[Poisson(mu) ≤ k], summed in log space (stable for large mu)."""
    if k < 0:
        return 0.0
    if mu <= 0:
        return 1.0
    if k > mu + 12 * math.sqrt(mu) + 30:  # the tail beyond is far below 1e-12
        return 1.0
    log_term = -mu
    total = math.exp(log_term)
    for i in range(1, k + 1):
        log_term += math.log(mu) - math.log(i)
        total += math.exp(log_term)
    return min(total, 1.0)


def p_meet_deadline(outcome: SpotOutcome, work_hours: float, deadline_hours: float) -> float:
    """Approximate P[wall time ≤ deadline] (module docstring); 0/1 without interruptions."""
    t0 = outcome.failure_free_hours
    if deadline_hours < t0:
        return 0.0
    mu = outcome.expected_interruptions
    if mu == 0:
        return 1.0
    loss = mean_loss_hours(outcome, work_hours)
    k_max = math.floor((deadline_hours - t0) / loss) if loss > 0 else 10**9
    return poisson_cdf(min(k_max, 10**9), mu)


def _minutes(raw: Any, key: str, origin: str) -> float:
    """A duration in minutes that may be 0."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 <= raw < math.inf:
        raise DataFileError(
            f"{origin}: {key}: {raw!r} is not a number of minutes ≥ 0",
            hint=f"write e.g. `{key.split('.')[-1]}: 30`",
        )
    return float(raw)


def _value(entry: Any, key: str, origin: str) -> float:
    raw = entry.get("value") if isinstance(entry, dict) else entry
    if (
        isinstance(raw, bool)
        or not isinstance(raw, (int, float))
        or not math.isfinite(raw)
        or raw <= 0
    ):
        raise DataFileError(
            f"{origin}: {key}: {raw!r} is not a positive number",
            hint=f"write e.g. `{key}: {{value: 1.0}}`",
        )
    return float(raw)


def _parse_cloud(cloud: str, entry: Any, origin: str) -> CloudSpotRisk:
    if not isinstance(entry, dict):
        raise DataFileError(
            f"{origin}: clouds.{cloud}: expected a mapping",
            hint="give monthly_interruption_probability, confidence, source",
        )
    p = entry.get("monthly_interruption_probability")
    if (
        isinstance(p, bool)
        or not isinstance(p, (int, float))
        or not math.isfinite(p)
        or not 0 <= p < 1
    ):
        raise DataFileError(
            f"{origin}: clouds.{cloud}.monthly_interruption_probability: {p!r} is not in [0, 1)",
            hint="write the chance one instance is reclaimed within a month, e.g. 0.1",
        )
    notice = entry.get("notice_seconds")
    if notice is not None and (
        isinstance(notice, bool) or not isinstance(notice, (int, float)) or notice < 0
    ):
        raise DataFileError(
            f"{origin}: clouds.{cloud}.notice_seconds: {notice!r} is not a duration in seconds",
            hint="write seconds, or null when unknown",
        )
    return CloudSpotRisk(
        cloud=cloud,
        monthly_interruption_probability=float(p),
        confidence=str(entry.get("confidence", "user")),
        source=str(entry.get("source", origin)),
        notice_seconds=None if notice is None else float(notice),
    )


def _merge(base: dict[str, Any], user: Any, origin: str) -> dict[str, Any]:
    if user is None:
        return base
    if not isinstance(user, dict):
        raise DataFileError(
            f"{origin}: expected a mapping", hint="see gpuwise/planner/data/spot.yaml for the shape"
        )
    merged = dict(base)
    for key, value in user.items():
        if key == "clouds" and isinstance(value, dict):
            clouds = dict(base.get("clouds", {}))
            for cloud, entry in value.items():
                old = clouds.get(str(cloud).lower(), {})
                clouds[str(cloud).lower()] = (
                    {**old, **entry} if isinstance(entry, dict) and isinstance(old, dict) else entry
                )
            merged["clouds"] = clouds
        else:
            merged[key] = value
    return merged


def load_spot_defaults(user_file: Path | None = None, *, fetched: bool = True) -> SpotDefaults:
    """The bundled spot data, overridden key by key by ``<config dir>/spot.yaml`` when present.

    With ``fetched``, per-instance risks fetched into the catalog store are added (:attr:`SpotDefaults.instances`).
    """
    import yaml

    origin = "gpuwise/planner/data/spot.yaml"
    data = yaml.safe_load(
        resources.files("gpuwise.planner").joinpath("data/spot.yaml").read_text("utf-8")
    )
    path = user_file if user_file is not None else config_dir() / "spot.yaml"
    if path.is_file():
        data = _merge(data, read_user_yaml(path), str(path))
        origin = f"{origin} + {path}"
    clouds = {
        str(c).lower(): _parse_cloud(str(c).lower(), e, origin)
        for c, e in (data.get("clouds") or {}).items()
    }
    if "default" not in clouds:
        raise DataFileError(
            f"{origin}: clouds.default is missing", hint="keep a `default:` entry under clouds"
        )
    bw = data.get("checkpoint_bandwidth_gb_s")
    rs = data.get("restart_minutes")
    instances = _instance_risks(data.get("aws_advisor_bands"), clouds, origin) if fetched else {}
    wait = data.get("capacity_wait_minutes") or {}
    if not isinstance(wait, dict):
        raise DataFileError(
            f"{origin}: capacity_wait_minutes must be a mapping",
            hint="give value: and scarce: in minutes",
        )
    return SpotDefaults(
        clouds=clouds,
        checkpoint_bandwidth_gb_s=_value(bw, "checkpoint_bandwidth_gb_s", origin),
        restart_hours=_value(rs, "restart_minutes", origin) / 60,
        sources={
            "checkpoint_bandwidth_gb_s": str(
                (bw or {}).get("source", "") if isinstance(bw, dict) else ""
            ),
            "restart_minutes": str((rs or {}).get("source", "") if isinstance(rs, dict) else ""),
        },
        instances=instances,
        capacity_wait_hours=_minutes(wait.get("value", 0), "capacity_wait_minutes.value", origin)
        / 60,
        capacity_wait_scarce_hours=_minutes(
            wait.get("scarce", wait.get("value", 0)), "capacity_wait_minutes.scarce", origin
        )
        / 60,
    )


def _instance_risks(
    bands: Any, clouds: dict[str, CloudSpotRisk], origin: str
) -> dict[tuple[str, str, str], CloudSpotRisk]:
    """Per-instance risks from the bands fetched by ``gpuwise catalog update --fetch aws-spot-advisor``.

    A band becomes a monthly probability through ``aws_advisor_bands`` in the spot data file; where
    that entry is the band's upper edge, the edge the fetched file itself states (``max``) is used.
    A band missing there is skipped (the cloud default applies; the fetch refuses unknown labels).
    """
    from gpuwise.catalog.risk import load_spot_risks

    if not isinstance(bands, dict):
        raise DataFileError(
            f"{origin}: aws_advisor_bands is missing or not a mapping",
            hint="keep the `aws_advisor_bands:` table of the bundled file",
        )
    table: dict[str, tuple[float, str]] = {}
    for label, entry in bands.items():
        p = entry.get("monthly_interruption_probability") if isinstance(entry, dict) else entry
        if (
            isinstance(p, bool)
            or not isinstance(p, (int, float))
            or not math.isfinite(p)
            or not 0 <= p < 1
        ):
            raise DataFileError(
                f"{origin}: aws_advisor_bands.{label}: {p!r} is not in [0, 1)",
                hint="write e.g. `'<5%': {monthly_interruption_probability: 0.05}`",
            )
        table[str(label)] = (
            float(p),
            str(entry.get("confidence", "low")) if isinstance(entry, dict) else "low",
        )
    out: dict[tuple[str, str, str], CloudSpotRisk] = {}
    for r in load_spot_risks():
        if r.band not in table:
            continue
        p, confidence = table[r.band]
        if r.band_max_pct is not None and confidence == "band upper edge":
            p = r.band_max_pct / 100  # the file's own upper edge (5, 11, 16, 22 %), not the table's
        elif r.band_min_pct is not None and confidence == "lower-bound":
            p = max(p, r.band_min_pct / 100)  # ">20%": the file's own lower edge (22 %)
        edges = (
            f" ({r.band_min_pct:g}-{r.band_max_pct:g}% in the advisor's file)"
            if r.band_min_pct is not None and r.band_max_pct is not None
            else ""
        )
        default = clouds.get(r.cloud) or clouds["default"]
        out[r.key] = CloudSpotRisk(
            cloud=r.cloud,
            monthly_interruption_probability=p,
            confidence=confidence,
            source=f"{r.source}: band {r.band}{edges} for {r.instance_type} in {r.region} "
            f"(as of {r.as_of})",
            notice_seconds=default.notice_seconds,
            instance_type=r.instance_type,
            region=r.region,
            band=r.band,
        )
    return out


HOT_SPOT_POOL_MTBF_HOURS = 6.0
"""Node MTBF of a "hot" GPU spot pool: a gpuwise planning assumption (no public figure), the
cautious end used for fleet planning (fleet/optimize.py ``DEFAULT_SPOT_OVERHEAD``)."""


def default_mtbf_hours(cloud: str = "default") -> float:
    """Node MTBF from the spot data file (``clouds.<cloud>``, else ``clouds.default``)."""
    return load_spot_defaults().for_cloud(cloud).mtbf_hours


FLEET_CHECKPOINT_SECONDS = 60.0
"""Checkpoint stall of a typical job when the fleet or TCO model has no workload to size it: a
gpuwise assumption (a synchronous save of a few GB to an object store), not a measured figure;
``--spot-overhead`` overrides the whole overhead."""


@dataclass(frozen=True)
class SpotOverhead:
    """Extra GPU-hours per useful spot GPU-hour: the plan's spot model for a long one-node job."""

    fraction: float
    """E[wall time] ÷ failure-free work − 1 (0.003 = 0.3% more GPU-hours than on-demand)."""
    cloud: str
    mtbf_hours: float
    """Mean hours between interruptions of one node."""
    checkpoint_hours: float
    restart_hours: float
    """Restart + capacity wait per interruption."""
    source: str
    """Where the interruption rate comes from, with its confidence."""

    def describe(self) -> str:
        return (
            f"{self.fraction:.2%} ({self.cloud}: one node interrupted every {self.mtbf_hours:,.0f} h, "
            f"{self.checkpoint_hours * 3600:.0f} s checkpoints, {self.restart_hours * 60:.0f} min "
            f"restarts; {self.source})"
        )


def spot_overhead(
    defaults: SpotDefaults,
    cloud: str,
    *,
    region: str | None = None,
    instance_type: str | None = None,
    mtbf_hours: float | None = None,
    checkpoint_hours: float = FLEET_CHECKPOINT_SECONDS / 3600,
) -> SpotOverhead:
    """The overhead :func:`spot_outcome` gives a long job on one spot node of ``cloud``.

    The same rate, restart time and capacity wait the plan uses for that cloud (or instance type,
    where a provider band was fetched), so ``plan``, ``fleet`` and ``tco`` price spot alike;
    ``mtbf_hours`` (observed, e.g. from run records) replaces the rate. The job is long (the ratio
    of a 100-MTBF job, where it no longer depends on the length); a job on ``n`` nodes sees ``n``
    times the rate, which ``plan`` counts per option and a fleet-wide figure cannot.
    """
    risk = (
        defaults.for_instance(cloud, region, instance_type)
        if region and instance_type
        else defaults.for_cloud(cloud)
    )
    rate = 1 / mtbf_hours if mtbf_hours else risk.rate_per_node_hour
    mtbf = math.inf if rate <= 0 else 1 / rate
    restart = defaults.restart_hours + defaults.capacity_wait_hours
    if rate <= 0:
        return SpotOverhead(0.0, cloud, mtbf, checkpoint_hours, restart, "no interruptions")
    work = 100 * mtbf
    outcome = spot_outcome(
        work, rate_per_hour=rate, checkpoint_hours=checkpoint_hours, restart_hours=restart
    )
    if mtbf_hours:
        source = f"observed: {mtbf_hours:,.0f} h between interruptions"
    else:
        source = f"{risk.monthly_interruption_probability:.0%}/month, {risk.confidence}"
    return SpotOverhead(
        outcome.expected_hours / work - 1, cloud, mtbf, checkpoint_hours, restart, source
    )
