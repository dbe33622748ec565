"""What one GPU-hour costs on this machine: a configured price, or the catalog's.

Order: an explicit price (``--price-usd-per-hour`` / ``GPUWISE_GPU_PRICE_USD_PER_HOUR``), then the
instance type (``--instance-type`` / ``GPUWISE_INSTANCE_TYPE``, or the node facts the exporter
detected: see :mod:`gpuwise.monitor.node`) looked up in the offers catalog, in its region and at
its capacity type (spot or on-demand) where the catalog has them. Without an instance type,
``report`` may fall back to the catalog's cheapest on-demand price for the GPU model (labelled as
such: you may pay more); the exporter never does (``fallback_cheapest=False``): a machine it
cannot identify is labelled unknown and left unpriced. No network here: detection is the
caller's.

A long-running exporter picks up a refreshed catalog store (``gpuwise catalog update --fetch`` on
a schedule, see ``deploy/``): the store's manifest is checked at most every
:data:`STORE_CHECK_S` seconds and the catalog is read again when it changed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpuwise.base import settings
from gpuwise.catalog import Offer
from gpuwise.errors import InputError
from gpuwise.monitor.node import NodeFacts
from gpuwise.units import parse_money_usd


@dataclass(frozen=True)
class GpuPrice:
    """The price used for one GPU model."""

    usd_per_gpu_hour: float | None
    """On-demand dollars per GPU-hour; None when nothing is known."""
    source: str
    """Where the price came from, e.g. ``configured`` or ``catalog: aws us-east-1 p5.48xlarge``;
    starts with ``unknown`` when no price is known."""
    instance_type: str | None = None
    """The instance type priced (None: not known)."""
    region: str | None = None
    """The region priced."""
    capacity_type: str | None = None
    """``on-demand`` or ``spot``: which catalog price was used."""


def canonical_gpu(model: str) -> str | None:
    """gpuwise's name for an NVML model name (``NVIDIA H100 80GB HBM3`` → ``H100``), or None."""
    from gpuwise.hardware import canonical_gpu_name

    return canonical_gpu_name(model)


STORE_CHECK_S = 60.0
"""How often a :class:`PriceBook` that read the catalog itself looks for a refreshed store."""


def _store_stamp() -> tuple[int, int] | None:
    """(mtime ns, size) of the catalog store's manifest, rewritten by every update; None if absent."""
    from gpuwise.catalog.sources import store_path

    try:
        st = store_path().with_name("manifest.json").stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


