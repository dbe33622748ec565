"""The per-offer settings search, the per-instance network and the fixed costs, with the real estimator."""

from __future__ import annotations

import pytest

from gpuwise.catalog import Offer
from gpuwise.estimate.workload import Workload, workload_from_options
from gpuwise.hardware import find_gpu
from gpuwise.planner import EstimatorModel, PlanRequest, load_spot_defaults, plan_offers
from gpuwise.planner.network import UNKNOWN, instance_network
from gpuwise.planner.settings import as_given, search_inference, search_training

from .toy import NO_STARTUP
from .toy import offer as _offer


def offer(
    cloud: str,
    region: str,
    itype: str,
    gpu: str,
    count: float,
    od: float,
    *,
    zone: str | None = None,
    spot: float | None = None,
) -> Offer:
    return _offer(cloud, region, itype, gpu, count, od, spot, zone, vcpus=96.0, memory_gib=1024.0)


LORA_8B = workload_from_options(
    model="llama-3.1-8b", task="lora", tokens="2B", seq_len=4096, micro_batch=4, global_batch=64
)


def test_recompute_makes_a_24_gib_gpu_fit_and_keeps_the_global_batch() -> None:
    spec = find_gpu("A10G")
    assert as_given(LORA_8B, spec, 4, 1, 40, None).estimate is None  # as given: does not fit
    found = search_training(LORA_8B, spec, 4, 1, 40, None)
    assert found.estimate is not None and found.settings is not None
    s = found.settings
    assert s.recompute != "none" or s.zero > 0 or s.micro_batch < 4
    assert s.global_batch == 64 and s.micro_batch * s.accumulation * 4 == 64
    assert found.estimate.memory.fits and found.evaluated > 1
    assert "micro-batch" in s.describe()


def test_the_search_is_never_slower_than_the_settings_as_given() -> None:
    spec = find_gpu("H100")
    wl = LORA_8B.with_changes(micro_batch=1, seq_len=1024)
    given = as_given(wl, spec, 8, 1, 3200, None)
    found = search_training(wl, spec, 8, 1, 3200, None)
    assert given.estimate is not None and found.estimate is not None
    assert found.estimate.wall_hours is not None and given.estimate.wall_hours is not None
    assert found.estimate.wall_hours <= given.estimate.wall_hours * (1 + 1e-9)


def test_70b_inference_uses_tensor_parallelism_on_8_h100() -> None:
    wl = workload_from_options(model="llama-3.1-70b", task="inference", requests="100000")
    assert (
        as_given(wl, find_gpu("H100"), 8, 1, 3200, None).estimate is None
    )  # 140 GB of weights on one GPU
    found = search_inference(wl, find_gpu("H100"), 8, 1, 3200, None, max_batch=64)
    assert found.settings is not None and found.settings.tensor_parallel >= 2
    assert found.settings.micro_batch > 1 and found.settings.describe().startswith("TP ")


def test_70b_inference_cost_falls_as_the_batch_may_grow() -> None:
    wl = workload_from_options(model="llama-3.1-70b", task="inference", requests="100000")
    offers = [
        offer("aws", "us-east-1", "p5.48xlarge", "H100", 8, 98.0),
        offer("aws", "us-east-1", "p5en.48xlarge", "H200", 8, 110.0),
    ]
    costs = []
    for batch in (1, 8, 64):
        request = PlanRequest(max_nodes=1, billings=("on-demand",), max_batch=batch)
        plan = plan_offers(
            offers,
            EstimatorModel(wl, max_batch=batch),
            request,
            spot=load_spot_defaults(),
            reserved={},
            startup=NO_STARTUP,
        )
        h100 = next(o for o in plan.options if o.gpu == "H100")  # 8×H100 is offered (with TP)
        assert h100.settings is not None and h100.settings["tensor_parallel"] >= 2
        costs.append(plan.options[0].cost_usd)
    assert costs[0] > costs[1] > costs[2]


def test_instances_have_their_own_network() -> None:
    p5 = instance_network("aws", "p5.48xlarge")
    assert (
        p5.inter_node_gbit_s == 3200
        and p5.fabric == "efa"
        and p5.rdma_resource == ("vpc.amazonaws.com/efa", 32)
    )
    nc = instance_network("azure", "Standard_NC24ads_A100_v4")
    assert nc.inter_node_gbit_s == 20 and nc.fabric == "tcp" and "learn.microsoft.com" in nc.source
    # sustained baseline, not the "up to 10" burst ceiling
    assert instance_network("aws", "g5.xlarge").inter_node_gbit_s == 2.5
    assert instance_network("aws", "g5.xlarge").burst_gbit_s == 10
    assert instance_network("aws", "g5.48xlarge").fabric == "efa"
    unknown = instance_network("lambda", "gpu_8x_h100_sxm5")
    assert unknown is UNKNOWN and not unknown.known and "conservative" in unknown.describe()


