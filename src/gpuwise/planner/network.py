"""Each instance type's own network: the planner times multi-node jobs with it.

The figures live in ``gpuwise/catalog/data/instance_network.csv`` (one row per cloud + instance
pattern, each with its source and the date it was read). The planner times with the *sustained*
bandwidth (``inter_node_gbit_s``), never the "up to" burst ceiling (``burst_gbit_s``), and with the
fabric only where the launch can ask for it: ``network_tier: best`` in the SkyPilot export
(:func:`for_tier`). Azure InfiniBand reaches only VMs of one scale set, which SkyPilot does not
create, so those rows are timed on their Ethernet figure; ``--network-tier standard`` times every
instance on its default network. An instance type that is not listed gets :data:`UNKNOWN`, a
conservative 10 Gbit/s over TCP, and the plan says so; ``PlanRequest.inter_node_gbit_s``
overrides every instance (``--inter-node-gbps``).
"""

from __future__ import annotations

import csv
import fnmatch
import functools
import io
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from gpuwise.errors import CatalogError

Fabric = Literal["efa", "infiniband", "rdma", "gpudirect-tcpx", "tcp", "unknown", "given"]
_FABRICS = ("efa", "infiniband", "rdma", "gpudirect-tcpx", "tcp")
FAST_FABRICS = ("efa", "infiniband", "rdma", "gpudirect-tcpx")
"""Fabrics a launcher attaches only when asked (SkyPilot ``network_tier: best``)."""
Scope = Literal["any", "gpu-cluster", "scale-set", "manual"]
_SCOPES = ("any", "gpu-cluster", "scale-set", "manual")
NetworkTier = Literal["best", "standard"]
EfaInterfaces = Literal["one", "all"]
NOT_BUILT = {
    "scale-set": "InfiniBand only within one VM scale set",
    "manual": "SkyPilot 0.14 cannot build this fabric (network_tier: best builds GPUDirect only "
    "on a3-highgpu-8g and a3-edgegpu-8g: its provisioner raises ValueError on other types)",
}
"""Why a fabric of each scope is not what a gpuwise export launches (the time uses the default
network instead); read from SkyPilot 0.14.1's GCP provisioner
(``sky/provision/gcp/constants.py`` ``GPU_DIRECT_TCPX_INSTANCE_TYPES``, ``config.py``)."""
NO_ACCELNET = (
    "SkyPilot 0.14 creates Azure NICs without accelerated networking "
    "(sky/provision/azure/instance.py), which the published Ethernet figure assumes"
)
_COLUMNS = [
    "cloud",
    "instance_pattern",
    "inter_node_gbit_s",
    "burst_gbit_s",
    "fabric",
    "fabric_scope",
    "standard_gbit_s",
    "rdma_resource",
    "intra_node",
    "source",
    "read_on",
    "note",
]


@dataclass(frozen=True)
class InstanceNetwork:
    """How one instance type talks to the others of a multi-node job."""

    inter_node_gbit_s: float
    """Network bandwidth of one instance, Gbit/s."""
    fabric: Fabric
    """efa, infiniband, rdma (RoCE), gpudirect-tcpx, tcp; ``unknown`` for the default, ``given`` for an override."""
    rdma_resource: tuple[str, int] | None = None
    """Kubernetes extended resource and count a pod requests for the fabric, e.g. ``("vpc.amazonaws.com/efa", 32)``."""
    intra_node: str = "unknown"
    """nvlink or pcie (informational: the estimator takes the intra-node link from the GPU model)."""
    source: str = ""
    """Where the figure comes from."""
    scope: Scope = "any"
    """Where the fabric reaches: any, gpu-cluster (Nebius) or scale-set (Azure InfiniBand)."""
    standard_gbit_s: float | None = None
    """Sustained bandwidth on the default network (no fabric); None: not published."""
    burst_gbit_s: float | None = None
    """The provider's "up to" burst ceiling (never used for timing); None: no burst figure."""

    @property
    def needs_best_tier(self) -> bool:
        """True when the time assumes a fabric the launch must ask for (``network_tier: best``)."""
        return self.fabric in FAST_FABRICS

    @property
    def known(self) -> bool:
        return self.fabric not in ("unknown", "given")

    def describe(self) -> str:
        """``3200 Gbit/s EFA`` / ``10 Gbit/s (unknown instance: conservative default)``."""
        return _describe(self)


