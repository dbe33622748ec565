"""Which pod holds which GPU, from the kubelet's pod-resources API (no hostPID needed).

The kubelet serves ``v1.PodResourcesLister`` over gRPC on a unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``); its ``List`` call returns, per pod and
container, the device ids each device plugin handed out. NVIDIA's device plugin names GPUs by
UUID (``GPU-…``) and MIG instances by MIG UUID (``MIG-…``), the ids NVML reports, so a GPU is
"assigned" exactly when the scheduler gave it to a pod, whether or not a process runs on it.
This is what dcgm-exporter's ``--kubernetes`` mode reads, too.

The messages are small and stable (``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto``:
``ListPodResourcesResponse{repeated PodResources pod_resources = 1}``, ``PodResources{name = 1,
namespace = 2, repeated ContainerResources containers = 3}``, ``ContainerResources{name = 1,
repeated ContainerDevices devices = 2}``, ``ContainerDevices{resource_name = 1, repeated string
device_ids = 2}``), so they are decoded here from the protobuf wire format instead of generated
code; the transport is grpcio (``pip install 'gpuwise[exporter-k8s]'``). Fields this module does
not know (CPU ids, memory, topology, dynamic resources) are skipped, as protobuf requires.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpuwise.errors import InputError
from gpuwise.monitor.snapshot import GpuSample, Snapshot

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-")
"""Resource names (or prefixes) that hand out NVIDIA GPUs or MIG instances."""


@dataclass(frozen=True)
class PodDevice:
    """One device the kubelet assigned to a container."""

    namespace: str
    """The pod's namespace."""
    pod: str
    """The pod's name."""
    container: str
    """The container's name."""
    resource: str
    """The extended resource, e.g. ``nvidia.com/gpu`` or ``nvidia.com/mig-1g.10gb``."""
    device_id: str
    """The device plugin's id: a GPU UUID or MIG UUID for NVIDIA's plugin."""


# -- protobuf wire format (only what the List response needs) --------------------------------


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) for each field of one message."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
            yield number, wire, value
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > len(buf):
                raise ValueError("truncated field")
            yield number, wire, buf[i : i + size]
            i += size
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _group(buf: bytes) -> dict[int, list[bytes]]:
    """The length-delimited fields (strings, bytes, messages) of one message, by field number;
    varint and fixed-size fields are skipped (none of the fields read here is one)."""
    out: dict[int, list[bytes]] = {}
    for number, wire, value in _fields(buf):
        if wire == 2 and isinstance(value, bytes):
            out.setdefault(number, []).append(value)
    return out


def _text(fields: dict[int, list[bytes]], number: int) -> str:
    values = fields.get(number)
    return values[-1].decode("utf-8") if values else ""  # proto3: the last one wins


def parse_list_response(data: bytes) -> tuple[PodDevice, ...]:
    """Decode a ``ListPodResourcesResponse`` into its devices (every resource, not only GPUs)."""
    out: list[PodDevice] = []
    for pod_buf in _group(data).get(1, []):
        pod = _group(pod_buf)
        name, namespace = _text(pod, 1), _text(pod, 2)
        for container_buf in pod.get(3, []):
            container = _group(container_buf)
            cname = _text(container, 1)
            for device_buf in container.get(2, []):
                device = _group(device_buf)
                resource = _text(device, 1)
                out += [
                    PodDevice(namespace, name, cname, resource, i.decode("utf-8"))
                    for i in device.get(2, [])
                ]
    return tuple(out)


def _put_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _put(number: int, payload: bytes) -> bytes:
    return _put_varint(number << 3 | 2) + _put_varint(len(payload)) + payload


def encode_list_response(devices: tuple[PodDevice, ...]) -> bytes:
    """The inverse of :func:`parse_list_response`: what a kubelet sends for these devices (used by
    :class:`FakeKubelet` and tests)."""
    pods: dict[tuple[str, str], dict[str, list[PodDevice]]] = {}
    for d in devices:
        pods.setdefault((d.namespace, d.pod), {}).setdefault(d.container, []).append(d)
    body = b""
    for (namespace, pod), containers in pods.items():
        pod_buf = _put(1, pod.encode()) + _put(2, namespace.encode())
        for cname, devs in containers.items():
            c_buf = _put(1, cname.encode())
            by_resource: dict[str, list[str]] = {}
            for d in devs:
                by_resource.setdefault(d.resource, []).append(d.device_id)
            for resource, ids in by_resource.items():
                d_buf = _put(1, resource.encode()) + b"".join(_put(2, i.encode()) for i in ids)
                c_buf += _put(2, d_buf)
            pod_buf += _put(3, c_buf)
        body += _put(1, pod_buf)
    return body


# -- the client --------------------------------------------------------------------------------


def _grpc() -> Any:
    try:
        return importlib.import_module("grpc")
    except ImportError as exc:
        raise InputError(
            "reading the kubelet's pod-resources API needs grpcio",
            hint="pip install 'gpuwise[exporter-k8s]', or run without --pod-resources-socket",
        ) from exc


