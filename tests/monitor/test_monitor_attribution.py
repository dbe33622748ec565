"""Pod attribution without hostPID (the kubelet's pod-resources API, served by a real gRPC server
on a unix socket), command lines kept out of labels by default, and the DCGM name table."""

from __future__ import annotations

import csv
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwise.monitor.exporter import GpuCollector, Sampler, command_label
from gpuwise.monitor.fake import FakeGpuReader
from gpuwise.monitor.metrics import dcgm_twins
from gpuwise.monitor.podresources import (
    FakeKubelet,
    PodDevice,
    PodResourcesClient,
    encode_list_response,
    parse_list_response,
)

pytest.importorskip("grpc", reason="pod-resources needs grpcio (gpuwise[exporter-k8s])")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sock_path() -> Iterator[str]:
    # unix socket paths are limited to ~107 bytes: a short temporary folder, not tmp_path
    with tempfile.TemporaryDirectory(prefix="gw") as d:
        yield os.path.join(d, "kubelet.sock")


def _families(collector: GpuCollector) -> dict[str, list[Any]]:
    return {f.name: f.samples for f in collector.collect()}


def test_the_wire_format_round_trips_and_skips_unknown_fields() -> None:
    devices = (
        PodDevice("ml", "train-0", "trainer", "nvidia.com/gpu", "GPU-a"),
        PodDevice("ml", "train-0", "trainer", "nvidia.com/gpu", "GPU-b"),
        PodDevice("nb", "alice-nb", "notebook", "nvidia.com/mig-1g.10gb", "MIG-x"),
    )
    data = encode_list_response(devices)
    assert parse_list_response(data) == devices
    # a field this decoder does not know (number 2, a varint) is skipped, as protobuf requires
    assert parse_list_response(data + bytes([0x10, 0x05])) == devices
    with pytest.raises(ValueError):  # a truncated message raises instead of guessing
        parse_list_response(data[:-3])


def test_gpus_are_assigned_by_the_scheduler_not_by_processes(sock_path: str) -> None:
    """The idle scenario: GPU 0 runs a process, GPU 1 runs none. The kubelet assigned GPU 1 to a
    notebook pod (idle, but allocated: the money a notebook wastes) and nothing to GPU 0's
    process (a process outside Kubernetes' accounting). Assignment follows the kubelet."""
    reader = FakeGpuReader.from_scenario("idle")
    snap = reader.read()
    gpu0, gpu1 = (g.uuid for g in snap.gpus[:2])
    kubelet = FakeKubelet(
        sock_path,
        (
            PodDevice("team-a", "alice-notebook", "jupyter", "nvidia.com/gpu", gpu1),
            PodDevice("team-a", "alice-notebook", "jupyter", "cpu", "0"),  # not a GPU resource
        ),
    ).start()
    client = PodResourcesClient(sock_path, timeout_s=5)
    try:
        collector = GpuCollector()
        Sampler(reader, collector, 1.0, client).read_once()
        fams = _families(collector)
        assigned = {s.labels["uuid"]: s.value for s in fams["gpuwise_gpu_assigned"]}
        assert assigned == {gpu0: 0.0, gpu1: 1.0} | {g.uuid: 0.0 for g in snap.gpus[2:]}
        (info,) = fams["gpuwise_gpu_pod_info"]
        assert (info.labels["namespace"], info.labels["pod"], info.labels["container"]) == (
            "team-a",
            "alice-notebook",
            "jupyter",
        )
        assert kubelet.calls == 1
    finally:
        client.close()
        kubelet.stop()


def test_no_kubelet_leaves_attribution_out_and_metrics_on(sock_path: str) -> None:
    client = PodResourcesClient(sock_path, timeout_s=0.5)  # nothing listens there
    try:
        collector = GpuCollector()
        Sampler(FakeGpuReader.from_scenario("idle"), collector, 1.0, client).read_once()
        fams = _families(collector)
        assert "gpuwise_gpu_assigned" not in fams  # unknown, not "0 assigned"
        assert fams["gpuwise_gpu_up"]
    finally:
        client.close()


