"""Write this folder's gpuhunt catalogs with gpuhunt's own writer (``gpuhunt._internal.storage.dump``).

Run by hand where gpuhunt is installed (``pip install gpuwise[gpuhunt]``); the tests read the CSV
files it wrote and do not need gpuhunt. Each item is built as the gpuhunt provider named beside it
builds it (flags, ``cpu_arch``, ``provider_data``, spot variants); the specs and prices are the
SkyPilot catalog rows named beside them, except where a comment says "test value". See README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuhunt import AcceleratorVendor, CatalogItem, CPUArchitecture
from gpuhunt._internal.storage import dump

NVIDIA = AcceleratorVendor.NVIDIA


def gcp() -> list[CatalogItem]:
    # providers/gcp.py: one item per capacity type (on-demand, spot, DWS calendar mode), location =
    # zone, provider_data.is_dws_calendar_mode, then _set_flags: gcp-dws-calendar-mode, gcp-a4.
    # SkyPilot v8 gcp: a4-highgpu-8g host 224 vCPU / 3968 GiB, price 0.0 + B200 x8 row 90.216
    # (spot 32.6064) in us-central1-b; a2-highgpu-1g host + A100 x1 in us-central1-a.
    def item(name, zone, price, cpu, mem, count, gpu, gmem, spot, calendar=False):  # type: ignore[no-untyped-def]
        flags = []
        if calendar:
            flags.append("gcp-dws-calendar-mode")
        if name.startswith("a4-"):
            flags.append("gcp-a4")
        return CatalogItem(
            provider="gcp",
            instance_name=name,
            location=zone,
            price=price,
            cpu=cpu,
            memory=mem,
            gpu_vendor=NVIDIA,
            gpu_count=count,
            gpu_name=gpu,
            gpu_memory=gmem,
            spot=spot,
            disk_size=None,
            flags=flags,
            provider_data={"is_dws_calendar_mode": calendar},
        )

    return [
        item("a2-highgpu-1g", "us-central1-a", 3.67339, 12, 85.0, 1, "A100", 40.0, False),
        item("a2-highgpu-1g", "us-central1-a", 1.80385, 12, 85.0, 1, "A100", 40.0, True),
        item("a4-highgpu-8g", "us-central1-b", 90.216, 224, 3968.0, 8, "B200", 180.0, False),
        item("a4-highgpu-8g", "us-central1-b", 32.6064, 224, 3968.0, 8, "B200", 180.0, True),
        # test value: no public calendar-mode price was at hand
        item("a4-highgpu-8g", "us-central1-b", 60.0, 224, 3968.0, 8, "B200", 180.0, False, True),
    ]


def lambdalabs() -> list[CatalogItem]:
    # providers/lambdalabs.py: an NVIDIA superchip gets cpu_arch ARM and the lambda-arm flag;
    # memory = memory_gib * 1.074. SkyPilot v8 lambda: gpu_1x_gh200 64 vCPU, 432 GiB, 2.29 $/h,
    # 96 GB GPU (98304 MiB); gpu_1x_a100_sxm4 30 vCPU, 200 GiB, 40 GB, 1.99 $/h (europe-central-1 row).
    def item(name, region, price, cpu, mem_gib, gpu, gmem, arm):  # type: ignore[no-untyped-def]
        return CatalogItem(
            provider="lambdalabs",
            instance_name=name,
            location=region,
            price=price,
            cpu_arch=CPUArchitecture.ARM if arm else CPUArchitecture.X86,
            cpu=cpu,
            memory=float(mem_gib) * 1.074,
            gpu_vendor=NVIDIA,
            gpu_count=1,
            gpu_name=gpu,
            gpu_memory=gmem,
            spot=False,
            disk_size=None,
            flags=["lambda-arm"] if arm else [],
        )

    return [
        item("gpu_1x_gh200", "europe-central-1", 2.29, 64, 432, "GH200", 96.0, True),
        item("gpu_1x_gh200", "asia-south-1", 2.29, 64, 432, "GH200", 96.0, True),
        item("gpu_1x_a100_sxm4", "europe-central-1", 1.99, 30, 200, "A100", 40.0, False),
    ]


def oci() -> list[CatalogItem]:
    # providers/oci.py: an on-demand item, and for preemptible shapes a copy with spot=True, the
    # price halved and the oci-spot flag. SkyPilot v8 oci: VM.GPU3.1 (V100, 12 OCPU-vCPU, 90 GB)
    # 2.95 $/h in af-casablanca-1; BM.GPU.H100.8 80 $/h (no preemptible price upstream).
    def item(name, price, cpu, mem, count, gpu, gmem, spot):  # type: ignore[no-untyped-def]
        return CatalogItem(
            provider="oci",
            instance_name=name,
            location="af-casablanca-1",
            price=price * (0.5 if spot else 1.0),
            cpu=cpu,
            memory=mem,
            gpu_vendor=NVIDIA,
            gpu_count=count,
            gpu_name=gpu,
            gpu_memory=gmem,
            spot=spot,
            disk_size=None,
            flags=["oci-spot"] if spot else [],
        )

    return [
        item("VM.GPU3.1", 2.95, 12, 90.0, 1, "V100", 16.0, False),
        item("VM.GPU3.1", 2.95, 12, 90.0, 1, "V100", 16.0, True),
        item("BM.GPU.H100.8", 80.0, 224, 2048.0, 8, "H100", 80.0, False),
    ]


def runpod() -> list[CatalogItem]:
    # providers/runpod.py: pod offers without flags; Instant Cluster offers with the
    # runpod-cluster flag, price = clusterPrice * maxGpuCount, provider_data.pod_counts 2..8;
    # CPU offers with runpod-cpu and gpu_count 0. SkyPilot v8 runpod: 1x_A100-80GB_SECURE 8 vCPU,
    # 117 GiB, 1.39 $/h in AP-IN-1 (recorded/skypilot/v8/runpod). Test values: the cluster and
    # CPU offers (names, specs and prices).
    pod = CatalogItem(
        provider="runpod",
        instance_name="NVIDIA A100 80GB PCIe",
        location="AP-IN-1",
        price=1.39,
        cpu=8,
        memory=117.0,
        gpu_vendor=NVIDIA,
        gpu_count=1,
        gpu_name="A100",
        gpu_memory=80.0,
        spot=False,
        disk_size=None,
    )
    cluster = CatalogItem(
        provider="runpod",
        instance_name="NVIDIA H100 80GB HBM3",
        location="US-KS-2",
        price=2.99 * 8,
        cpu=128,
        memory=1500.0,
        gpu_vendor=NVIDIA,
        gpu_count=8,
        gpu_name="H100",
        gpu_memory=80.0,
        spot=False,
        disk_size=None,
        flags=["runpod-cluster"],
        provider_data={"pod_counts": list(range(2, 9))},
    )
    cpu = CatalogItem(
        provider="runpod",
        instance_name="cpu3c-2-4",
        location="CA-MTL-1",
        price=0.06,
        cpu=2,
        memory=4.0,
        gpu_count=0,
        gpu_name=None,
        gpu_memory=None,
        spot=False,
        disk_size=20.0,
        flags=["runpod-cpu"],
    )
    return [pod, cluster, cpu]


def main(folder: Path) -> None:
    for name, items in (
        ("gcp", gcp()),
        ("lambdalabs", lambdalabs()),
        ("oci", oci()),
        ("runpod", runpod()),
    ):
        dump(items, str(folder / f"{name}.csv"))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