class PodResourcesClient:
    """Lists GPU assignments from the kubelet; every call has a deadline."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout_s: float = 2.0) -> None:
        grpc = _grpc()
        self.socket_path, self.timeout_s = socket_path, timeout_s
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self._list = self._channel.unary_unary(
            LIST_METHOD,
            request_serializer=lambda _req: b"",
            response_deserializer=parse_list_response,
        )
        self._warned = False

    def gpu_assignments(self) -> dict[str, tuple[PodDevice, ...]] | None:
        """Device id → the containers it is assigned to, GPU resources only; None when the
        kubelet does not answer (logged once: attribution then stays empty, metrics go on)."""
        try:
            devices: tuple[PodDevice, ...] = self._list(b"", timeout=self.timeout_s)
        except Exception as exc:  # grpc.RpcError and decoding errors: keep serving GPU metrics
            if not self._warned:
                log.warning(
                    "kubelet pod-resources API at %s did not answer (%s); pods are not attributed. "
                    "To fix: mount /var/lib/kubelet/pod-resources (deploy/kubernetes/overlays/"
                    "pod-resources)",
                    self.socket_path,
                    type(exc).__name__,
                )
                self._warned = True
            return None
        self._warned = False
        return by_device(devices)

    def close(self) -> None:
        self._channel.close()


def by_device(devices: tuple[PodDevice, ...]) -> dict[str, tuple[PodDevice, ...]]:
    """Group the GPU devices (``nvidia.com/gpu``, ``nvidia.com/mig-*``) by device id."""
    out: dict[str, list[PodDevice]] = {}
    for d in devices:
        if d.resource.startswith(GPU_RESOURCES):
            out.setdefault(d.device_id, []).append(d)
    return {k: tuple(v) for k, v in out.items()}


_REPLICA = re.compile(r"::\d+$")  # NVIDIA time-slicing / MPS replicas: GPU-…::3, MIG-…::0
_GKE = re.compile(r"^nvidia(\d+)(?:/gi(\d+))?$")  # GKE's plugin: nvidia0, nvidia0/gi3 (MIG)
_OLD_MIG = re.compile(r"^MIG-(GPU-[^/]+)/(\d+)/\d+$")  # MIG-GPU-<uuid>/<gi>/<ci> (R450)


def resolve_devices(
    by_id: Mapping[str, tuple[PodDevice, ...]], snap: Snapshot
) -> dict[str, tuple[PodDevice, ...]]:
    """The kubelet's device ids turned into the UUIDs NVML reports (GPU or MIG), for every
    device plugin's naming: NVIDIA's UUIDs (``GPU-…``, ``MIG-…``), its time-slicing and MPS
    replicas (``GPU-…::N``, ``MIG-…::N``: each replica is the same device), GKE's device names
    (``nvidiaN`` = the GPU whose index is N; ``nvidiaN/giM`` = its MIG instance M) and the old
    MIG form ``MIG-GPU-<uuid>/<gi>/<ci>``. Ids that match no GPU here are dropped."""
    gpus = {g.uuid: g for g in snap.gpus}
    by_index = {g.index: g for g in snap.gpus}
    migs = {m.uuid for g in snap.gpus for m in g.mig_devices}

    def mig_of(gpu: GpuSample | None, gi: int) -> str | None:
        hit = [m.uuid for m in (gpu.mig_devices if gpu else ()) if m.gpu_instance_id == gi]
        return hit[0] if hit else None

    out: dict[str, list[PodDevice]] = {}
    for raw, held in by_id.items():
        dev = _REPLICA.sub("", raw)
        key: str | None = dev if dev in gpus or dev in migs else None
        if key is None and (m := _GKE.match(dev)):
            gpu = by_index.get(int(m.group(1)))
            key = (
                (gpu.uuid if gpu else None) if m.group(2) is None else mig_of(gpu, int(m.group(2)))
            )
        elif key is None and (m := _OLD_MIG.match(dev)):
            key = mig_of(gpus.get(m.group(1)), int(m.group(2)))
        if key is not None:
            for d in held:  # replicas of one device held by one container count once
                d = replace(d, device_id=key)
                if d not in out.setdefault(key, []):
                    out[key].append(d)
    return {k: tuple(v) for k, v in out.items()}


class FakeKubelet:
    """A real gRPC server on a unix socket that answers ``List`` like a kubelet: for tests, and
    for trying the exporter's attribution without a cluster."""

    def __init__(self, socket_path: str, devices: tuple[PodDevice, ...]) -> None:
        grpc = _grpc()
        from concurrent import futures

        self.devices = devices
        self.calls = 0

        def list_handler(_request: bytes, _context: Any) -> bytes:
            self.calls += 1
            return encode_list_response(self.devices)

        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    list_handler,
                    request_deserializer=lambda b: b,
                    response_serializer=lambda b: b,
                )
            },
        )
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port(f"unix://{socket_path}")

    def start(self) -> FakeKubelet:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=None)