@pytest.mark.parametrize(
    ("mode", "command", "label"),
    [
        ("off", "python train.py --token=s3cr3t", ""),  # the default: no command line at all
        ("executable", "/usr/bin/python3 train.py --token=s3cr3t", "python3"),
        ("executable", "", ""),
        ("hash", "python train.py --token=s3cr3t", None),  # sha256:…, never the text
    ],
)
def test_command_label(mode: Any, command: str, label: str | None) -> None:
    got = command_label(command, mode)
    if label is None:
        assert got.startswith("sha256:") and "s3cr3t" not in got and len(got) == 19
    else:
        assert got == label


def test_no_command_line_is_a_label_by_default() -> None:
    collector = GpuCollector()
    collector.update(FakeGpuReader.from_scenario("idle").read())
    samples = _families(collector)["gpuwise_process_gpu_memory_bytes"]
    assert samples and all(s.labels["command"] == "" for s in samples)


def test_every_default_dcgm_counter_is_mapped_or_documented_missing() -> None:
    """dcgm-exporter's enabled default counters (recorded from its default-counters.csv): each
    has a twin in the metric table with the same type, or is named in docs/monitoring.md's
    migration table as not provided."""
    twins = dcgm_twins()
    docs = (REPO / "docs/monitoring.md").read_text()
    missing = docs.split("Not provided", 1)[1].split("\n\n", 1)[0]
    with (REPO / "tests/monitor/fixtures/dcgm/default_counters.csv").open() as f:
        rows = list(csv.DictReader(f))
    mapped = 0
    for row in rows:
        twin = twins.get(row["field"])
        if twin is None:
            assert f"`{row['field']}`" in missing, row["field"]
            continue
        mapped += 1
        assert twin[1].kind == row["type"], row["field"]
        assert twin[1].unit == row["unit"] or row["unit"] == "1", row["field"]
    assert mapped >= 15


def test_dcgm_compat_names_carry_dcgm_units_and_labels() -> None:
    collector = GpuCollector(dcgm_compat=True)
    reader = FakeGpuReader.from_scenario("idle")
    collector.update(reader.read())
    fams = _families(collector)
    g = {s.labels["gpu"]: s for s in fams["gpuwise_gpu_memory_used_bytes"]}
    fb = {s.labels["gpu"]: s for s in fams["DCGM_FI_DEV_FB_USED"]}
    assert fb["0"].value == pytest.approx(g["0"].value / 2**20)
    assert {"gpu", "UUID", "device", "modelName", "Hostname"} <= set(fb["0"].labels)
    clock = {s.labels["gpu"]: s.value for s in fams["gpuwise_gpu_sm_clock_hertz"]}
    assert {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_SM_CLOCK"]} == pytest.approx(
        {k: v / 1e6 for k, v in clock.items()}
    )
    assert "DCGM_FI_DEV_GPU_UTIL" not in _families(GpuCollector())  # only with --dcgm-compat


def test_dcgm_names_carry_the_pod_of_an_assigned_gpu() -> None:
    """As dcgm-exporter's --kubernetes mode does: a GPU assigned to a container gets its
    namespace/pod/container labels on the DCGM series (what OpenCost's `container!=""` GPU
    queries select); an unassigned GPU has none."""
    reader = FakeGpuReader.from_scenario("idle")
    snap = reader.read()
    gpu1 = snap.gpus[1].uuid
    collector = GpuCollector(dcgm_compat=True)
    collector.update(
        snap, pods={gpu1: (PodDevice("ml", "train-0", "trainer", "nvidia.com/gpu", gpu1),)}
    )
    util = {s.labels["gpu"]: s.labels for s in _families(collector)["DCGM_FI_DEV_GPU_UTIL"]}
    assert (util["1"]["namespace"], util["1"]["pod"], util["1"]["container"]) == (
        "ml",
        "train-0",
        "trainer",
    )
    assert util["0"]["pod"] == ""


