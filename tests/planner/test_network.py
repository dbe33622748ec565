"""The network table: sustained figures, sourced rows, and the fabric only where a launch gets it."""

from __future__ import annotations

import pytest

from gpuwise.errors import CatalogError
from gpuwise.planner.network import for_tier, instance_network, parse_instance_network


@pytest.mark.parametrize(
    ("cloud", "itype", "sustained", "burst"),
    [
        ("aws", "g6e.xlarge", 2.5, 20),  # "up to 20" is a burst ceiling
        ("aws", "g6e.2xlarge", 5, 20),
        ("aws", "g5.4xlarge", 10, 25),
        ("aws", "g6.2xlarge", 5, 10),
        ("aws", "g4dn.xlarge", 5, 25),
        ("aws", "g4dn.8xlarge", 50, None),  # 50, not the old 25, and EFA
        ("aws", "p5.4xlarge", 100, None),  # was missing (10 Gbit/s fallback)
        ("gcp", "a3-highgpu-1g", 25, None),
        ("gcp", "a3-highgpu-4g", 100, None),
        ("azure", "Standard_NC40ads_H100_v5", 40, None),
    ],
)
def test_rows_time_with_the_sustained_figure(
    cloud: str, itype: str, sustained: float, burst: float | None
) -> None:
    net = instance_network(cloud, itype)
    assert net.known and net.inter_node_gbit_s == sustained and net.burst_gbit_s == burst
    assert "https://" in net.source
    # a dated reading, or said plainly that the page was not re-read
    assert (
        "(read 2026-" in net.source or "(figure not re-read from the page: check it)" in net.source
    )


def test_fabric_rows_need_the_best_tier() -> None:
    p5 = instance_network("aws", "p5.48xlarge")
    assert p5.needs_best_tier and for_tier(p5, "best") is p5
    standard = for_tier(p5, "standard")  # no EFA: the default network, not published → 10
    assert not standard.needs_best_tier and standard.inter_node_gbit_s == 10
    assert not standard.known and "not published" in standard.source


def test_azure_infiniband_is_timed_on_ethernet_outside_one_scale_set() -> None:
    nd = instance_network("azure", "Standard_ND96isr_H100_v5")
    assert nd.fabric == "infiniband" and nd.scope == "scale-set"
    launched = for_tier(nd, "best")  # SkyPilot launches separate VMs: no InfiniBand between them
    assert launched.inter_node_gbit_s == 80 and launched.fabric == "tcp"


def test_azure_nd_a100_has_its_ethernet_figure() -> None:
    # it fell back to the conservative 10 Gbit/s: Microsoft Learn gives 24,000 Mbps
    for itype in ("Standard_ND96asr_v4", "Standard_ND96amsr_A100_v4"):
        assert instance_network("azure", itype).standard_gbit_s == 24
        assert for_tier(instance_network("azure", itype), "best").inter_node_gbit_s == 24


def test_nebius_infiniband_only_on_gpu_cluster_platforms() -> None:
    assert instance_network("nebius", "gpu-h100-sxm_8gpu-128vcpu-1600gb").scope == "gpu-cluster"
    # B200 hosts too (it fell back to 10 Gbit/s): SkyPilot 0.14.1 builds their GPU cluster
    b200 = instance_network("nebius", "gpu-b200-sxm_8gpu-160vcpu-1792gb")
    assert b200.known and b200.inter_node_gbit_s == 3200 and b200.scope == "gpu-cluster"
    assert not instance_network("nebius", "gpu-l40s-a_1gpu-16vcpu-64gb").known


def test_a_row_without_a_source_url_or_date_is_refused() -> None:
    header = (
        "cloud,instance_pattern,inter_node_gbit_s,burst_gbit_s,fabric,fabric_scope,"
        "standard_gbit_s,rdma_resource,intra_node,source,read_on,note\n"
    )
    with pytest.raises(CatalogError, match="source URL"):
        parse_instance_network(header + "aws,x,10,,tcp,any,10,,pcie,a blog,2026-11,\n")
    with pytest.raises(CatalogError, match="fabric_scope"):
        parse_instance_network(header + "aws,x,10,,tcp,moon,10,,pcie,https://x,2026-11,\n")


# What SkyPilot 0.14.1 builds (read from its provisioners; checked by running them in
# test_skypilot_engine.py): the plan times that network, not the datasheet's fabric.
@pytest.mark.parametrize(
    ("cloud", "itype", "efa", "gbit", "fabric"),
    [
        ("gcp", "a3-highgpu-8g", "one", 800, "gpudirect-tcpx"),  # the 4 GPU NICs, not the host NIC
        ("gcp", "a3-megagpu-8g", "one", 200, "tcp"),  # best raises ValueError: the host NIC
        ("gcp", "a3-ultragpu-8g", "one", 200, "tcp"),
        ("gcp", "a4-highgpu-8g", "one", 200, "tcp"),
        ("aws", "p5.48xlarge", "one", 100, "efa"),  # one of 32 interfaces
        ("aws", "p5.48xlarge", "all", 3200, "efa"),  # aws.use_internal_ips in SkyPilot's config
        ("aws", "p5en.48xlarge", "one", 200, "efa"),  # one of 16
        ("aws", "p6-b200.48xlarge", "one", 400, "efa"),  # one of 8
        ("aws", "p4d.24xlarge", "one", 100, "efa"),  # one of 4
        ("aws", "g5.48xlarge", "one", 100, "efa"),  # one interface anyway
        ("azure", "Standard_NC96ads_A100_v4", "one", 10, "unknown"),  # no accelerated networking
        ("azure", "Standard_ND96isr_H100_v5", "one", 10, "unknown"),
    ],
)
def test_the_plan_times_the_network_skypilot_builds(
    cloud: str, itype: str, efa: str, gbit: float, fabric: str
) -> None:
    from gpuwise.planner.network import as_launched

    net = as_launched(cloud, for_tier(instance_network(cloud, itype), "best"), efa)  # type: ignore[arg-type]
    assert (net.inter_node_gbit_s, net.fabric) == (gbit, fabric)
    if cloud == "aws":  # a Kubernetes pod still asks for every EFA device
        assert net.rdma_resource == instance_network(cloud, itype).rdma_resource


def test_one_rule_for_which_gcp_nics_count() -> None:
    # GPU-to-GPU NICs only, on every A3/A4 type: the host NIC is the standard figure
    for itype, gpu_nics in (
        ("a3-highgpu-8g", 800),
        ("a3-megagpu-8g", 1600),
        ("a3-ultragpu-8g", 3200),
        ("a4-highgpu-8g", 3200),
    ):
        net = instance_network("gcp", itype)
        assert net.inter_node_gbit_s == gpu_nics and net.standard_gbit_s == 200, itype
