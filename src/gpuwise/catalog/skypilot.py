"""Read SkyPilot catalog files (``<root>/<version>/<cloud>/vms.csv``) into :class:`Offer`s.

Columns are found by header name: their order differs per cloud. The quirks handled here, each
with a test on a tiny table:

- GCP prices the host VM and its GPUs on separate rows; an offer is host + GPU row of the same
  zone (a2/a3/a4/g2 hosts carry a fixed GPU; n1 hosts take T4/V100/P100/P4 attached).
- ``GpuInfo`` is a Python-literal dict, read with :func:`ast.literal_eval` (never ``eval``).
- RunPod writes GB where ``SizeInMiB`` should be MiB.
- GCP TPU rows use ``700.0`` as a sentinel for "not offered".
- Empty or ``0`` prices mean reservation-only (AWS p5e, trn2): on-demand is None.
- AWS has one row per availability zone with that zone's spot price.
- Rows without an accelerator (Nebius CPU shapes have ``AcceleratorCount`` ``0``; OCI and GCP CPU
  shapes leave it empty) are not GPU offers: skipped and counted, never an error.
- A row with fewer cells than the header is a cut-short or damaged file: refused, naming the row.
- Two rows with the same offer key and different prices are refused (SkyPilot's files have one row
  per key; identical repeats are dropped and counted).
"""

from __future__ import annotations

import ast
import csv
import functools
import io
import logging
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuwise.base.datafiles import refuse_bidi_controls
from gpuwise.catalog.offer import Offer, check_header, parse_positive, parse_price
from gpuwise.catalog.resolve import instance_override, resolve_gpu
from gpuwise.errors import CatalogError

log = logging.getLogger(__name__)

TPU_SENTINEL_USD_PER_HOUR = 700.0
"""SkyPilot's GCP catalog prices TPUs that are not really offered at 700.0 (e.g. tpu-v6e in asia-east1)."""

_REQUIRED = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region")
_MAX_GPUINFO_CHARS = 4096


@dataclass(frozen=True)
class _Row:
    """One parsed vms.csv row, before GCP joins and GPU resolution."""

    instance_type: str
    accelerator: str
    count: float | None
    vcpus: float | None
    memory_gib: float | None
    gpu_mib: float | None
    price: float | None
    spot: float | None
    region: str
    zone: str | None
    arch: str