class PriceBook:
    """Resolves and caches :class:`GpuPrice` per GPU model name (again after the store changes)."""

    def __init__(
        self,
        *,
        price_usd_per_hour: float | str | None = None,
        instance_type: str | None = None,
        cloud: str | None = None,
        region: str | None = None,
        offers: Sequence[Offer] | None = None,
        node: NodeFacts | None = None,
        fallback_cheapest: bool = True,
    ) -> None:
        env_price = settings.text("GPUWISE_GPU_PRICE_USD_PER_HOUR")
        raw = price_usd_per_hour if price_usd_per_hour is not None else env_price
        # name where a bad value came from: an environment variable is easy to forget
        what = (
            "--price-usd-per-hour"
            if price_usd_per_hour is not None
            else "GPUWISE_GPU_PRICE_USD_PER_HOUR"
        )
        self.configured = None if raw in (None, "") else parse_money_usd(raw, what)
        self.instance_type = instance_type or settings.text("GPUWISE_INSTANCE_TYPE")
        self._instance_type_from = "" if instance_type else " (from GPUWISE_INSTANCE_TYPE)"
        self.cloud = cloud or settings.text("GPUWISE_CLOUD")
        self.region = region or settings.text("GPUWISE_REGION")
        self.capacity_type: str | None = None
        # detected facts: an instance the catalog does not know is labelled, not an error
        self._detected = False
        if node is not None and not self.instance_type and node.instance_type:
            self.instance_type, self._detected = node.instance_type, True
            self._instance_type_from = f" (from {node.source})"
            self.cloud = self.cloud or node.cloud
            self.region = self.region or node.region
        if node is not None:
            self.capacity_type = node.capacity_type
        self.fallback_cheapest = fallback_cheapest
        self._offers = offers
        self._own_catalog = offers is None
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self.store_check_s = STORE_CHECK_S
        self._cache: dict[str, GpuPrice] = {}

    @property
    def offers(self) -> Sequence[Offer]:
        if self._offers is None:
            from gpuwise.catalog import load_catalog

            self._stamp = _store_stamp()
            self._checked = time.monotonic()
            self._offers = load_catalog().offers
        return self._offers

    def _reload_if_refreshed(self) -> None:
        if not self._own_catalog or self._offers is None:
            return
        now = time.monotonic()
        if now - self._checked < self.store_check_s:
            return
        self._checked = now
        if _store_stamp() != self._stamp:
            self._offers = None  # read again on next use
            self._cache.clear()

    def price(self, model: str) -> GpuPrice:
        self._reload_if_refreshed()
        hit = self._cache.get(model)
        if hit is None:
            hit = self._cache[model] = self._resolve(model)
        return hit

    def _resolve(self, model: str) -> GpuPrice:
        if self.configured is not None:
            return GpuPrice(
                self.configured, "configured", self.instance_type, self.region, self.capacity_type
            )
        if self.instance_type:
            return self._instance_price()
        if not self.fallback_cheapest:
            return GpuPrice(None, "unknown instance: give --price-usd-per-hour or --instance-type")
        name = canonical_gpu(model)
        if name is None:
            return GpuPrice(None, "unknown GPU model: give --price-usd-per-hour")
        from gpuwise.catalog import cheapest_per_gpu

        cheapest = cheapest_per_gpu(self.offers, spot=False).get(name)
        if cheapest is None:
            return GpuPrice(None, f"no {name} offer in the catalog: give --price-usd-per-hour")
        return GpuPrice(
            cheapest.usd_per_gpu_hour,
            f"catalog cheapest on-demand {name}: {cheapest.cloud} {cheapest.region} {cheapest.instance_type}",
        )

    def _instance_price(self) -> GpuPrice:
        """The catalog price of this instance type: its region if the catalog has it, else any
        region (said so); its capacity type's price if known (spot where the node is spot)."""
        it = self.instance_type
        same = [
            o
            for o in self.offers
            if o.instance_type == it
            and (self.cloud is None or o.cloud == self.cloud)
            and o.on_demand_usd_per_gpu_hour is not None
        ]
        if not same:
            if self._detected:
                return GpuPrice(
                    None,
                    f"unknown instance type {it}{self._instance_type_from}: not in the catalog",
                    it,
                    self.region,
                    self.capacity_type,
                )
            from gpuwise.errors import did_you_mean

            raise InputError(
                f"instance type {it!r}{self._instance_type_from} is not in the catalog"
                + (f" for cloud {self.cloud}" if self.cloud else ""),
                hint="give --price-usd-per-hour instead, or check `gpuwise offers`",
                suggestions=did_you_mean(it or "", {o.instance_type for o in self.offers}),
            )
        here = [o for o in same if self.region is None or o.region == self.region]
        where = ""
        if not here:
            here, where = same, f" (region {self.region} not in the catalog)"
        spot = self.capacity_type == "spot"
        if spot and any(o.spot_usd_per_gpu_hour is not None for o in here):
            best = min(
                (o for o in here if o.spot_usd_per_gpu_hour is not None),
                key=lambda o: o.spot_usd_per_gpu_hour or 0.0,
            )
            usd, kind = best.spot_usd_per_gpu_hour, "spot"
        else:
            best = min(here, key=lambda o: o.on_demand_usd_per_gpu_hour or 0.0)
            usd, kind = best.on_demand_usd_per_gpu_hour, "on-demand"
            if spot:
                where += " (no spot price in the catalog: on-demand)"
        return GpuPrice(
            usd,
            f"catalog {kind}: {best.cloud} {best.region} {best.instance_type}{where}",
            best.instance_type,
            best.region,
            kind,
        )