def test_zero3_across_1_gpu_instances_is_timed_with_their_own_network() -> None:
    # global batch 96: 3 single-GPU nodes run it (the default 128 does not split over 3 GPUs)
    wl = workload_from_options(
        model="llama-3.1-8b", task="finetune", tokens="1B", zero="3", global_batch=96
    )
    offers = [offer("azure", "eastus", "Standard_NC24ads_A100_v4", "A100-80GB-PCIE", 1, 3.67)]
    common = {"max_nodes": 3, "billings": ("on-demand",), "search_settings": False}
    # 3 nodes need ~93% of the memory: no headroom, so the network is what this test sees
    spot, model = load_spot_defaults(), EstimatorModel(wl, search=False, memory_headroom=0.0)
    own = plan_offers(
        offers, model, PlanRequest(**common), spot=spot, reserved={}, startup=NO_STARTUP
    )
    fast = plan_offers(
        offers,
        model,
        PlanRequest(**common, inter_node_gbit_s=400),
        spot=spot,
        reserved={},
        startup=NO_STARTUP,
    )
    three = next(o for o in own.options if o.nodes == 3)
    three_fast = next(o for o in fast.options if o.nodes == 3)
    # SkyPilot's Azure NICs lack accelerated networking: not the published 20 Gbit/s
    assert three.network.startswith("10 Gbit/s (as launched") and three_fast.network.startswith(
        "400 Gbit/s"
    )
    assert three.hours > 2 * three_fast.hours  # weight all-gathers over 10 Gbit/s, not 400


def test_fixed_costs_are_added_to_every_option() -> None:
    offers = [offer("aws", "us-east-1", "p5.48xlarge", "H100", 8, 98.0)]
    request = PlanRequest(
        max_nodes=2,
        billings=("on-demand",),
        provision_hours=0.5,
        startup_hours=0.0,
        download_gbit_s=8.0,
    )
    plan = plan_offers(
        offers, EstimatorModel(LORA_8B), request, spot=load_spot_defaults(), reserved={}
    )
    for o in plan.options:
        # 0.5 h provisioning + (8 GiB image + 16 GB bf16 weights) at 8 Gbit/s
        download_h = (8 * 2**30 + 8.03e9 * 2) * 8 / 8e9 / 3600  # Llama 3.1 8B: 8.03 B parameters
        assert o.fixed_hours == pytest.approx(0.5 + download_h, rel=0.01)
        assert o.hours == pytest.approx(o.failure_free_hours + o.fixed_hours)
        assert o.cost_usd == pytest.approx(o.price_usd_per_hour * o.hours)
    assert not any("fixed costs" in a for a in plan.assumptions)  # all three were given
    default = plan_offers(
        offers,
        EstimatorModel(LORA_8B),
        PlanRequest(max_nodes=1, billings=("on-demand",)),
        spot=load_spot_defaults(),
        reserved={},
    )
    assert any("fixed costs" in a and "placeholder" in a for a in default.assumptions)
    assert default.options[0].fixed_hours > 0


def test_every_option_runs_the_same_global_batch() -> None:
    wl = workload_from_options(model="llama-3.1-8b", task="lora", tokens="2B")
    offers = [
        offer("aws", "us-east-1", "g6e.2xlarge", "L40S", 1, 2.24, spot=0.9),
        offer("aws", "us-east-1", "g6e.12xlarge", "L40S", 4, 10.49, spot=4.0),
        offer("aws", "us-east-1", "p4d.24xlarge", "A100-40GB", 8, 32.77, spot=12.0),
    ]
    plan = plan_offers(
        offers,
        EstimatorModel(wl),
        PlanRequest(max_nodes=5),
        spot=load_spot_defaults(),
        reserved={},
        startup=NO_STARTUP,
    )
    assert plan.options
    for o in plan.options:
        s = o.settings
        assert s is not None and s["global_batch"] == 128  # the fine-tuning default, every option
        assert s["micro_batch"] * s["accumulation"] * s["data_parallel"] == 128
        assert s["data_parallel"] == o.total_gpus
    assert any(
        a.startswith("one recipe for every option: global batch 128") for a in plan.assumptions
    )
    # 3 or 5 single-GPU nodes cannot split 128 sequences: said so, not silently changed
    batch = [r for r in plan.rejected if r.kind == "batch"]
    assert batch and "3, 5 node(s)" in batch[0].reason


