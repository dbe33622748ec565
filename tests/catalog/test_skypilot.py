"""SkyPilot vms.csv quirks, each on a tiny table whose right answer is known."""

from __future__ import annotations

import re

import pytest

from gpuwise.catalog.skypilot import read_vms_csv
from gpuwise.errors import CatalogError

AWS_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch"
GCP_HEADER = "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice"
LAMBDA_HEADER = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice"
)
RUNPOD_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Region,SpotPrice,Price,AvailabilityZone,GpuInfo"
H100_INFO = "\"{'Gpus': [{'Name': 'H100', 'Manufacturer': 'NVIDIA', 'Count': 8, 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 655360}\""


def read(text: str, cloud: str = "aws"):  # type: ignore[no-untyped-def]
    return read_vms_csv(text, cloud, "test.csv", as_of="2026-11")


def test_gcp_host_and_gpu_rows_join_within_a_zone() -> None:
    text = "\n".join(
        [
            GCP_HEADER,
            "a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,0.73948,0.36975",
            "a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-b,0.73948,0.36975",  # no A100 row in zone b
            ",,,A100,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 40960}}]},us-central1,us-central1-a,2.93391,1.4341",
            ",,,A100,2,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 40960}}]},us-central1,us-central1-a,5.86782,2.8682",
        ]
    )
    offers = read(text, "gcp")
    assert len(offers) == 1
    (o,) = offers
    assert (o.instance_type, o.gpu, o.gpu_count, o.zone) == (
        "a2-highgpu-1g",
        "A100",
        1.0,
        "us-central1-a",
    )
    # the SOURCE.md worked example: host 0.73948 + A100×1 2.93391 = 3.67339; spot 0.36975 + 1.4341
    assert o.on_demand_usd_per_hour == pytest.approx(3.67339)
    assert o.spot_usd_per_hour == pytest.approx(1.80385)
    assert (o.vcpus, o.memory_gib, o.gpu_memory_gib) == (12.0, 85.0, 40.0)


def test_gcp_n1_host_takes_each_attachable_gpu_count() -> None:
    text = "\n".join(
        [
            GCP_HEADER,
            "n1-standard-8,8.0,30.0,,,,asia-east1,asia-east1-a,0.44,0.07",
            "n1-standard-4,4.0,15.0,,,,asia-east1,asia-east1-a,0.22,0.03",  # not the 8-vCPU default host
            ",,,T4,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 16384}}]},asia-east1,asia-east1-a,0.35,0.1383",
            ",,,T4,2,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 16384}}]},asia-east1,asia-east1-a,0.7,0.2766",
            ",,,T4,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 16384}}]},asia-east1,asia-east1-c,0.35,0.1383",
        ]
    )
    offers = sorted(read(text, "gcp"), key=lambda o: o.gpu_count)
    assert [(o.instance_type, o.gpu_count, o.zone) for o in offers] == [
        ("n1-standard-8", 1.0, "asia-east1-a"),
        ("n1-standard-8", 2.0, "asia-east1-a"),
    ]
    assert offers[1].on_demand_usd_per_hour == pytest.approx(0.44 + 0.7)


def test_gcp_a4_host_priced_zero_carries_whole_price_on_gpu_row() -> None:
    text = "\n".join(
        [
            GCP_HEADER,
            "a4-highgpu-8g,224.0,3968.0,,,,us-central1,us-central1-b,0.0,0.0",
            ",,,B200,8,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 184320}}]},us-central1,us-central1-b,64.44,35.5",
        ]
    )
    (o,) = read(text, "gcp")
    assert (o.gpu, o.gpu_count, o.on_demand_usd_per_hour, o.spot_usd_per_hour) == (
        "B200",
        8.0,
        64.44,
        35.5,
    )


@pytest.mark.parametrize(
    ("name", "price", "expected"),
    [
        (
            "tpu-v4-8",
            "12.88",
            ("TPU-v4", 4.0, 12.88),
        ),  # v4 names count TensorCores: 8 cores = 4 chips
        ("tpu-v5litepod-8", "9.6", ("TPU-v5e", 8.0, 9.6)),  # v5e names count chips
        ("tpu-v6e-8", "700.0", None),  # 700.0 is SkyPilot's "not offered" sentinel: dropped
    ],
)
def test_gcp_tpu_rows(name: str, price: str, expected: tuple[str, float, float] | None) -> None:
    text = f"{GCP_HEADER}\n,,,{name},1,,us-central2,us-central2-b,{price},{price}\n"
    offers = read(text, "gcp")
    if expected is None:
        assert offers == []
    else:
        (o,) = offers
        assert (o.gpu, o.gpu_count, o.on_demand_usd_per_hour) == expected


def test_gpuinfo_is_a_python_literal_never_evaluated() -> None:
    evil = "\"__import__('os').system('touch /tmp/gpuwise-pwned')\""
    text = f"{AWS_HEADER}\np5.48xlarge,H100,8.0,192.0,2048.0,{evil},98.32,40.0,us-east-1,use1-az1,x86_64\n"
    (o,) = read(text)
    assert o.gpu_memory_gib is None  # unreadable GpuInfo: memory unknown, row kept


def test_columns_are_found_by_header_name_not_position() -> None:
    aws = f"{AWS_HEADER}\np5.48xlarge,H100,8.0,192.0,2048.0,{H100_INFO},98.32,40.0,us-east-1,use1-az1,x86_64\n"
    lam = f"{LAMBDA_HEADER}\ngpu_8x_h100_sxm5,H100,8.0,208.0,1800.0,23.92,us-east-1,{H100_INFO},\n"
    (a,), (b,) = read(aws), read(lam, "lambda")
    assert (a.on_demand_usd_per_hour, a.vcpus, a.gpu_memory_gib, a.zone) == (
        98.32,
        192.0,
        80.0,
        "use1-az1",
    )
    assert (b.on_demand_usd_per_hour, b.vcpus, b.gpu_memory_gib, b.zone, b.spot_usd_per_hour) == (
        23.92,
        208.0,
        80.0,
        None,
        None,
    )


