"""Step 1 of a plan: catalog rows → :class:`Site` s, one per cloud × region × instance type.

A site carries the price you can get in its region and the zone that gives it. A zone price far
below the region's other zones (under :data:`OUTLIER_RATIO` × their median; AWS Local Zones are
the usual case) is set aside unless the request allows outliers; when it is allowed, the option
names the zone and the export pins it, so the plan never quotes a price the launcher would not pay.
AWS Local Zones (zone IDs like ``use1-atl2-az1``) are set aside whatever their price: an account
must opt into each one, and SkyPilot only sees the zones an account has (``describe-availability-
zones``), so a region's Local Zone price is not what a launch there gets by default.
"""

from __future__ import annotations

import fnmatch
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gpuwise.catalog.offer import Offer
from gpuwise.planner.network import (
    InstanceNetwork,
    as_launched,
    for_tier,
    given_network,
    instance_network,
)
from gpuwise.planner.values import PlanRequest

OUTLIER_RATIO = 0.75
"""gpuwise's rule, not a published figure: a zone price under 75% of the median of the region's
other zones is an outlier (the README job's Local Zone spot price was 62% of its region's other zone)."""


@dataclass(frozen=True)
class ZonePrice:
    """The best price of one billing model at a site, and where it comes from."""

    usd_per_hour: float
    """Price of one instance."""
    zone: str | None
    """The zone that gives the price (None where the cloud has no zones)."""
    outlier: bool = False
    """True when the price is an outlier zone's (allowed only by the request)."""
    set_aside: tuple[str, ...] = ()
    """Outlier zones whose lower prices were not used."""


@dataclass(frozen=True)
class Site:
    """One instance type in one region: its GPUs, network, prices and host size."""

    cloud: str
    region: str
    instance_type: str
    gpu: str
    gpu_count: float
    """GPUs per instance (fractions are rejected later)."""
    network: InstanceNetwork
    on_demand: ZonePrice | None
    spot: ZonePrice | None
    zones: int
    """Catalog rows (zones) merged into this site."""
    as_of: str
    """The newest price date among the rows."""
    vcpus: float | None
    memory_gib: float | None


_AWS_LOCAL_ZONE = re.compile(r"^[a-z]{2,6}\d-[a-z]+\d+-az\d+$")
"""AWS Local Zone IDs: region prefix, a metro segment, then the zone (``use1-atl2-az1``)."""


def _best(prices: list[tuple[float, str | None]], allow_outliers: bool) -> ZonePrice | None:
    if not prices:
        return None
    if len(prices) == 1:
        return ZonePrice(prices[0][0], prices[0][1])
    prices = sorted(prices, key=lambda p: (p[0], p[1] or ""))
    # opt-in zones first, then price outliers among the rest
    outliers: list[tuple[float, str | None]] = [
        (p, z) for p, z in prices if z and _AWS_LOCAL_ZONE.match(z)
    ]
    if prices[0][0] < OUTLIER_RATIO * prices[-1][0]:  # otherwise no zone can be an outlier
        for price, zone in prices:
            others = [p for p, z in prices if z != zone]
            if not others:  # the same zone listed twice: nothing to compare against
                continue
            if (price, zone) not in outliers and price < OUTLIER_RATIO * statistics.median(others):
                outliers.append((price, zone))
    if allow_outliers or len(outliers) == len(prices):
        price, zone = prices[0]
        return ZonePrice(price, zone, outlier=(price, zone) in outliers)
    kept = [p for p in prices if p not in outliers]
    price, zone = kept[0]
    return ZonePrice(price, zone, set_aside=tuple(sorted(str(z) for _, z in outliers)))


def build_sites(
    offers: Sequence[Offer], request: PlanRequest, clouds: set[str], gpus: set[str] | None
) -> tuple[Site, ...]:
    """Group the offers that pass the request's filters into sites (module docstring)."""
    groups: dict[tuple[str, str, str, str, float], list[Offer]] = {}
    for o in offers:
        if o.cloud not in clouds or (gpus is not None and o.gpu not in gpus):
            continue
        if request.regions and not any(fnmatch.fnmatchcase(o.region, p) for p in request.regions):
            continue
        groups.setdefault((o.cloud, o.region, o.instance_type, o.gpu, o.gpu_count), []).append(o)
    sites = []
    for (cloud, region, itype, gpu, count), rows in sorted(groups.items()):
        od = [
            (o.on_demand_usd_per_hour, o.zone) for o in rows if o.on_demand_usd_per_hour is not None
        ]
        sp = [
            (o.spot_usd_per_hour, o.zone)
            for o in rows
            if o.spot_usd_per_hour is not None and o.has_spot_discount
        ]
        net = (
            given_network(request.inter_node_gbit_s)
            if request.inter_node_gbit_s is not None
            else as_launched(
                cloud,
                for_tier(instance_network(cloud, itype), request.network_tier),
                request.aws_efa_interfaces,
            )
        )
        first = rows[0]
        sites.append(
            Site(
                cloud=cloud,
                region=region,
                instance_type=itype,
                gpu=gpu,
                gpu_count=count,
                network=net,
                on_demand=_best(od, request.allow_zone_outliers),
                spot=_best(sp, request.allow_zone_outliers),
                zones=len(rows),
                as_of=max(o.as_of for o in rows),
                vcpus=first.vcpus,
                memory_gib=first.memory_gib,
            )
        )
    return tuple(sites)


def zone_outliers(offers: Sequence[Offer], *, spot: bool) -> set[tuple[str, str, str, str]]:
    """(cloud, region, instance type, zone) of every row a plan would set aside for its price
    (spot or on-demand): AWS Local Zones and zones far below their region's others. ``offers``
    marks them the same way so the two commands agree on what a region costs."""
    groups: dict[tuple[str, str, str, str, float], dict[str, float]] = {}
    for o in offers:
        price = (
            (o.spot_usd_per_hour if o.has_spot_discount else None)
            if spot
            else o.on_demand_usd_per_hour
        )
        if price is not None and o.zone:  # as build_sites groups them; one price per zone
            zones = groups.setdefault((o.cloud, o.region, o.instance_type, o.gpu, o.gpu_count), {})
            zones[o.zone] = min(price, zones.get(o.zone, price))
    out: set[tuple[str, str, str, str]] = set()
    for (cloud, region, itype, _gpu, _count), zones in groups.items():
        best = _best([(p, z) for z, p in zones.items()], allow_outliers=False)
        if best is not None:
            out.update((cloud, region, itype, z) for z in best.set_aside)
            if best.outlier and best.zone:  # every zone an outlier: the one used is one too
                out.add((cloud, region, itype, best.zone))
    return out