@functools.lru_cache(maxsize=256)
def _describe(net: InstanceNetwork) -> str:  # cached: thousands of options share a few networks
    if net.fabric == "unknown" and net.source == UNKNOWN.source:
        return f"{net.inter_node_gbit_s:g} Gbit/s (not in gpuwise's network table: conservative default)"
    if net.fabric == "unknown":
        return (
            f"{net.inter_node_gbit_s:g} Gbit/s (as launched, not published: conservative default)"
        )
    if net.fabric == "given":
        return f"{net.inter_node_gbit_s:g} Gbit/s (given)"
    fabric = {
        "efa": "EFA",
        "infiniband": "InfiniBand",
        "rdma": "RDMA",
        "gpudirect-tcpx": "GPUDirect-TCPX",
        "tcp": "TCP",
    }[net.fabric]
    return f"{net.inter_node_gbit_s:g} Gbit/s {fabric}"


UNKNOWN = InstanceNetwork(
    10.0,
    "unknown",
    None,
    "unknown",
    "gpuwise default for instances without a sourced figure (conservative: a small VM's NIC)",
)
"""What an instance not in the table gets: 10 Gbit/s TCP (no source: a deliberately low figure)."""


@dataclass(frozen=True)
class _Row:
    cloud: str
    pattern: str
    network: InstanceNetwork


def parse_instance_network(text: str, name: str = "instance_network.csv") -> tuple[_Row, ...]:
    """Read the network table; name file, line and field of anything wrong."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    if reader.fieldnames != _COLUMNS:
        raise CatalogError(
            f"{name}: header must be {','.join(_COLUMNS)}", hint="fix the file's first line"
        )
    rows = []
    for i, raw in enumerate(reader, start=2):
        try:
            gbit = float(raw["inter_node_gbit_s"])
        except ValueError:
            raise CatalogError(
                f"{name} row {i}: inter_node_gbit_s {raw['inter_node_gbit_s']!r} is not a number",
                hint="give Gbit/s, e.g. 400",
            ) from None
        fabric = raw["fabric"]
        if fabric not in _FABRICS or gbit <= 0 or not raw["source"].strip():
            raise CatalogError(
                f"{name} row {i}: needs a fabric in {', '.join(_FABRICS)}, Gbit/s > 0 and a source",
                hint="fix the row",
            )
        if "https://" not in raw["source"] or not raw["read_on"].strip():
            raise CatalogError(
                f"{name} row {i}: needs a source URL (https://...) and the date it was read (read_on)",
                hint="name the provider page and when you read it",
            )
        scope = raw["fabric_scope"] or "any"
        if scope not in _SCOPES:
            raise CatalogError(
                f"{name} row {i}: fabric_scope {scope!r} is not one of {', '.join(_SCOPES)}",
                hint="fix the row",
            )
        extra = {}
        for col in ("standard_gbit_s", "burst_gbit_s"):
            try:
                extra[col] = float(raw[col]) if raw[col] else None
            except ValueError:
                raise CatalogError(
                    f"{name} row {i}: {col} {raw[col]!r} is not a number",
                    hint="give Gbit/s, or leave it empty when not published",
                ) from None
        rdma = None
        if raw["rdma_resource"]:
            res, _, count = raw["rdma_resource"].partition("=")
            rdma = (res, int(count or "1"))
        rows.append(
            _Row(
                raw["cloud"],
                raw["instance_pattern"],
                InstanceNetwork(
                    gbit,
                    fabric,  # type: ignore[arg-type]
                    rdma,
                    raw["intra_node"] or "unknown",
                    _cite(raw["source"], raw["read_on"]),
                    scope,  # type: ignore[arg-type]
                    extra["standard_gbit_s"],
                    extra["burst_gbit_s"],
                ),
            )
        )
    return tuple(rows)


@functools.lru_cache(maxsize=1)
def _table() -> tuple[_Row, ...]:
    text = (
        resources.files("gpuwise.catalog").joinpath("data/instance_network.csv").read_text("utf-8")
    )
    return parse_instance_network(text)


@functools.lru_cache(maxsize=4096)
def instance_network(cloud: str, instance_type: str) -> InstanceNetwork:
    """The table's first row matching ``cloud`` and ``instance_type``; :data:`UNKNOWN` when none does."""
    for row in _table():
        if row.cloud == cloud and fnmatch.fnmatchcase(instance_type, row.pattern):
            return row.network
    return UNKNOWN


