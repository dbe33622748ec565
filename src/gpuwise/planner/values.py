"""The planner's values: what is asked (:class:`PlanRequest`), and what comes back
(:class:`Plan` with ranked :class:`PlanOption` s and grouped :class:`Rejection` s)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from gpuwise.catalog.offer import BILLINGS, Billing
from gpuwise.errors import InputError, check_choice
from gpuwise.units import check_finite

Objective = Literal["cost", "time", "balanced"]
OBJECTIVES: tuple[Objective, ...] = ("cost", "time", "balanced")
DEFAULT_MEMORY_HEADROOM = 0.08
"""Share of each GPU's usable memory a plan leaves free after every modelled term (issue 31: the
estimator's memory errors on TP/PP and long-context runs are larger than the ~1 % a plan left;
gpuwise's own margin, not a published figure; ``--memory-headroom``)."""
MEMORY_ALERT_SHARE = 0.85
"""The shipped memory alert (``GpuwiseGpuMemoryHigh`` in deploy/prometheus/gpuwise-rules.yml and
the Kubernetes PrometheusRule) fires above this share of a GPU's memory for 10 minutes; a test
keeps the two equal."""
MAX_NODES = 64
"""Largest --max-nodes: every node count 1..N of every instance type is estimated and priced."""
RejectKind = Literal[
    "no-fit",
    "no-estimate",
    "fractional",
    "no-price",
    "reserved-unknown",
    "deadline",
    "budget",
    "max-gpus",
    "batch",
]