def test_metric_table_rows_are_consistent() -> None:
    """Each row's name ends in its base unit (Prometheus naming), counters are named without
    `_total` (the client adds it), and the help names the row's first DCGM twin."""
    from gpuwise.monitor.metrics import GPU_METRICS, MIG_METRICS

    rows = [*GPU_METRICS, *MIG_METRICS]
    assert len({d.name for d in rows}) == len(rows)
    for d in rows:
        assert d.unit == "1" or d.name.endswith("_" + d.unit), d.name
        assert not d.name.endswith("_total"), d.name
        if d.dcgm:
            assert d.dcgm[0].name in d.help, d.name


@pytest.mark.parametrize(
    ("form", "device_id"),
    [
        ("NVIDIA UUID", lambda g, m: g.uuid),
        ("NVIDIA time-slicing replica", lambda g, m: f"{g.uuid}::3"),
        ("GKE device name", lambda g, m: f"nvidia{g.index}"),
        ("MIG UUID", lambda g, m: m.uuid),
        ("MIG time-slicing replica", lambda g, m: f"{m.uuid}::0"),
        ("GKE MIG partition", lambda g, m: f"nvidia{g.index}/gi{m.gpu_instance_id}"),
        ("MIG R450 form", lambda g, m: f"MIG-{g.uuid}/{m.gpu_instance_id}/0"),
    ],
)
def test_every_device_plugin_id_form_attributes(sock_path: str, form: str, device_id: Any) -> None:
    """The kubelet speaks each device plugin's ids (NVIDIA, its time-slicing replicas, GKE,
    MIG): the GPU (or its MIG instance) is assigned to the pod either way; these forms used to
    read as unallocated (gpuwise_gpu_assigned 0)."""
    reader = FakeGpuReader.from_scenario("mig")
    snap = reader.read()
    g = next(x for x in snap.gpus if x.mig_devices)
    m = g.mig_devices[-1]
    want_mig = m.uuid if "MIG" in form else ""
    held = device_id(g, m)
    resource = "nvidia.com/mig-1g.10gb" if want_mig else "nvidia.com/gpu"
    devices = (PodDevice("ml", "nb-0", "jupyter", resource, held),)
    if "replica" in form:  # two replicas of the same device in one container count once
        devices += (PodDevice("ml", "nb-0", "jupyter", resource, held.replace("::", "::1")),)
    kubelet = FakeKubelet(sock_path, devices).start()
    client = PodResourcesClient(sock_path, timeout_s=5)
    try:
        collector = GpuCollector()
        Sampler(reader, collector, 1.0, client).read_once()
        fams = _families(collector)
        assigned = {s.labels["uuid"]: s.value for s in fams["gpuwise_gpu_assigned"]}
        assert assigned[g.uuid] == 1.0, (form, held)
        assert sum(assigned.values()) == 1.0
        (info,) = fams["gpuwise_gpu_pod_info"]
        assert (info.labels["uuid"], info.labels["mig_uuid"], info.labels["pod"]) == (
            g.uuid,
            want_mig,
            "nb-0",
        )
    finally:
        client.close()
        kubelet.stop()


def test_dcgm_compat_has_the_last_xid_and_the_pci_bus_id() -> None:
    """Existing DCGM XID alerts (`DCGM_FI_DEV_XID_ERRORS > 0`) keep working, and dashboards that
    key GPUs by `pci_bus_id` find it: the xid scenario reports XID 79 on GPU 0."""
    reader = FakeGpuReader.from_scenario("xid")
    collector = GpuCollector(dcgm_compat=True)
    for _ in range(5):  # XID 79 arrives with the fourth frame
        snap = reader.read()
    collector.update(snap)
    fams = _families(collector)
    xid = {s.labels["gpu"]: s for s in fams["DCGM_FI_DEV_XID_ERRORS"]}
    last = {g.index: g.last_xid for g in snap.gpus}
    assert any(last.values()) and all(xid[str(i)].value == (v or 0) for i, v in last.items())
    for s in fams["DCGM_FI_DEV_GPU_TEMP"]:
        assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d", s.labels["pci_bus_id"])