def test_context_parallel_ranks_are_not_data_parallel_copies() -> None:
    """With --context-parallel 2 on 8 GPUs, 4 are data-parallel: a global batch of 12 splits
    over 4 replicas (it would not over 8)."""
    wl = workload_from_options(
        model="llama-3.1-8b",
        task="finetune",
        tokens="2B",
        seq_len=32768,
        context_parallel=2,
        global_batch=12,
    )
    offers = [offer("aws", "us-east-1", "p5.48xlarge", "H100", 8, 98.32, spot=40.0)]
    plan = plan_offers(
        offers,
        EstimatorModel(wl),
        PlanRequest(max_nodes=1),
        spot=load_spot_defaults(),
        reserved={},
        startup=NO_STARTUP,
    )
    assert plan.options
    for o in plan.options:
        s = o.settings
        assert s is not None and s["data_parallel"] * 2 == o.total_gpus
        assert s["micro_batch"] * s["accumulation"] * s["data_parallel"] == 12


# The plan keeps memory free: at least the headroom of usable memory after every modelled term.
@pytest.mark.parametrize(
    ("gpu", "headroom"),
    [
        ("A100", 0.08),  # 40 GiB: LoRA 8B fits only with ZeRO-3, close to the limit
        ("L40S", 0.08),  # the 44.71 of 44.99 GiB row
        ("A100-80GB-PCIE", 0.08),  # a datasheet capacity (no nvidia-smi figure known)
        ("L40S", 0.0),  # none asked: may fill the usable memory
    ],
)
def test_every_option_keeps_the_memory_headroom(gpu: str, headroom: float) -> None:
    from gpuwise.estimate.capacity import gpu_memory

    offers = [offer("aws", "us-east-1", "x", gpu, 8, 10.0)]
    plan = plan_offers(
        offers,
        EstimatorModel(LORA_8B, memory_headroom=headroom),
        PlanRequest(max_nodes=8, billings=("on-demand",), memory_headroom=headroom),
        spot=load_spot_defaults(),
        reserved={},
        startup=NO_STARTUP,
    )
    mem = gpu_memory(find_gpu(gpu))
    assert plan.options
    for o in plan.options:
        used = o.per_gpu_memory_gib - mem.context_gib  # what tensors hold, of the usable memory
        assert used <= (1 - headroom) * mem.usable_gib + 1e-9
        assert o.capacity_source == mem.source and o.memory_limit_gib is not None
        assert o.memory_alert == (o.memory_share > 0.85)
    if headroom:
        assert max(o.per_gpu_memory_gib for o in plan.options) > 0.5 * mem.total_gib


def test_a_datasheet_capacity_and_the_memory_alert_are_said() -> None:
    def one(o: Offer, wl: Workload = LORA_8B):  # type: ignore[no-untyped-def]
        return plan_offers(
            [o],
            EstimatorModel(wl),
            PlanRequest(max_nodes=1, billings=("on-demand",)),
            spot=load_spot_defaults(),
            reserved={},
            startup=NO_STARTUP,
        )

    plan = one(offer("azure", "eastus", "Standard_NC24ads_A100_v4", "A100-80GB-PCIE", 1, 3.67))
    w = plan.options[0]
    assert w.capacity_source == "datasheet" and w.to_dict()["capacity_source"] == "datasheet"
    text = "\n".join(plan.explanation)
    assert "80.0 GiB is the datasheet figure" in text
    assert not w.memory_alert and "GpuwiseGpuMemoryHigh" not in text  # 60% of 80 GiB
    # 8×A10G 24 GB, 2k tokens: ZeRO-2 with full recompute fills the memory up to the headroom
    # (~92%): the alert is said
    short = LORA_8B.with_changes(seq_len=2048)
    plan = one(offer("aws", "us-east-1", "g5.48xlarge", "A10G", 8, 16.3), short)
    w = plan.options[0]
    text = "\n".join(plan.explanation)
    assert w.capacity_source == "published" and "datasheet" not in text
    assert w.memory_alert and 0.85 < w.memory_share <= 0.93
    assert "above the shipped 85% alert (GpuwiseGpuMemoryHigh)" in text
    assert "amtool silence add alertname=GpuwiseGpuMemoryHigh" in text


def test_the_alert_threshold_is_the_shipped_rules() -> None:
    import re
    from pathlib import Path

    from gpuwise.planner.values import MEMORY_ALERT_SHARE

    root = Path(__file__).resolve().parents[2] / "deploy"
    for rules in ("prometheus/gpuwise-rules.yml", "kubernetes/monitoring/prometheusrule.yaml"):
        text = (root / rules).read_text()
        found = set(re.findall(r"memory_used_bytes / \w+memory_total_bytes > ([0-9.]+)", text))
        assert found == {str(MEMORY_ALERT_SHARE)}, rules