@dataclass(frozen=True)
class PlanRequest:
    """Constraints, objective and spot-model inputs of one plan. Every field is optional."""

    deadline_hours: float | None = None
    """Finish within this many wall-clock hours (spot: with probability ≥ ``confidence``)."""
    budget_usd: float | None = None
    """Spend at most this much (expected cost for spot)."""
    max_gpus: int | None = None
    """At most this many GPUs in total (nodes × GPUs per node)."""
    max_nodes: int = 8
    """Try 1..max_nodes nodes of each instance type."""
    clouds: tuple[str, ...] = ()
    """Only these clouds (empty = all)."""
    regions: tuple[str, ...] = ()
    """Only regions matching these names or shell globs (``us-*``)."""
    gpus: tuple[str, ...] = ()
    """Only these GPU models or aliases (empty = all)."""
    billings: tuple[Billing, ...] = BILLINGS
    """Billing models to consider: on-demand, spot, reserved-1y, reserved-3y."""
    objective: Objective = "cost"
    """Rank by expected cost, by expected time, or ``balanced`` (minimise cost × hours)."""
    confidence: float = 0.9
    """Spot options must meet the deadline with at least this probability."""
    prefer_faster_within: float | None = None
    """Cost objective: pick the fastest option costing at most this fraction more than the
    cheapest (0.2 = 20 %); None: the cheapest (options within 2 % ordered faster first)."""
    deadline_confidence: float = 0.9
    """Cost objective with a deadline: when the chosen option's chance to finish in time (the
    estimator's error and spot interruptions counted) is below this, the cheapest option that
    reaches it is chosen instead (0 turns the rule off)."""
    memory_headroom: float = DEFAULT_MEMORY_HEADROOM
    """Fraction of each GPU's usable memory left free after every modelled term."""
    spot_mtbf_hours: float | None = None
    """Mean hours between interruptions of one spot instance; overrides the per-cloud defaults."""
    checkpoint_gib: float | None = None
    """Size of one checkpoint in GiB; default: the estimate's weights + optimizer state."""
    checkpoint_bandwidth_gb_s: float | None = None
    """Checkpoint write/read rate in GB/s; default from the spot data file."""
    restart_hours: float | None = None
    """Re-provision + start time per interruption (checkpoint reload is added); default from data."""
    inter_node_gbit_s: float | None = None
    """Network bandwidth of every instance, Gbit/s; None: each instance type's own (sourced table)."""
    network_tier: Literal["best", "standard"] = "best"
    """``best``: time EFA/InfiniBand/RDMA/TCPX where the export can ask for it (SkyPilot
    ``network_tier: best``); ``standard``: time every instance on its default network."""
    aws_efa_interfaces: Literal["one", "all"] = "one"
    """AWS instances with several EFA interfaces: ``one`` times the one SkyPilot attaches by
    default; ``all`` every interface (SkyPilot's config sets ``aws.use_internal_ips``)."""
    search_settings: bool = True
    """Search the job's settings per GPU setup (recompute × ZeRO × micro-batch; TP × batch for
    inference); False: the workload's settings as given."""
    max_zero: int | None = None
    """Without the search: raise the ZeRO stage up to this where the workload would not fit."""
    max_batch: int | None = None
    """Inference: most concurrent sequences per model copy (None: as many as the KV cache holds, ≤ 256)."""
    allow_zone_outliers: bool = False
    """Use zone prices far below their region's other zones (the option then pins that zone)."""
    provision_hours: float | None = None
    """Time to get a usable machine; default from gpuwise's startup data."""
    startup_hours: float | None = None
    """Imports, NCCL init, weights into GPU memory; default from gpuwise's startup data."""
    download_gbit_s: float | None = None
    """Download rate of one node for the image and the weights; default from gpuwise's startup data."""
    spot_mtbf_by_site: tuple[tuple[str, str, str, float, str], ...] = ()
    """(cloud, region, instance type, MTBF hours, source) observed in run records
    (``--spot-mtbf auto``, :mod:`gpuwise.planner.spot_observed`); wins over the bundled figures for
    those sites, not over ``spot_mtbf_hours``."""

    def __post_init__(self) -> None:
        for name in ("inter_node_gbit_s", "download_gbit_s"):
            value = getattr(self, name)
            if value is not None:
                check_finite(value, name.replace("_", " "), strict=True)
        for name in ("provision_hours", "startup_hours"):
            value = getattr(self, name)
            if value is not None:
                check_finite(value, name.replace("_", " "))
        if self.max_zero is not None and self.max_zero not in (0, 1, 2, 3):
            raise InputError(
                f"max_zero must be 0, 1, 2 or 3, got {self.max_zero}",
                hint="use 3 to allow FSDP full sharding",
            )
        if self.max_batch is not None and self.max_batch < 1:
            raise InputError(
                f"max_batch must be ≥ 1, got {self.max_batch}",
                hint="give a positive number of sequences",
            )
        for name in ("deadline_hours", "checkpoint_bandwidth_gb_s", "spot_mtbf_hours"):
            value = getattr(self, name)
            if value is not None:
                check_finite(value, name.replace("_", " "), strict=True)
        for name in ("budget_usd", "checkpoint_gib", "restart_hours"):
            value = getattr(self, name)
            if value is not None:
                check_finite(value, name.replace("_", " "))
        if self.max_gpus is not None and self.max_gpus < 1:
            raise InputError(
                f"--max-gpus must be ≥ 1, got {self.max_gpus}", hint="give a positive GPU count"
            )
        if not 1 <= self.max_nodes <= MAX_NODES:
            raise InputError(
                f"--max-nodes must be in 1..{MAX_NODES}, got {self.max_nodes}",
                hint=f"give e.g. 8 (at most {MAX_NODES}: every node count is priced)",
            )
        check_finite(self.confidence, "confidence", maximum=1.0)
        check_finite(self.deadline_confidence, "deadline confidence", maximum=1.0)
        if self.prefer_faster_within is not None:
            check_finite(self.prefer_faster_within, "prefer-faster-within")
        if not 0.0 <= self.memory_headroom < 0.5:
            raise InputError(
                f"memory headroom must be in [0, 0.5), got {self.memory_headroom}",
                hint="give e.g. 0.08 (8 % of usable memory left free)",
            )
        check_choice(self.objective, OBJECTIVES, "objective")
        check_choice(self.network_tier, ("best", "standard"), "network tier")
        check_choice(self.aws_efa_interfaces, ("one", "all"), "AWS EFA interfaces")
        for billing in self.billings:
            check_choice(billing, BILLINGS, "billing")
        if not self.billings:
            raise InputError(
                "no billing model to consider", hint=f"give one or more of {', '.join(BILLINGS)}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def option_label(
    gpu: str, gpus_per_node: int, nodes: int, cloud: str, instance_type: str, billing: str
) -> str:
    """``16×H100 (aws p5.48xlarge ×2, spot)``: how options and rejections name a setup."""
    node_text = f" ×{nodes}" if nodes > 1 else ""
    return f"{gpus_per_node * nodes}×{gpu} ({cloud} {instance_type}{node_text}, {billing})"


