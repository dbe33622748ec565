"""dstack's gpuhunt catalogs for ``catalog update --fetch gpuhunt``.

Layout (what gpuhunt itself reads): ``<base>/<provider>/version`` holds the catalog version, and
``<base>/<provider>/<version>/catalog.zip`` holds ``<provider>.csv`` with gpuhunt's published
columns (``CATALOG_V2_FIELDS``: instance_name, location, price, cpu, memory, gpu_count, gpu_name,
gpu_memory, spot, disk_size, gpu_vendor, flags, cpu_arch, provider_data).

Rules, each with a test on recorded rows:

- ``gpu_vendor`` other than ``nvidia``/``amd`` (``google`` TPUs, ``intel`` Gaudi, ``tenstorrent``)
  and CPU rows (``gpu_count`` 0) are skipped and counted; a row with no vendor and a ``tpu-`` name
  is a TPU (gpuhunt's own rule for older catalogs).
- ``gpu_memory`` picks the model where a name covers two: an ``A100`` with 80 GB is ``A100-80GB``,
  a ``V100`` with 32 GB is ``V100-32GB`` (p4de.24xlarge, p3dn.24xlarge).
- ``flags`` are read one by one (:data:`GPUHUNT_FLAGS`, the names gpuhunt's providers set): a
  flag that marks a real offer (``gcp-a4`` B200 machines, ``lambda-arm`` GH200, ``oci-spot``
  preemptible prices) keeps the row, labelled in its ``source``; a flag that marks another product
  (DWS calendar mode, RunPod Instant Clusters, the legacy ``gcp-g4-preview`` copies, capacity
  blocks) sets the row aside with the reason; an unknown flag sets it aside naming the flag.
- The same offer (instance, location, GPU, count, spot or not) twice with different prices is
  refused, naming both prices.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwise.base import settings
from gpuwise.catalog.offer import Offer
from gpuwise.catalog.remote_common import (
    Fetched,
    Getter,
    add_skips,
    as_text,
    complete_csv,
    count_skips,
    env,
    env_list,
    expect,
    number,
    oldest_date,
)
from gpuwise.catalog.resolve import resolve_gpu
from gpuwise.errors import CatalogError

GPUHUNT_CATALOG_URL = "https://dstack-gpu-pricing.s3.eu-west-1.amazonaws.com/v3"
GPUHUNT_PROVIDERS = (
    "aws",
    "azure",
    "verda",
    "gcp",
    "lambdalabs",
    "nebius",
    "oci",
    "runpod",
    "cloudrift",
)
GPUHUNT_COLUMNS = (
    "instance_name",
    "location",
    "price",
    "cpu",
    "memory",
    "gpu_count",
    "gpu_name",
    "gpu_memory",
    "spot",
)
"""Required columns of gpuhunt's published catalog CSV (its ``CATALOG_V2_FIELDS`` also has
``disk_size``, ``gpu_vendor``, ``flags``, ``cpu_arch``, ``provider_data``, read when present)."""
GPU_VENDORS = ("nvidia", "amd")
"""gpuhunt ``gpu_vendor`` values imported; gpuwise models GPUs of these vendors only."""
_GPUHUNT_CLOUD = {"lambdalabs": "lambda", "datacrunch": "verda"}

GPUHUNT_FLAGS: dict[str, str | None] = {
    # real offers, kept (the flag only hides them from old dstack versions)
    "gcp-a4": None,  # every a4 (B200) machine type
    "gcp-g4": None,  # every g4-standard (RTX PRO 6000) machine type
    "lambda-arm": None,  # NVIDIA superchips (GH200) on an Arm host; cpu_arch says arm
    "oci-spot": None,  # OCI preemptible capacity, spot = True at half the on-demand price
    # other products, set aside with the reason
    "gcp-dws-calendar-mode": "DWS calendar-mode capacity (booked ahead for fixed dates)",
    "gcp-g4-preview": "gpuhunt's copy of a g4 row for old dstack versions",
    "runpod-cluster": "RunPod Instant Cluster (sold as 2-8 nodes, not one instance)",
    "runpod-cpu": "CPU only",
    "capacity-block": "capacity block (reserved ahead for fixed dates)",
}
"""gpuhunt's flags (set in its providers: ``gcp.py`` ``_set_flags``, ``lambdalabs.py`` ``FLAG_ARM``,
``oci.py`` ``_make_spot_offer``, ``runpod.py``) → None for a real offer kept, else why the row is
set aside. gpuhunt's AWS provider sets no flag; ``capacity-block`` is kept for catalogs that might."""