@functools.lru_cache(maxsize=1024)
def _gpu_mib_from_info(info: str) -> float | None:
    """Per-GPU memory in MiB from a ``GpuInfo`` cell, or None if it has none.

    RunPod rows give GB in ``SizeInMiB`` (80 for an 80 GB card): no GPU has under 1 GiB, so a
    value below 1024 is read as GB.
    """
    text = info.strip()
    if not text.startswith("{") or len(text) > _MAX_GPUINFO_CHARS:
        return None
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    try:
        size = float(parsed["Gpus"][0]["MemoryInfo"]["SizeInMiB"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    if size <= 0:
        return None
    return size * 1024 if size < 1024 else size


def _parse_rows(text: str, origin: str) -> list[_Row]:
    refuse_bidi_controls(text, origin, CatalogError)
    reader = csv.DictReader(io.StringIO(text))
    check_header(reader.fieldnames, _REQUIRED, origin)
    rows = []
    for lineno, raw in enumerate(reader, start=2):
        where = f"{origin}, row {lineno}"
        if None in raw:
            raise CatalogError(
                f"{where}: more cells than columns", hint="quote cells that contain commas"
            )
        if None in raw.values():
            cells = sum(v is not None for v in raw.values())
            raise CatalogError(
                f"{where}: {cells} of {len(raw)} cells (the row is cut short)",
                hint="the file is truncated or damaged; download it again",
            )
        accelerator = (raw.get("AcceleratorName") or "").strip()
        count_cell = (raw.get("AcceleratorCount") or "").strip()
        if accelerator and _is_zero(count_cell):
            accelerator = ""  # a named accelerator with count 0: not a GPU offer (skipped, counted)
        instance_type = (raw.get("InstanceType") or "").strip()
        if not accelerator and not instance_type:
            raise CatalogError(
                f"{where}: neither InstanceType nor AcceleratorName is set",
                hint="every row needs an instance type, an accelerator, or both",
            )
        rows.append(
            _Row(
                instance_type=instance_type,
                accelerator=accelerator,
                count=parse_positive(count_cell, where, "AcceleratorCount", required=True)
                if accelerator
                else None,
                vcpus=parse_positive(raw.get("vCPUs") or "", where, "vCPUs", required=False),
                memory_gib=parse_positive(
                    raw.get("MemoryGiB") or "", where, "MemoryGiB", required=False
                ),
                gpu_mib=_gpu_mib_from_info(raw.get("GpuInfo") or ""),
                price=parse_price(raw.get("Price") or "", where, "Price"),
                spot=parse_price(raw.get("SpotPrice") or "", where, "SpotPrice"),
                region=(raw.get("Region") or "").strip(),
                zone=(raw.get("AvailabilityZone") or "").strip() or None,
                arch=(raw.get("Arch") or "").strip() or "x86_64",
            )
        )
    return rows


def _is_zero(cell: str) -> bool:
    try:
        return float(cell) == 0
    except ValueError:
        return False


@dataclass(frozen=True)
class VmsRead:
    """What one ``vms.csv`` gave: the offers, and how many rows were skipped and why."""

    offers: list[Offer]
    rows: int
    """Data rows in the file."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Reason → rows: ``no accelerator`` (CPU shapes; on GCP also the host rows), ``no price``
    (reservation-only), ``repeated row`` (the same offer twice with the same prices)."""


def parse_vms_csv(
    text: str, cloud: str, origin: str, *, as_of: str, source: str | None = None
) -> VmsRead:
    """All GPU/accelerator offers in one SkyPilot ``vms.csv`` of ``cloud``, with skip counts."""
    if not text.strip():
        raise CatalogError(f"{origin}: empty file", hint="download the catalog again")
    rows = _parse_rows(text, origin)
    source = source or f"skypilot:{cloud}"
    pairs = list(_gcp_join(rows)) if cloud == "gcp" else [(r, r) for r in rows if r.accelerator]
    skipped = {"no accelerator": sum(1 for r in rows if not r.accelerator)}
    offers: dict[tuple[object, ...], Offer] = {}
    for host, gpu in pairs:
        offer = _make_offer(cloud, host, gpu, source, as_of)
        if offer is None:
            skipped["no price"] = skipped.get("no price", 0) + 1
            continue
        seen = offers.get(offer.key)
        if seen is None:
            offers[offer.key] = offer
        elif _prices(seen) == _prices(offer):
            skipped["repeated row"] = skipped.get("repeated row", 0) + 1
        else:
            raise CatalogError(
                f"{origin}: two rows for {cloud} {offer.instance_type} in "
                f"{offer.zone or offer.region} with different prices "
                f"({_prices(seen)} and {_prices(offer)})",
                hint="the file is damaged or the source changed; nothing was imported",
            )
    return VmsRead(list(offers.values()), len(rows), {k: v for k, v in skipped.items() if v})


def _prices(o: Offer) -> tuple[float | None, float | None]:
    return (o.on_demand_usd_per_hour, o.spot_usd_per_hour)


def read_vms_csv(
    text: str, cloud: str, origin: str, *, as_of: str, source: str | None = None
) -> list[Offer]:
    """All GPU/accelerator offers in one SkyPilot ``vms.csv`` of ``cloud``."""
    return parse_vms_csv(text, cloud, origin, as_of=as_of, source=source).offers


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _make_offer(cloud: str, host: _Row, gpu: _Row, source: str, as_of: str) -> Offer | None:
    tpu = gpu.accelerator.lower().startswith("tpu-")
    price, spot = (
        (gpu.price, gpu.spot)
        if host is gpu
        else (_add(host.price, gpu.price), _add(host.spot, gpu.spot))
    )
    if tpu:
        price = None if price == TPU_SENTINEL_USD_PER_HOUR else price
        spot = None if spot == TPU_SENTINEL_USD_PER_HOUR else spot
    price = price or None  # 0 or empty: reservation / capacity-block only
    spot = spot or None
    if price is None and spot is None:
        return None
    count = gpu.count or 0.0
    name = gpu.accelerator
    instance_type = host.instance_type or gpu.accelerator
    if tpu:
        name, count = _tpu_model_and_chips(gpu.accelerator, count)
    override = instance_override(cloud, instance_type)
    model = override.gpu if override else resolve_gpu(name)
    if override and override.gpu_count:
        count = override.gpu_count
    return Offer(
        cloud=cloud,
        region=gpu.region or host.region,
        zone=gpu.zone or host.zone,
        instance_type=instance_type,
        gpu=model,
        gpu_count=count,
        gpu_memory_gib=round(gpu.gpu_mib / 1024, 3) if gpu.gpu_mib else None,
        vcpus=host.vcpus,
        memory_gib=host.memory_gib,
        on_demand_usd_per_hour=round(price, 6) if price is not None else None,
        spot_usd_per_hour=round(spot, 6) if spot is not None else None,
        arch=host.arch,
        source=source,
        as_of=as_of,
    )


_TPU_NAME = re.compile(r"^tpu-(v\d+[a-z]*?)(?:-?lite(?:pod)?)?-(\d+)$", re.I)
# TPU v2-v4 and v5p slice names count TensorCores (2 per chip); v5e/v6e names count chips
# (cloud.google.com/tpu/docs/system-architecture-tpu-vm, "TPU versions").
_CORES_PER_CHIP = {"v2": 2, "v3": 2, "v4": 2, "v5p": 2}


def _tpu_model_and_chips(name: str, count: float) -> tuple[str, float]:
    m = _TPU_NAME.match(name)
    if not m:
        return name, count
    version = m.group(1).lower()
    if "lite" in name.lower() and version == "v5":
        version = "v5e"
    chips = int(m.group(2)) / _CORES_PER_CHIP.get(version, 1)
    return f"tpu-{version}", chips * count


# Which GPU a GCP host family carries (cloud.google.com/compute/docs/gpus: "A3/A2/G2/A4
# machine types have a fixed number of GPUs attached"). n1 hosts take a GPU attached by the user.
_GCP_FIXED = [
    (re.compile(r"^a2-highgpu-(\d+)g$"), "A100", None),
    (re.compile(r"^a2-megagpu-(\d+)g$"), "A100", None),
    (re.compile(r"^a2-ultragpu-(\d+)g$"), "A100-80GB", None),
    (re.compile(r"^a3-highgpu-(\d+)g$"), "H100", None),
    (re.compile(r"^a3-edgegpu-8g(-nolssd)?$"), "H100", 8),
    (re.compile(r"^a3-megagpu-8g$"), "H100-MEGA", 8),
    (re.compile(r"^a3-ultragpu-8g(-nolssd)?$"), "H200", 8),
    (re.compile(r"^a4-highgpu-8g$"), "B200", 8),
    (re.compile(r"^g2-standard-(?:4|8|12|16|32)$"), "L4", 1),
    (re.compile(r"^g2-standard-24$"), "L4", 2),
    (re.compile(r"^g2-standard-48$"), "L4", 4),
    (re.compile(r"^g2-standard-96$"), "L4", 8),
]
_GCP_ATTACHABLE = frozenset({"T4", "V100", "P100", "P4", "K80"})
_GCP_N1_VCPUS = 8.0
"""n1 host size joined with attached GPUs: 8 vCPUs, SkyPilot's default host for GCP GPU VMs
(the bundled extract has n1-standard-8 and n1-highmem-8); other n1 shapes are skipped."""


def _gcp_fixed_accelerator(instance_type: str) -> tuple[str, float] | None:
    for pattern, name, count in _GCP_FIXED:
        m = pattern.match(instance_type)
        if m:
            return name, float(count if count is not None else m.group(1))
    return None


def _gcp_join(rows: Iterable[_Row]) -> Iterable[tuple[_Row, _Row]]:
    """(host, accelerator) row pairs that make one GCP GPU VM, matched within a zone."""
    hosts: list[_Row] = []
    accel_by_zone: dict[tuple[str | None, str, float | None], _Row] = {}
    attachable_by_zone: dict[str | None, list[_Row]] = defaultdict(list)
    for row in rows:
        if row.instance_type and not row.accelerator:
            hosts.append(row)
        elif row.accelerator and not row.instance_type:
            if row.accelerator.lower().startswith("tpu-"):
                yield row, row  # a TPU VM is priced whole on its accelerator row
                continue
            accel_by_zone[(row.zone, row.accelerator, row.count)] = row
            if row.accelerator in _GCP_ATTACHABLE:
                attachable_by_zone[row.zone].append(row)
        elif row.accelerator:
            yield row, row  # already a whole VM
    for host in hosts:
        fixed = _gcp_fixed_accelerator(host.instance_type)
        if fixed is not None:
            gpu = accel_by_zone.get((host.zone, fixed[0], fixed[1]))
            if gpu is not None:
                yield host, gpu
            else:
                log.debug(
                    "gcp %s in %s has no %s×%g row; skipped", host.instance_type, host.zone, *fixed
                )
        elif host.instance_type.startswith("n1-") and host.vcpus == _GCP_N1_VCPUS:
            for gpu in attachable_by_zone.get(host.zone, ()):
                yield host, gpu