@dataclass(frozen=True)
class PlanOption:
    """One way to run the job: an instance type × nodes × billing, in one or more regions."""

    rank: int
    """1 = best for the objective."""
    cloud: str
    region: str
    """The region listed first (cheapest, then alphabetical) among ``regions``."""
    regions: tuple[str, ...]
    """Every region where this instance type has the same price (near-identical rows merged)."""
    instance_type: str
    gpu: str
    gpu_count: int
    """GPUs per node."""
    nodes: int
    billing: Billing
    price_usd_per_hour: float
    """Price of all nodes together."""
    hours: float
    """Wall-clock hours: failure-free for on-demand/reserved, expected (incl. interruptions) for spot."""
    cost_usd: float
    """price_usd_per_hour × hours."""
    fits: bool
    """Always True for a ranked option (what does not fit is rejected)."""
    p_meet_deadline: float | None
    """Probability of finishing by the deadline; None without a deadline."""
    p_meet_deadline_confidence: Literal["low", "given"] | None
    """Spot with a deadline: ``low`` when the interruption rate or the capacity wait is a
    placeholder or a fleet-wide band (every bundled figure), ``given`` with ``spot_mtbf_hours``;
    None otherwise."""
    failure_free_hours: float
    """Hours without interruptions (and without checkpoints)."""
    p_finish_in_time: float | None
    """Chance to finish by the deadline with the estimator's own error counted (and, for spot,
    the interruption model's chance): what ``deadline_confidence`` is checked against. None
    without a deadline."""
    per_gpu_memory_gib: float
    """Everything the estimator counts per GPU (CUDA context, buffers, allocator included)."""
    capacity_gib: float
    """The GPU's memory (see ``capacity_source``)."""
    on_pareto_front: bool
    """Not beaten on both cost and time by another option."""
    checkpoint_interval_hours: float | None = None
    """Spot: Young/Daly checkpoint interval; None for on-demand/reserved."""
    expected_interruptions: float | None = None
    """Spot: mean number of interruptions over the run."""
    interruption_source: str | None = None
    """Spot: where the interruption rate comes from, with its confidence."""
    zones: int = 0
    """How many availability-zone rows were merged into this option."""
    checkpoint_hours: float | None = None
    """Time to write one checkpoint (size / bandwidth); sizes the emergency-save grace period."""
    checkpoint_gib: float | None = None
    """Size of one checkpoint, GiB (the request's, else the estimate's; None: unknown)."""
    settings: Mapping[str, Any] | None = None
    """The job's settings on this setup (zero, recompute, micro_batch, global_batch, accumulation,
    tensor_parallel, searched, text)."""
    zone: str | None = None
    """The zone that gives the price in ``region`` (None where the cloud has none)."""
    zone_pinned: bool = False
    """True when the price is only available in ``zone`` (an outlier the request allowed): the export pins it."""
    zones_set_aside: tuple[str, ...] = ()
    """Zones of ``region`` whose prices were far below the others and were not used."""
    network: str = ""
    """The inter-node network the time assumes, e.g. ``3200 Gbit/s EFA``."""
    network_known: bool = True
    """False when the instance type is not in gpuwise's network table (a conservative default was used)."""
    network_fabric: str = "unknown"
    """The fabric the time assumes: efa, infiniband, rdma, gpudirect-tcpx, tcp, unknown or given."""
    network_tier: Literal["best", "standard"] = "standard"
    """``best`` when the time assumes a fabric the launch must ask for (the SkyPilot export writes
    ``network_tier: best`` for such a candidate of a multi-node job)."""
    rdma_resource: tuple[str, int] | None = None
    """Kubernetes extended resource and count for the instance's fabric (EFA), or None."""
    fixed_hours: float = 0.0
    """Provisioning, image and model download, start-up: included in ``hours`` and ``cost_usd``."""
    cost_usd_p10: float | None = None
    """Optimistic cost from the estimator's range (None: no range)."""
    cost_usd_p90: float | None = None
    """Pessimistic cost from the estimator's range (None: no range)."""
    price_as_of: str | None = None
    """When the price was read, as the catalog says."""
    capacity_note: str | None = None
    """Spot on a scarce GPU: capacity may be missing or reclaimed more often than the fleet-wide rate."""
    vcpus: float | None = None
    """vCPUs of one instance (Kubernetes CPU request)."""
    memory_gib: float | None = None
    """Host RAM of one instance (Kubernetes memory request)."""
    similar: int = 1
    """Options with the same GPUs, billing and price merged into this one (other regions)."""
    capacity_source: str = "published"
    """``measured`` (calibration.json), ``published`` (the nvidia-smi figure) or ``datasheet``
    (no reported figure known: likely a few percent high)."""
    memory_limit_gib: float | None = None
    """Most a setting could need here: ``capacity_gib`` less the plan's memory headroom."""
    memory_share: float = 0.0
    """``per_gpu_memory_gib / capacity_gib``: the peak share of the GPU's memory the job holds."""
    memory_alert: bool = False
    """The peak is above the shipped memory alert's threshold (:data:`MEMORY_ALERT_SHARE`)."""

    @property
    def total_gpus(self) -> int:
        return self.gpu_count * self.nodes

    @property
    def setup(self) -> str:
        """``8×H100`` or ``16×H100 (2 nodes)``."""
        text = f"{self.total_gpus}×{self.gpu}"
        return text if self.nodes == 1 else f"{text} ({self.nodes} nodes)"

    @property
    def label(self) -> str:
        """``8×H100 (aws p5.48xlarge, spot)``."""
        return option_label(
            self.gpu, self.gpu_count, self.nodes, self.cloud, self.instance_type, self.billing
        )

    @classmethod
    def of_all_fields(cls, values: dict[str, Any]) -> PlanOption:
        """Construct from a dict of every field, without the frozen ``__init__``'s per-field
        ``object.__setattr__`` (a plan makes thousands of options; this is several times faster).

        ``values`` must name every field (no defaults are filled in) and is owned by the option
        afterwards; the planner's tests check that options built this way equal ones built with
        ``PlanOption(**values)``.
        """
        obj = object.__new__(cls)
        object.__setattr__(obj, "__dict__", values)
        return obj

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["settings"] = None if self.settings is None else dict(self.settings)
        out["rdma_resource"] = None if self.rdma_resource is None else list(self.rdma_resource)
        out["zones_set_aside"] = list(self.zones_set_aside)
        return out


