"""Each doctor check's ok / warn / fail (and skip) paths, fed recorded machine text."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuwise.doctor import (
    CommandOutput,
    DiskUsage,
    DoctorOptions,
    FixtureProbe,
    GpuInfo,
    parse_nvidia_smi_q,
    run_doctor,
)
from tests.doctor.machines import (
    GIB,
    Change,
    cpu_box,
    fixture_text,
    healthy_node,
    with_,
    with_env,
    with_files,
    with_gpu_text,
    with_torch,
)


def result(
    check: str,
    *changes: Change,
    base: Callable[[], FixtureProbe] = healthy_node,
    options: DoctorOptions | None = None,
):  # type: ignore[no-untyped-def]
    probe = base()
    for change in changes:
        probe = change(probe)
    (r,) = run_doctor(probe, options or DoctorOptions(num_workers=4), only=(check,))
    return r


def nothing(p: FixtureProbe) -> FixtureProbe:
    return p


CASES = [
    # --- nvidia-driver
    (
        "nvidia-driver",
        nothing,
        "ok",
        "driver 550.54.15 (CUDA 12.4), 2 GPU(s): NVIDIA H100 80GB HBM3",
    ),
    (
        "nvidia-driver",
        with_files(
            {
                "/sys/bus/pci/devices/0000:3b:00.0/vendor": "0x10de",
                "/sys/bus/pci/devices/0000:3b:00.0/class": "0x030200",
            }
        ),
        "warn",
        "3 NVIDIA GPU(s) on the PCI bus but NVML sees only 2",
    ),
    (
        "nvidia-driver",
        with_(gpu_info=GpuInfo(nvml_error="NVML Shared Library Not Found")),
        "fail",
        "2 NVIDIA GPU(s) on the PCI bus but NVML cannot be used",
    ),
    (
        "nvidia-driver",
        with_(gpu_info=GpuInfo(nvml_error="Driver/library version mismatch")),
        "fail",
        "kernel module (550.54.15) and the user-space driver libraries differ",
    ),
    (
        "nvidia-driver",
        with_files(
            {
                "/proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.154.05  Thu Dec 28\n"
            }
        ),
        "fail",
        "kernel module 535.154.05 differs from user-space driver 550.54.15",
    ),
    # --- cuda-compat: driver 550.54.15 supports CUDA 12.4
    ("cuda-compat", nothing, "ok", "backward compatibility"),
    ("cuda-compat", with_torch(cuda_runtime="11.8"), "ok", "at or above the runtime's 11.8"),
    ("cuda-compat", with_torch(cuda_runtime="12.6"), "warn", "minor-version compatibility applies"),
    (
        "cuda-compat",
        with_torch(cuda_runtime="13.0"),
        "fail",
        "CUDA driver version is insufficient for CUDA runtime version",
    ),
    ("cuda-compat", with_torch(cuda_runtime=None, version="2.4.1+cpu"), "fail", "CPU-only build"),
    ("cuda-compat", with_torch(installed=False), "skip", "torch is not installed"),
    (
        "cuda-compat",
        with_(gpu_info=GpuInfo(nvml_error="Driver Not Loaded")),
        "skip",
        "see the nvidia-driver check",
    ),
    # --- torch-cuda
    ("torch-cuda", nothing, "ok", "sees 2 GPU(s)"),
    (
        "torch-cuda",
        with_torch(
            cuda_available=False,
            device_count=0,
            cuda_error="CUDA initialization: The NVIDIA driver on your system is too old (found version 11040).",
        ),
        "fail",
        "The NVIDIA driver on your system is too old",
    ),
    ("torch-cuda", with_torch(cuda_runtime=None, cuda_available=False), "fail", "CPU-only build"),
    (
        "torch-cuda",
        with_env(CUDA_VISIBLE_DEVICES=""),
        "ok",
        "sees 2",
    ),  # torch said available: believe it
    (
        "torch-cuda",
        with_torch(installed=False, import_error="No module named 'torch'"),
        "skip",
        "pip install",
    ),
    # --- cuda-visible-devices
    ("cuda-visible-devices", nothing, "ok", "unset: all 2 GPU(s)"),
    ("cuda-visible-devices", with_env(CUDA_VISIBLE_DEVICES="1"), "warn", "torch sees 2"),
    (
        "cuda-visible-devices",
        with_env(CUDA_VISIBLE_DEVICES="GPU-b2a94d17"),
        "warn",
        "selects 1 of 2",
    ),
    (
        "cuda-visible-devices",
        with_env(CUDA_VISIBLE_DEVICES="0,1,2"),
        "fail",
        "index 2 does not exist",
    ),
    ("cuda-visible-devices", with_env(CUDA_VISIBLE_DEVICES="0,0"), "fail", "listed twice"),
    ("cuda-visible-devices", with_env(CUDA_VISIBLE_DEVICES="-1"), "warn", "hides all 2 GPU(s)"),
    (
        "cuda-visible-devices",
        with_env(CUDA_VISIBLE_DEVICES="MIG-4f1a2b3c-5d6e-7f80-9a1b-2c3d4e5f6a7b"),
        "ok",
        "selects one MIG instance",
    ),
    (
        "cuda-visible-devices",
        with_env(CUDA_VISIBLE_DEVICES="0,banana"),
        "fail",
        "'banana' is neither",
    ),
    # --- nccl
    ("nccl", nothing, "ok", "NCCL 2.20.5"),
    ("nccl", with_env(NCCL_SOCKET_IFNAM="eth0"), "warn", "did you mean NCCL_SOCKET_IFNAME"),
    ("nccl", with_env(NCCL_P2P_DISABLE="1"), "warn", "NCCL_P2P_DISABLE=1"),
    ("nccl", with_torch(nccl_version=None), "warn", "multi-GPU training cannot use NCCL"),
    # --- nccl-socket-ifname
    ("nccl-socket-ifname", nothing, "ok", "NCCL_SOCKET_IFNAME is unset"),
    ("nccl-socket-ifname", with_env(NCCL_SOCKET_IFNAME="eth"), "ok", "selects eth0 (up)"),
    ("nccl-socket-ifname", with_env(NCCL_SOCKET_IFNAME="^lo,docker"), "ok", "selects eth0"),
    (
        "nccl-socket-ifname",
        with_env(NCCL_SOCKET_IFNAME="ens5"),
        "fail",
        "no socket interface found",
    ),
    ("nccl-socket-ifname", with_env(NCCL_SOCKET_IFNAME="=eth"), "fail", "matches none"),
    ("nccl-socket-ifname", with_env(NCCL_SOCKET_IFNAME="lo"), "warn", "only loopback"),
    (
        "nccl-socket-ifname",
        (
            lambda p: with_env(NCCL_SOCKET_IFNAME="eth0")(
                with_files({"/sys/class/net/eth0/operstate": "down\n"})(p)
            )
        ),
        "fail",
        "all down",
    ),
    # --- infiniband
    ("infiniband", nothing, "ok", "no InfiniBand/RoCE devices"),
    (
        "infiniband",
        with_files(
            {
                "/sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
                "/sys/class/infiniband/mlx5_0/ports/1/link_layer": "InfiniBand\n",
                "/sys/class/infiniband/mlx5_0/ports/1/rate": "400 Gb/sec (4X NDR)\n",
            }
        ),
        "ok",
        "mlx5_0:1 4: ACTIVE InfiniBand 400 Gb/sec (4X NDR)",
    ),
    (
        "infiniband",
        with_files({"/sys/class/infiniband/mlx5_0/ports/1/state": "1: DOWN\n"}),
        "warn",
        "no port is ACTIVE",
    ),
    ("infiniband", with_env(NCCL_IB_HCA="mlx5_0"), "fail", "no InfiniBand/RoCE device exists"),
    # --- shm (num_workers=4 × 2 GPUs = 8 workers × 512 MiB = 4 GiB wanted)
    ("shm", nothing, "ok", "/dev/shm is 65,536 MiB for 8 DataLoader worker(s)"),
    (
        "shm",
        with_(
            disks={"/": DiskUsage(500 * GIB, 400 * GIB), "/dev/shm": DiskUsage(2 * GIB, 2 * GIB)}
        ),
        "warn",
        "about 4.0 GiB wanted",
    ),
    (
        "shm",
        with_(
            disks={
                "/": DiskUsage(500 * GIB, 400 * GIB),
                "/dev/shm": DiskUsage(64 * 1024**2, 64 * 1024**2),
            }
        ),
        "fail",
        "Docker's 64 MiB default",
    ),
    (
        "shm",
        with_(
            disks={},
            files={
                "/proc/mounts": "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0\n"
            },
        ),
        "fail",
        "Bus error",
    ),
    # --- cpu-workers (4 workers × 2 processes)
    ("cpu-workers", nothing, "ok", "32 CPUs for 8 DataLoader workers"),
    ("cpu-workers", with_(cpus=6), "warn", "use num_workers=2 per process"),
    ("cpu-workers", with_(cpus=1), "fail", "each process needs a core"),
    (
        "cpu-workers",
        with_files({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "400000\n"}),
        "warn",
        "4 CPUs (cgroup quota; 32 visible)",
    ),
    # --- disk (checkpoint dir "/" in these cases)
    ("disk", nothing, "ok", "400.0 GiB free of 500.0 GiB"),
    ("disk", with_(disks={"/": DiskUsage(500 * GIB, 30 * GIB)}), "warn", "under 10% free"),
    ("disk", with_(disks={"/": DiskUsage(500 * GIB, 5 * GIB)}), "fail", "ENOSPC"),
    # --- memory
    ("memory", nothing, "ok", "available of 23.5 GiB"),
    (
        "memory",
        with_files({"/proc/meminfo": fixture_text("host/meminfo-tight.txt")}),
        "fail",
        "OOM-killed",
    ),
    (
        "memory",
        with_files(
            {
                "/proc/meminfo": fixture_text("host/meminfo-tight.txt")
                .replace("65843728", "134217728")
                .replace("2831076", "6291456")
            }
        ),
        "warn",
        "6.0 GiB available of 128.0 GiB (under 10% available)",
    ),
    (
        "memory",
        with_files(
            {
                "/sys/fs/cgroup/memory/memory.limit_in_bytes": f"{16 * GIB}\n",
                "/sys/fs/cgroup/memory/memory.usage_in_bytes": f"{14 * GIB}\n",
            }
        ),
        "fail",
        "2.0 GiB available of 16.0 GiB (container memory limit)",
    ),
    # --- cgroup (captured v1 files: no limits)
    ("cgroup", nothing, "ok", "cgroup v1, no memory limit, no CPU quota"),
    (
        "cgroup",
        with_files({"/sys/fs/cgroup/memory/memory.limit_in_bytes": f"{8 * GIB}\n"}),
        "warn",
        "below the host's",
    ),
    (
        "cgroup",
        with_files(
            {
                "/sys/fs/cgroup/memory/memory.limit_in_bytes": f"{1 * GIB}\n",
                "/sys/fs/cgroup/memory/memory.usage_in_bytes": f"{int(0.95 * GIB)}\n",
            }
        ),
        "fail",
        "exit code 137",
    ),
    (
        "cgroup",
        with_files(
            {
                "/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
                "/sys/fs/cgroup/memory.max": "max\n",
                "/sys/fs/cgroup/cpu.max": "800000 100000\n",
                "/sys/fs/cgroup/memory.current": "123456\n",
                "/sys/fs/cgroup/pids.max": "4096\n",
            }
        ),
        "warn",
        "cgroup v2, no memory limit, CPU quota 8, pids.max 4096",
    ),
    (
        "cgroup",
        with_files(
            {
                "/sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
                "/sys/fs/cgroup/memory.max": "max\n",
                "/sys/fs/cgroup/cpu.max": "max 100000\n",
            }
        ),
        "ok",
        "cgroup v2, no memory limit, no CPU quota",
    ),
    # --- gpu-persistence
    ("gpu-persistence", nothing, "ok", "persistence mode on for all 2 GPU(s)"),
    (
        "gpu-persistence",
        with_gpu_text(
            (
                "Persistence Mode                      : Enabled",
                "Persistence Mode                      : Disabled",
            )
        ),
        "warn",
        "GPU 0 (NVIDIA H100 80GB HBM3): persistence mode is off",
    ),
    # --- gpu-ecc
    ("gpu-ecc", nothing, "ok", "no uncorrectable ECC errors"),
    (
        "gpu-ecc",
        with_gpu_text(
            (
                "            DRAM Uncorrectable            : 0",
                "            DRAM Uncorrectable            : 2",
            )
        ),
        "fail",
        "GPU 0 (NVIDIA H100 80GB HBM3): 2 uncorrectable ECC error(s) since the driver loaded",
    ),
    (
        "gpu-ecc",
        with_gpu_text(
            (
                "        Pending                           : No",
                "        Pending                           : Yes",
            )
        ),
        "fail",
        "a row remap is pending",
    ),
    (
        "gpu-ecc",
        with_gpu_text(
            (
                "        Remapping Failure Occurred        : No",
                "        Remapping Failure Occurred        : Yes",
            )
        ),
        "fail",
        "row remapping failed",
    ),
    (
        "gpu-ecc",
        with_gpu_text(
            (
                "        Uncorrectable Error               : 0",
                "        Uncorrectable Error               : 3",
            )
        ),
        "warn",
        "3 row(s) remapped",
    ),
    (
        "gpu-ecc",
        with_gpu_text(
            (
                "    ECC Mode\n        Current                           : Enabled",
                "    ECC Mode\n        Current                           : Disabled",
            )
        ),
        "warn",
        "ECC is disabled",
    ),
    # --- gpu-xid
    ("gpu-xid", nothing, "ok", "no Xid errors in dmesg"),
    (
        "gpu-xid",
        with_(commands={"dmesg": CommandOutput(0, fixture_text("host/dmesg-xid.txt"))}),
        "fail",
        "Xid 79 ×1 on PCI:0000:2a:00: GPU has fallen off the bus",
    ),
    (
        "gpu-xid",
        with_(
            commands={
                "dmesg": CommandOutput(0, fixture_text("host/dmesg-xid.txt").split("[91502")[0])
            }
        ),
        "warn",
        "Xid 13 ×1",
    ),
    (
        "gpu-xid",
        with_(
            commands={
                "dmesg": CommandOutput(
                    1, "", "dmesg: read kernel buffer failed: Operation not permitted"
                )
            }
        ),
        "skip",
        "not readable",
    ),
    (
        "gpu-xid",
        (
            lambda p: with_files({"/var/log/kern.log": fixture_text("host/dmesg-xid.txt")})(
                with_(commands={})(p)
            )
        ),
        "fail",
        "/var/log/kern.log: Xid 13",
    ),
    # --- gpu-mig
    ("gpu-mig", nothing, "ok", "MIG state consistent"),
    (
        "gpu-mig",
        with_gpu_text(
            (
                "    MIG Mode\n        Current                           : Disabled\n        Pending                           : Disabled",
                "    MIG Mode\n        Current                           : Disabled\n        Pending                           : Enabled",
            )
        ),
        "warn",
        "MIG mode off now, on after the next GPU reset",
    ),
    (
        "gpu-mig",
        with_gpu_text(
            (
                "    MIG Mode\n        Current                           : Disabled\n        Pending                           : Disabled",
                "    MIG Mode\n        Current                           : Enabled\n        Pending                           : Enabled\n    MIG devices                           : None",
            )
        ),
        "fail",
        "no MIG instance exists",
    ),
    # --- gpu-pcie
    ("gpu-pcie", nothing, "ok", "PCIe links at full width"),
    (
        "gpu-pcie",
        with_gpu_text(
            (
                "                Current                   : 16x",
                "                Current                   : 8x",
            )
        ),
        "warn",
        "PCIe link x8 of x16",
    ),
    (
        "gpu-pcie",
        with_gpu_text(
            (
                "                Current                   : 16x",
                "                Current                   : 4x",
            )
        ),
        "fail",
        "PCIe link x4 of x16",
    ),
    (
        "gpu-pcie",
        with_gpu_text(
            (
                "                Current                   : 5\n",
                "                Current                   : 3\n",
            ),
            (
                "        Gpu                               : 0 %",
                "        Gpu                               : 97 %",
            ),
        ),
        "warn",
        "PCIe gen 3 of 5 while busy",
    ),
    (
        "gpu-pcie",
        with_gpu_text(
            (
                "                Current                   : 5\n",
                "                Current                   : 1\n",
            )
        ),
        "ok",
        "idle GPU(s) at a lower PCIe generation",
    ),
    # --- gpu-throttle
    ("gpu-throttle", nothing, "ok", "no thermal or hardware clock throttling"),
    (
        "gpu-throttle",
        with_gpu_text(
            (
                "        SW Thermal Slowdown               : Not Active",
                "        SW Thermal Slowdown               : Active",
            )
        ),
        "warn",
        "software thermal slowdown",
    ),
    (
        "gpu-throttle",
        with_gpu_text(
            (
                "            HW Thermal Slowdown           : Not Active",
                "            HW Thermal Slowdown           : Active",
            ),
            (
                "        HW Slowdown                       : Not Active",
                "        HW Slowdown                       : Active",
            ),
        ),
        "fail",
        "hardware slowdown, hardware thermal slowdown",
    ),
    (
        "gpu-throttle",
        with_gpu_text(
            (
                "        SW Power Cap                      : Not Active",
                "        SW Power Cap                      : Active",
            )
        ),
        "ok",
        "at the power limit",
    ),
]


@pytest.mark.parametrize(
    ("check", "change", "status", "text"),
    CASES,
    ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CASES)],
)
def test_check(check: str, change: Change, status: str, text: str) -> None:
    r = result(check, change, options=DoctorOptions(num_workers=4, checkpoint_dir="/"))
    assert (r.status, r.name) == (status, check), r.finding
    assert text in r.finding + " " + r.fix
    if status in ("warn", "fail"):
        assert r.fix, "a problem must come with its fix"


# gpu-expected reads an option, not the machine: its rows give the option (see test_cli.py too)
EXPECT_CASES = [
    ("gpu-expected", "H100x2", healthy_node, "ok", "2×H100, as expected"),
    ("gpu-expected", "H100x4", healthy_node, "fail", "expected 4×H100, found 2×H100: 2 missing"),
    ("gpu-expected", "L4", healthy_node, "fail", "expected L4, found 2×H100"),
    ("gpu-expected", "H100x8", cpu_box, "fail", "expected 8×H100, found no NVIDIA GPU"),
    ("gpu-expected", None, healthy_node, "skip", "no GPU expected"),
]


@pytest.mark.parametrize(("check", "expect", "base", "status", "text"), EXPECT_CASES)
def test_expected_gpu(
    check: str, expect: str | None, base: Callable[[], FixtureProbe], status: str, text: str
) -> None:
    r = result(check, base=base, options=DoctorOptions(num_workers=4, expect_gpu=expect))
    assert (r.status, r.name) == (status, check), r.finding
    assert text in r.finding
    if status == "fail":
        assert r.fix


def test_every_check_has_ok_and_a_problem_case() -> None:
    from gpuwise.doctor import CHECKS

    for name in CHECKS:
        statuses = {c[2] for c in CASES if c[0] == name} | {
            c[3] for c in EXPECT_CASES if c[0] == name
        }
        assert "ok" in statuses and statuses & {"warn", "fail"}, name


@pytest.mark.parametrize(
    "check",
    [
        "nvidia-driver",
        "cuda-compat",
        "cuda-visible-devices",
        "gpu-persistence",
        "gpu-ecc",
        "gpu-xid",
        "gpu-mig",
        "gpu-pcie",
        "gpu-throttle",
    ],
)
def test_without_a_gpu_gpu_checks_skip_and_say_so(check: str) -> None:
    r = result(check, base=cpu_box)
    assert r.status == "skip"
    assert "no NVIDIA GPU" in r.finding


def test_without_a_gpu_host_checks_still_run() -> None:
    results = {
        r.name: r for r in run_doctor(cpu_box(), DoctorOptions(num_workers=2, checkpoint_dir="/"))
    }
    for name in (
        "shm",
        "cpu-workers",
        "disk",
        "memory",
        "cgroup",
        "nccl-socket-ifname",
        "infiniband",
    ):
        assert results[name].status == "ok", results[name]
    assert results["torch-cuda"].status == "ok" and "CPU-only" in results["torch-cuda"].finding


def test_consumer_gpu_old_driver_wording() -> None:
    """Driver 525 says "Clocks Throttle Reasons"; a GeForce card reports no ECC and no MIG."""
    info = parse_nvidia_smi_q(fixture_text("nvidia-smi/rtx3090-driver525.txt"))
    probe = with_(gpu_info=info)(healthy_node())
    results = {
        r.name: r for r in run_doctor(probe, DoctorOptions(num_workers=2, checkpoint_dir="/"))
    }
    assert results["gpu-ecc"].status == "skip"
    assert results["gpu-persistence"].status == "warn"
    assert (
        results["gpu-pcie"].status == "ok"
        and "lower PCIe generation" in results["gpu-pcie"].finding
    )
    assert (
        results["cuda-compat"].status == "warn"
    )  # torch cu124 on a CUDA 12.0 driver: minor-version compat


def test_a_crashing_check_is_reported_not_raised() -> None:
    class Broken(FixtureProbe):
        def list_dir(self, path: str) -> list[str] | None:
            raise RuntimeError("sysfs exploded")

    (r,) = run_doctor(Broken(), DoctorOptions(), only=("infiniband",))
    assert r.status == "skip" and "sysfs exploded" in r.finding
