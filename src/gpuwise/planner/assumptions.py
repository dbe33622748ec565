"""The model inputs a plan rests on that are defaults or placeholders, said in its output."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuwise.planner.sites import Site
from gpuwise.planner.spot import (
    SpotDefaults,
)
from gpuwise.planner.startup import StartupCosts
from gpuwise.planner.values import (
    PlanRequest,
)


def assumptions(
    request: PlanRequest,
    spot: SpotDefaults,
    clouds: set[str],
    costs: StartupCosts,
    sites: Sequence[Site],
) -> tuple[str, ...]:
    """The model inputs that are defaults or placeholders."""
    out = []
    if clouds and request.spot_mtbf_hours is None:
        for cloud in sorted(clouds):
            risk = spot.for_cloud(cloud)
            known = sum(
                1 for k in spot.instances if k[0] == cloud
            )  # fetched per-instance bands (issue 13)
            where = f" where the {known} fetched per-instance bands do not apply" if known else ""
            out.append(
                f"{cloud} spot interruptions: {risk.monthly_interruption_probability:.0%}/month per "
                f"instance{where} (MTBF {risk.mtbf_hours:,.0f} h, {confidence_words(risk.confidence)}) — "
                "override with spot_mtbf_hours (--spot-mtbf)"
            )
    if clouds and (spot.capacity_wait_hours or spot.capacity_wait_scarce_hours):
        out.append(
            f"spot capacity comes back {spot.capacity_wait_hours * 60:.0f} min after an interruption "
            f"({spot.capacity_wait_scarce_hours * 60:.0f} min for {', '.join(costs.scarce_gpus)} and their variants; "
            "placeholders: no provider publishes it) — set capacity_wait_minutes in spot.yaml; "
            "P(deadline) of spot options is unknown (rates are placeholders or fleet-wide bands) unless --spot-mtbf is given"
        )
    if clouds and request.checkpoint_bandwidth_gb_s is None:
        out.append(
            f"checkpoint bandwidth {spot.checkpoint_bandwidth_gb_s:g} GB/s (placeholder) — "
            "override with checkpoint_bandwidth_gb_s (--checkpoint-bandwidth)"
        )
    if clouds and request.restart_hours is None:
        out.append(
            f"restart {spot.restart_hours * 60:.0f} min + checkpoint reload (placeholder) — "
            "override with restart_hours (--restart-time)"
        )
    fixed = []
    if request.provision_hours is None:
        fixed.append(f"provisioning {costs.provision_hours * 60:.0f} min")
    if request.download_gbit_s is None:
        fixed.append(
            f"downloads (image {costs.image_gib:g} GiB + model weights) at {costs.download_gbit_s:g} Gbit/s"
        )
    if request.startup_hours is None:
        fixed.append(f"start-up {costs.startup_hours * 60:.0f} min")
    if fixed:
        out.append(
            "fixed costs per job (placeholders, added to every option): "
            + ", ".join(fixed)
            + " — override with provision_hours/download_gbit_s/startup_hours "
            "(--provision-time, --download-gbps, --startup-time)"
        )
    scale_set = sorted(
        {
            s.instance_type
            for s in sites
            if s.network.source.startswith("InfiniBand only within one VM scale set")
        }
    )
    if scale_set:
        out.append(
            f"Azure {', '.join(scale_set[:3])}{' …' if len(scale_set) > 3 else ''}: InfiniBand "
            "connects only VMs of one scale set, which SkyPilot does not create, so multi-node "
            "options are timed on the default network — give --inter-node-gbps (e.g. 1600) when "
            "you run them in one scale set (an AKS node pool)"
        )
    from gpuwise.planner.network import NO_ACCELNET, NOT_BUILT, ONE_EFA

    def named(prefix: str) -> list[str]:
        return sorted({s.instance_type for s in sites if s.network.source.startswith(prefix)})

    manual = named(NOT_BUILT["manual"])
    if manual:
        out.append(
            f"GCP {', '.join(manual[:3])}{' …' if len(manual) > 3 else ''}: {NOT_BUILT['manual']}; "
            "multi-node options are timed on the network SkyPilot builds (the host NIC) and the "
            "export does not ask for the fabric"
        )
    one_efa = named("one of ")
    if one_efa:
        out.append(
            f"AWS {', '.join(one_efa[:3])}{' …' if len(one_efa) > 3 else ''}: multi-node options "
            f"are timed on one EFA interface ({ONE_EFA})"
        )
    azure = named(NO_ACCELNET)
    if azure:
        out.append(
            f"Azure {', '.join(azure[:3])}{' …' if len(azure) > 3 else ''}: {NO_ACCELNET}; "
            "multi-node options are timed on the conservative 10 Gbit/s — give --inter-node-gbps "
            "when your VMs have it (e.g. an AKS node pool)"
        )
    if request.network_tier == "standard":
        out.append(
            "network tier standard: EFA, InfiniBand, RDMA and GPUDirect-TCPX are not used; every "
            "instance is timed on its default network (the export asks for nothing more)"
        )
    unknown = sorted(
        {
            f"{s.cloud} {s.instance_type}"
            for s in sites
            if not s.network.known
            and s.network.fabric == "unknown"
            and not s.network.source.startswith((NO_ACCELNET, NOT_BUILT["scale-set"]))
        }
    )
    if unknown:
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        out.append(
            f"network of {', '.join(unknown[:3])}{more}: not in gpuwise's network table, "
            "a conservative 10 Gbit/s assumed for multi-node options — override with inter_node_gbit_s "
            "(--inter-node-gbps)"
        )
    return tuple(out)


def recipe(workload: dict[str, Any]) -> tuple[str, ...]:
    """The one training recipe every option runs (the model's fixed global batch), when it has one."""
    source, gb = workload.get("global_batch_source"), workload.get("global_batch")
    if not source or not gb:
        return ()
    tokens_per_step = workload.get("global_batch_tokens")
    tokens = f" = {tokens_per_step:,} tokens" if tokens_per_step else ""
    return (
        f"one recipe for every option: global batch {gb:,} sequences{tokens} per optimizer step "
        f"({source}); each option reaches it with micro-batch × accumulation × data-parallel GPUs "
        "(its settings) — override with global_batch (--global-batch)",
    )


def confidence_words(confidence: str) -> str:
    """``low`` → "low confidence"; ``assumption`` → "a placeholder: no public figure"."""
    return (
        "a placeholder: no public figure"
        if confidence == "assumption"
        else f"{confidence} confidence"
    )