def _gpuhunt_defaults() -> tuple[str, tuple[str, ...]]:
    """gpuhunt's own base URL and offline providers when the extra is installed, else the same constants."""
    try:
        from gpuhunt._internal import catalog as gh  # optional extra: gpuwise[gpuhunt]
    except ImportError:
        return GPUHUNT_CATALOG_URL, GPUHUNT_PROVIDERS
    return str(getattr(gh, "CATALOG_URL", GPUHUNT_CATALOG_URL)), tuple(
        getattr(gh, "OFFLINE_PROVIDERS", GPUHUNT_PROVIDERS)
    )


def gpuhunt_gpu(name: str, memory_gb: float | None) -> str:
    """Canonical model: the name with its memory (``A100-80GB``, ``V100-32GB``) when gpuwise knows
    that model, else the plain name (an ``H100`` with 80 GB is the ``H100``)."""
    from gpuwise.hardware import gpu_table

    if memory_gb:
        spec = gpu_table().get(f"{name}-{memory_gb:g}GB")
        if spec is not None:
            return spec.name
    return resolve_gpu(name)


def _skip_reason(row: dict[str, Any], where: str) -> str | None:
    """Why a row is not a GPU offer gpuwise imports, or None."""
    count = number(row["gpu_count"], where, "gpu_count")
    name = (row.get("gpu_name") or "").strip()
    if count == 0 or not name:
        return "CPU only"
    vendor = (row.get("gpu_vendor") or "").strip().lower()
    if not vendor:
        vendor = "google" if name.lower().startswith("tpu-") else "nvidia"
    if vendor not in GPU_VENDORS:
        return f"{vendor} accelerator (not a GPU)"
    for flag in (row.get("flags") or "").split():
        if flag not in GPUHUNT_FLAGS:
            return f"flag {flag!r} gpuwise does not know (set aside, not guessed)"
        reason = GPUHUNT_FLAGS[flag]
        if reason is not None:
            return f"{reason} [{flag}]"
    return None


def read_gpuhunt_rows(
    text: str, provider: str, origin: str, *, version: str, as_of: str
) -> tuple[list[Offer], dict[str, int]]:
    """gpuhunt's catalog CSV → (offers, skipped by reason); on-demand and spot rows of one instance
    merge into one Offer. Strict where gpuhunt's own loader is lenient (it skips bad rows with a
    warning): a row with a wrong type or too few cells is an error naming the row."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in GPUHUNT_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise CatalogError(
            f"{origin}: missing column(s) {', '.join(missing)}",
            hint="the gpuhunt catalog schema changed; nothing was imported",
        )
    cloud = _GPUHUNT_CLOUD.get(provider, provider)
    src = f"gpuhunt:{provider}@{version}"
    merged: dict[tuple[str, str, str, float], dict[str, Any]] = {}
    skipped: dict[str, int] = {}
    for lineno, row in enumerate(reader, start=2):
        where = f"{origin}, row {lineno}"
        if None in row or None in row.values():
            raise CatalogError(
                f"{where}: {'more' if None in row else 'fewer'} cells than columns",
                hint="the download is damaged; nothing was imported",
            )
        reason = _skip_reason(row, where)
        if reason is not None:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        count = number(row["gpu_count"], where, "gpu_count")
        price = number(row["price"], where, "price")
        spot = (row["spot"] or "").strip().lower()
        expect(spot in ("true", "false"), where, f"spot = {row['spot']!r}")
        gpu_mem = (
            number(row["gpu_memory"], where, "gpu_memory")
            if (row.get("gpu_memory") or "").strip()
            else None
        )
        gpu = gpuhunt_gpu(row["gpu_name"].strip(), gpu_mem)
        key = (row["location"].strip(), row["instance_name"].strip(), gpu, count)
        entry = merged.setdefault(
            key,
            {
                "cpu": number(row["cpu"], where, "cpu"),
                "memory": number(row["memory"], where, "memory"),
                "gpu_mem": gpu_mem,
                "arch": "arm64" if (row.get("cpu_arch") or "") == "arm" else "x86_64",
                "flags": set(),
            },
        )
        entry["flags"].update((row.get("flags") or "").split())
        if price > 0:
            kind = "spot" if spot == "true" else "od"
            if kind in entry and entry[kind] != price:
                raise CatalogError(
                    f"{where}: {key[1]} in {key[0]} ({'spot' if kind == 'spot' else 'on-demand'}) "
                    f"appears twice with different prices ({entry[kind]:g} and {price:g})",
                    hint="the catalog is inconsistent; nothing was imported from it",
                )
            if kind in entry:
                skipped["repeated row"] = skipped.get("repeated row", 0) + 1
            entry[kind] = price
    offers = [
        Offer(
            cloud,
            *_region_zone(cloud, loc),
            itype,
            gpu,
            count,
            e["gpu_mem"],
            e["cpu"] or None,
            e["memory"] or None,
            e.get("od"),
            e.get("spot"),
            e["arch"],
            f"{src} [{' '.join(sorted(e['flags']))}]" if e["flags"] else src,
            as_of,
        )
        for (loc, itype, gpu, count), e in merged.items()
        if "od" in e or "spot" in e
    ]
    return offers, skipped


_GCP_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")


def _region_zone(cloud: str, location: str) -> tuple[str, str | None]:
    """gpuhunt's ``location`` as (region, zone): its GCP rows name a zone (``us-central1-a``), kept
    as the zone of region ``us-central1`` as SkyPilot's rows have it; other clouds name a region."""
    m = _GCP_ZONE.match(location) if cloud == "gcp" else None
    return (m.group(1), location) if m else (location, None)