def test_runpod_gb_in_the_mib_field_is_read_as_gb() -> None:
    info = "\"{'Gpus': [{'Name': 'A100-80GB', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 80}}]}\""
    text = f"{RUNPOD_HEADER}\n1x_A100-80GB_SECURE,A100-80GB,1.0,8.0,80.0,CA,0.89,1.64,CA-MTL-1,{info}\n"
    (o,) = read(text, "runpod")
    assert (o.gpu, o.gpu_memory_gib, o.on_demand_usd_per_hour, o.spot_usd_per_hour) == (
        "A100-80GB",
        80.0,
        1.64,
        0.89,
    )


@pytest.mark.parametrize(
    ("price", "spot", "expected"),
    [
        ("", "29.0", (None, 29.0)),  # capacity-block only (p5e): no on-demand, spot kept
        ("0", "29.0", (None, 29.0)),  # $0 means the same
        ("", "", None),  # nothing to buy: dropped
    ],
)
def test_reservation_only_rows(
    price: str, spot: str, expected: tuple[float | None, float | None] | None
) -> None:
    text = f"{AWS_HEADER}\np5e.48xlarge,H200,8.0,192.0,2048.0,,{price},{spot},us-east-2,use2-az3,x86_64\n"
    offers = read(text)
    assert ([(o.on_demand_usd_per_hour, o.spot_usd_per_hour) for o in offers] or [None]) == [
        expected
    ]


def test_aws_one_offer_per_zone_with_that_zones_spot_price() -> None:
    text = "\n".join(
        [
            AWS_HEADER,
            f"p5.48xlarge,H100,8.0,192.0,2048.0,{H100_INFO},55.04,55.04,us-east-1,use1-az1,x86_64",
            f"p5.48xlarge,H100,8.0,192.0,2048.0,{H100_INFO},55.04,30.10,us-east-1,use1-az2,x86_64",
        ]
    )
    by_zone = {o.zone: o for o in read(text)}
    assert by_zone["use1-az2"].spot_usd_per_hour == 30.10
    assert by_zone["use1-az2"].has_spot_discount
    assert not by_zone["use1-az1"].has_spot_discount  # spot == on-demand is no discount
    assert by_zone["use1-az1"].spot_usd_per_gpu_hour is None


@pytest.mark.parametrize(
    ("cloud", "instance", "accel", "count", "expected"),
    [
        ("lambda", "gpu_1x_a100", "A100", "1.0", ("A100-PCIE", 1.0)),  # Lambda's plain a100 is PCIe
        ("lambda", "gpu_1x_a100_sxm4", "A100", "1.0", ("A100", 1.0)),
        ("lambda", "gpu_4x_a100", "A100", "4.0", ("A100-PCIE", 4.0)),
        ("lambda", "gpu_8x_a100", "A100", "8.0", ("A100", 8.0)),  # '8x A100 (40 GB SXM4)', not PCIe
        (
            "azure",
            "Standard_ND96isr_H100_v5",
            "H100",
            "12",
            ("H100", 8.0),
        ),  # the catalog's count 12 is wrong
        ("azure", "Standard_NC40ads_H100_v5", "H100", "1", ("H100-NVL", 1.0)),
        ("gcp", "whatever", "H100-MEGA", "8", ("H100", 8.0)),  # alias
    ],
)
def test_ambiguous_accelerator_names_resolve_to_the_real_model(
    cloud: str, instance: str, accel: str, count: str, expected: tuple[str, float]
) -> None:
    text = f"{AWS_HEADER}\n{instance},{accel},{count},8,64,,2.0,,r1,,x86_64\n"
    (o,) = read_vms_csv(text, cloud, "t.csv", as_of="x")
    assert (o.gpu, o.gpu_count) == expected


def test_unknown_accelerators_keep_the_cloud_name() -> None:
    text = f"{AWS_HEADER}\ninf2.xlarge,Inferentia2,1.0,4.0,16.0,,0.7582,0.1,us-east-1,use1-az1,x86_64\n"
    (o,) = read(text)
    assert o.gpu == "Inferentia2"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("p5,H100,8,1,1,,abc,,us-east-1,z,x86_64", "row 2, column Price: 'abc' is not a price"),
        ("p5,H100,8,1,1,,-3,,us-east-1,z,x86_64", "row 2, column Price: '-3' is not a valid price"),
        (
            "p5,H100,8,1,1,,nan,,us-east-1,z,x86_64",
            "row 2, column Price: 'nan' is not a valid price",
        ),
        (
            "p5,H100,-8,1,1,,3,,us-east-1,z,x86_64",
            "row 2, column AcceleratorCount: '-8' must be a positive number",
        ),
        ("p5,H100,8,1,1,,3,,us-east-1,z,x86_64,extra", "row 2: more cells than columns"),
    ],
)
def test_malformed_rows_name_file_row_and_column(body: str, message: str) -> None:
    with pytest.raises(CatalogError, match=re.escape(message)) as info:
        read(f"{AWS_HEADER}\n{body}\n")
    assert str(info.value).startswith("test.csv, row 2")


def test_missing_column_and_empty_file() -> None:
    with pytest.raises(CatalogError, match="missing column.*Price"):
        read("InstanceType,AcceleratorName,AcceleratorCount,Region\np5,H100,8,us-east-1\n")
    with pytest.raises(CatalogError, match="empty file"):
        read("")