@dataclass(frozen=True)
class Rejection:
    """A group of offers that could not be options, and why."""

    kind: RejectKind
    """no-fit, no-estimate, fractional, no-price, reserved-unknown, deadline, budget, max-gpus or
    batch (the data-parallel degree does not divide the plan's global batch)."""
    reason: str
    """One line for people, e.g. ``A10G ×4: does not fit (needs 31 GiB/GPU, has 24)``."""
    offers: int
    """How many (offer × nodes × billing) combinations the group stands for."""
    gpu: str | None = None
    gpu_count: float | None = None
    """GPUs per node."""
    nodes: tuple[int, ...] = ()
    """Node counts the group covers."""
    billing: str | None = None
    cloud: str | None = None
    example: str | None = None
    """The group's best (fastest or cheapest) member, as a label."""
    hours: float | None = None
    """Best hours in the group (deadline misses)."""
    cost_usd: float | None = None
    """Best cost in the group (budget misses)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Plan:
    """The answer: ranked options, their Pareto front, what was rejected, and why."""

    workload: Mapping[str, Any]
    """The workload spec, echoed."""
    request: PlanRequest
    options: tuple[PlanOption, ...]
    """Options meeting every constraint, best first (empty when none does)."""
    pareto: tuple[PlanOption, ...]
    """The cost-vs-time Pareto front of ``options``, cheapest first."""
    rejected: tuple[Rejection, ...]
    explanation: tuple[str, ...]
    """Why the winner won and why the others lost, one sentence each."""
    reason: str | None = None
    """Why ``options`` is empty; None otherwise."""
    nearest_miss: str | None = None
    """The closest thing to a feasible option, e.g. ``fastest possible: 61 h on 8×H100 (aws p5.48xlarge)``."""
    considered: int = 0
    """(offer × nodes × billing) combinations looked at."""
    assumptions: tuple[str, ...] = field(default=())
    """Model inputs that are defaults or placeholders, with their sources."""
    settings_evaluated: int = 0
    """Job settings whose memory or time the search computed, over all GPU setups."""
    ranking_note: str | None = None
    """Which rule chose the first option (the cheapest, a ±2 % tie broken by speed, speed asked
    for, or the deadline's confidence) and its chance to finish in time; None without options."""

    @property
    def winner(self) -> PlanOption | None:
        return self.options[0] if self.options else None

    def to_dict(self, limit: int | None = None) -> dict[str, Any]:
        """The ``plan --json`` document; ``limit`` caps ``options`` (``options_total`` keeps the count)."""
        shown = self.options if not limit else self.options[:limit]
        return {
            "workload": dict(self.workload),
            "request": self.request.to_dict(),
            "options": [o.to_dict() for o in shown],
            "options_total": len(self.options),
            "pareto": [o.to_dict() for o in self.pareto],
            "rejected": [r.to_dict() for r in self.rejected],
            "explanation": list(self.explanation),
            "reason": self.reason,
            "nearest_miss": self.nearest_miss,
            "considered": self.considered,
            "assumptions": list(self.assumptions),
            "settings_evaluated": self.settings_evaluated,
            "ranking_note": self.ranking_note,
        }