def read_gpuhunt_csv(
    text: str, provider: str, origin: str, *, version: str, as_of: str
) -> list[Offer]:
    """The offers of :func:`read_gpuhunt_rows`."""
    return read_gpuhunt_rows(text, provider, origin, version=version, as_of=as_of)[0]


def version_date(version: str) -> str:
    """gpuhunt's version ``YYYYMMDD…`` → its date; ``unknown`` for any other version string."""
    m = re.match(r"^(\d{4})(\d{2})(\d{2})", version)
    if not m:
        return "unknown"
    try:
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3))).isoformat()
    except ValueError:
        return "unknown"


@dataclass(frozen=True)
class Gpuhunt:
    """dstack's gpuhunt catalogs: ``<base>/<provider>/version`` then ``<base>/<provider>/<version>/catalog.zip``
    holding ``<provider>.csv`` (the layout gpuhunt itself reads; ``GPUHUNT_CATALOG_URL`` moves it, and
    ``GPUHUNT_CATALOG_DIR`` reads ``<dir>/<provider>.csv`` files instead, as gpuhunt does). Prices are
    dated by the catalog version (``YYYYMMDD…``)."""

    name: str = "gpuhunt"

    def fetch(self, get: Getter, known: Sequence[Offer]) -> Fetched:
        default_url, default_providers = _gpuhunt_defaults()
        base = env("GPUHUNT_CATALOG_URL", default_url)
        providers = [p.lower() for p in env_list("GPUWISE_GPUHUNT_PROVIDERS", default_providers)]
        folder = settings.text("GPUHUNT_CATALOG_DIR")
        offers: list[Offer] = []
        versions: list[str] = []
        skipped: dict[str, int] = {}
        for provider in providers:
            if folder:
                text, version, origin = _read_dir(Path(folder), provider)
            else:
                vurl = f"{base}/{provider}/version"
                version = as_text(get(vurl), vurl).strip()
                expect(
                    bool(re.fullmatch(r"[\w.-]{1,64}", version)), vurl, f"version {version[:40]!r}"
                )
                origin = f"{base}/{provider}/{version}/catalog.zip"
                text = _unzip_one(get(origin), f"{provider}.csv", origin)
            versions.append(f"{provider}@{version}")
            rows, skips = read_gpuhunt_rows(
                text, provider, origin, version=version, as_of=version_date(version)
            )
            offers += rows
            add_skips(skipped, skips, f"{provider}: ")
        clouds = tuple(sorted({o.cloud for o in offers}))
        expect(bool(offers), base, "no GPU offer in the catalogs")
        return Fetched(
            self.name,
            folder or base,
            " ".join(versions),
            oldest_date([o.as_of for o in offers]),
            tuple(offers),
            clouds,
            skipped=count_skips(skipped),
        )


def _read_dir(folder: Path, provider: str) -> tuple[str, str, str]:
    """(text, version, origin) of ``<folder>/<provider>.csv``; the version is the file's date."""
    path = folder / f"{provider}.csv"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CatalogError(
            f"{path}: cannot read ({exc.strerror})", hint="check GPUHUNT_CATALOG_DIR"
        ) from None
    version = dt.date.fromtimestamp(path.stat().st_mtime).strftime("%Y%m%d")
    return complete_csv(data, str(path)), version, str(path)


def _unzip_one(data: bytes | bytearray, member: str, origin: str) -> str:
    from gpuwise.catalog.fetch import FetchSettings

    limit = FetchSettings.from_env().max_bytes
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            info = zf.getinfo(member)
            if info.file_size > limit:
                raise CatalogError(
                    f"{origin}: {member} unpacks to {info.file_size:,} bytes, over the limit",
                    hint="raise GPUWISE_FETCH_MAX_BYTES if that is expected",
                )
            raw = zf.read(info)
    except KeyError:
        raise CatalogError(
            f"{origin}: no {member} inside", hint="the gpuhunt catalog layout changed"
        ) from None
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise CatalogError(
            f"{origin}: not a valid zip ({exc})", hint="the download is damaged; try again"
        ) from None
    return complete_csv(raw, origin)