def given_network(gbit_s: float) -> InstanceNetwork:
    """The user's ``--inter-node-gbps`` for every instance."""
    return InstanceNetwork(gbit_s, "given", None, "unknown", "given by the user")


@functools.lru_cache(maxsize=4096)
def for_tier(net: InstanceNetwork, tier: NetworkTier) -> InstanceNetwork:
    """The network a launch gets: the fabric with ``best`` where the launcher can attach it, else
    the default network's sustained figure (the conservative default where none is published).

    Azure InfiniBand (scope ``scale-set``) needs the VMs of one scale set, which SkyPilot does not
    create: it is timed on the default network at either tier (``--inter-node-gbps`` for a scale set).
    """
    if not net.needs_best_tier or (tier == "best" and net.scope not in NOT_BUILT):
        return net
    why = NOT_BUILT.get(net.scope, "network tier standard: no fabric")
    if net.standard_gbit_s is None:
        return InstanceNetwork(
            UNKNOWN.inter_node_gbit_s,
            "unknown",
            None,
            net.intra_node,
            f"{why}; the default network's bandwidth is not published: {UNKNOWN.source}",
        )
    return InstanceNetwork(
        net.standard_gbit_s,
        "tcp",
        None,
        net.intra_node,
        f"{why}; {net.source}",
        "any",
        net.standard_gbit_s,
    )


@functools.lru_cache(maxsize=4096)
def as_launched(cloud: str, net: InstanceNetwork, efa: EfaInterfaces = "one") -> InstanceNetwork:
    """The network SkyPilot 0.14 builds for an instance whose tier network is ``net``
    (:func:`for_tier`), where it differs:

    - AWS with several EFA interfaces: SkyPilot attaches one unless its own config sets
      ``aws.use_internal_ips`` (``sky/provision/aws/instance.py``: the other network cards need
      a launch without a public IP), and that key cannot be set in a task. ``efa="one"`` times one
      interface (the total ÷ the interface count, each card carrying an equal share; a Kubernetes
      pod still requests every EFA device); ``"all"`` keeps every interface.
    - Azure Ethernet: SkyPilot's NICs come without accelerated networking (:data:`NO_ACCELNET`),
      so the published figure does not hold: timed on the conservative default, said so.
    """
    if net.fabric == "efa" and efa == "one" and net.rdma_resource and net.rdma_resource[1] > 1:
        count = net.rdma_resource[1]
        return InstanceNetwork(
            net.inter_node_gbit_s / count,
            "efa",
            net.rdma_resource,  # a Kubernetes pod still asks for every device
            net.intra_node,
            f"one of {count} EFA interfaces ({ONE_EFA}); {net.source}",
            net.scope,
            net.standard_gbit_s,
            net.burst_gbit_s,
        )
    if cloud == "azure" and net.fabric == "tcp":
        return InstanceNetwork(
            UNKNOWN.inter_node_gbit_s,
            "unknown",
            None,
            net.intra_node,
            f"{NO_ACCELNET}; {UNKNOWN.source}",
        )
    return net


ONE_EFA = (
    "SkyPilot attaches one unless its config sets aws.use_internal_ips: give "
    "--aws-efa-interfaces all when yours does"
)


def _cite(source: str, read_on: str) -> str:
    """The row's source as the plan output names it, saying when the page was read."""
    if read_on == "unverified":
        return f"{source} (figure not re-read from the page: check it)"
    return f"{source} (read {read_on})"
