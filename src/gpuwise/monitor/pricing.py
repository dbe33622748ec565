"""What one GPU-hour costs on this machine: a configured price, or the catalog's.

One path for the exporter, ``report`` (``--db``, ``--prometheus``, ``--fake``) and ``fleet``:
an explicit price (``--price-usd-per-hour`` / ``GPUWISE_GPU_PRICE_USD_PER_HOUR``) wins; else
the node's instance type (``--instance-type`` / ``GPUWISE_INSTANCE_TYPE``, the node facts the
exporter detected, see :mod:`gpuwise.monitor.node`, or the facts ``gpuwise monitor`` recorded
with each sample) looked up in the offers catalog, in its region and at its capacity type
(``GPUWISE_CAPACITY_TYPE`` or the node's: spot on spot nodes). A machine nobody identified is
never priced as the catalog's cheapest offer of its GPU model (that was 57 % low on an EKS p5
fleet): its GPU-hours are *unpriced*, counted and shown beside every total. An instance type the
catalog lacks is unpriced too when it was detected or set in the environment (an exporter keeps
serving, its price labelled unknown); only an explicit ``--instance-type`` flag is refused. No
network here: detection is the caller's.

A long-running exporter picks up a refreshed catalog store (``gpuwise catalog update --fetch`` on
a schedule, see ``deploy/``): the store's manifest is checked at most every
:data:`STORE_CHECK_S` seconds and the catalog is read again when it changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpuwise.base import settings
from gpuwise.catalog import Offer
from gpuwise.errors import InputError
from gpuwise.monitor.node import NodeFacts, parse_capacity_type
from gpuwise.units import parse_money_usd

log = logging.getLogger(__name__)


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
    """``on-demand``, ``spot`` or ``reserved``: the node's capacity type; the price is the
    catalog's for it where the catalog has one (see ``source``)."""


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
        capacity_type: str | None = None,
        offers: Sequence[Offer] | None = None,
        node: NodeFacts | None = None,
        fallback_cheapest: bool = False,
        strict: bool | None = None,
    ) -> None:
        """Flags (the keyword arguments) win over ``GPUWISE_*`` settings, which win over ``node``.
        ``fallback_cheapest`` (off everywhere gpuwise prices a bill) prices an unidentified
        machine at the catalog's cheapest offer of its GPU model, labelled as such. ``strict``
        (default: an instance type was given, as ``instance_type`` or ``GPUWISE_INSTANCE_TYPE``)
        refuses an instance type the catalog lacks (the exporter passes False);
        otherwise it is priced unknown and logged once, with a did-you-mean."""
        env_price = settings.text("GPUWISE_GPU_PRICE_USD_PER_HOUR")
        raw = price_usd_per_hour if price_usd_per_hour is not None else env_price
        # name where a bad value came from: an environment variable is easy to forget
        what = (
            "--price-usd-per-hour"
            if price_usd_per_hour is not None
            else "GPUWISE_GPU_PRICE_USD_PER_HOUR"
        )
        self.configured = None if raw in (None, "") else parse_money_usd(raw, what)
        env_it = settings.text("GPUWISE_INSTANCE_TYPE")
        self.instance_type = instance_type or env_it
        self._instance_type_from = "" if instance_type else " (from GPUWISE_INSTANCE_TYPE)"
        # an instance type the user gave and the catalog lacks is an error for a report; a
        # detected node (or an exporter: strict=False) leaves the price unknown instead, so an
        # exporter does not crash-loop over a gap in the catalog
        self._strict = bool(self.instance_type) if strict is None else strict
        self.cloud = cloud or settings.text("GPUWISE_CLOUD")
        self.region = region or settings.text("GPUWISE_REGION")
        self.capacity_type = parse_capacity_type(capacity_type, "--capacity-type") or (
            parse_capacity_type(settings.text("GPUWISE_CAPACITY_TYPE"), "GPUWISE_CAPACITY_TYPE")
        )
        if node is not None and not self.instance_type and node.instance_type:
            self.instance_type = node.instance_type
            self._instance_type_from = f" (from {node.source})"
            self.cloud = self.cloud or node.cloud
            self.region = self.region or node.region
        if node is not None and self.capacity_type is None:
            self.capacity_type = node.capacity_type
        self.fallback_cheapest = fallback_cheapest
        self._offers = offers
        self._own_catalog = offers is None
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self.store_check_s = STORE_CHECK_S
        self._cache: dict[str, GpuPrice] = {}
        self._for_node: dict[NodeFacts, PriceBook] = {}

    @property
    def explicit(self) -> bool:
        """A price or an instance type was given as a flag: it prices every sample, whatever
        the history recorded."""
        return self.configured is not None or self._strict

    def for_node(self, node: NodeFacts) -> PriceBook:
        """This book for a machine ``node`` describes (e.g. what ``gpuwise monitor`` recorded
        with a sample): a configured price or an instance-type flag still wins; the node's facts
        fill in what flags and settings left open. Shares the catalog; cached per node."""
        if self.configured is not None or self._strict or not node.instance_type:
            return self
        hit = self._for_node.get(node)
        if hit is None:
            hit = PriceBook.__new__(PriceBook)
            hit.__dict__.update(self.__dict__)
            hit.instance_type = node.instance_type
            hit._instance_type_from = f" (from {node.source})"
            hit.cloud = node.cloud or self.cloud
            hit.region = node.region or self.region
            hit.capacity_type = node.capacity_type or self.capacity_type
            hit._cache, hit._for_node = {}, {}
            hit._offers, hit._own_catalog = self.offers, False  # a report's book: no reload
            self._for_node[node] = hit
        return hit

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
            return GpuPrice(
                None,
                "unknown instance: give --instance-type (or GPUWISE_INSTANCE_TYPE, "
                "--node-info) or --price-usd-per-hour",
                None,
                self.region,
                self.capacity_type,
            )
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

    def _unknown_instance(self) -> GpuPrice:
        """The instance type is not in the catalog (for this cloud): an error for a flag the
        user typed, an unknown price otherwise. The suggestions never repeat the name itself."""
        from gpuwise.errors import did_you_mean

        it = self.instance_type or ""
        clouds = sorted({o.cloud for o in self.offers if o.instance_type == it})
        known = {
            o.instance_type
            for o in self.offers
            if (self.cloud is None or o.cloud == self.cloud) and o.instance_type != it
        }
        where = f" for cloud {self.cloud}" if self.cloud else ""
        if clouds:  # the name exists, in another cloud: the cloud is what is wrong
            where += f" (it is a {', '.join(clouds)} instance type)"
        suggestions = did_you_mean(it, known)
        if not self._strict:
            log.warning(
                "instance type %s%s is not in the catalog%s; its GPUs are unpriced%s",
                it,
                self._instance_type_from,
                where,
                f" (did you mean {', '.join(suggestions)}?)" if suggestions else "",
            )
            mean = f" (did you mean {', '.join(suggestions)}?)" if suggestions else ""
            return GpuPrice(
                None,
                f"unknown instance type {it}{self._instance_type_from}: not in the catalog"
                f"{where}{mean}",
                it,
                self.region,
                self.capacity_type,
            )
        raise InputError(
            f"instance type {it!r}{self._instance_type_from} is not in the catalog{where}",
            hint="give the cloud it runs in (--instance-cloud)"
            if clouds
            else "give --price-usd-per-hour instead, or check `gpuwise offers`",
            suggestions=suggestions,
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
            return self._unknown_instance()
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
            if self.capacity_type in ("spot", "reserved"):
                where += f" (no {self.capacity_type} price in the catalog: on-demand)"
        return GpuPrice(
            usd,
            f"catalog {kind}: {best.cloud} {best.region} {best.instance_type}{where}",
            best.instance_type,
            best.region,
            self.capacity_type or kind,
        )
