"""One catalog from many ``--fetch`` sources, by rule.

The store holds the offers of every source that was fetched, side by side. Which source wins
when two of them price the same instance type in the same region is a per-cloud **precedence**
(:func:`precedence`; ``gpuwise catalog sources`` shows it, ``GPUWISE_CATALOG_PRECEDENCE`` changes
it). A fetch replaces only its own earlier rows; another source's rows for the same instance type
and region give way only to a source that ranks before it, and every such replacement is counted
in the fetch's notes. Rows of a source not named in a cloud's list (``--from-csv`` files) rank
after every named one.

Two guards look across sources:

- :func:`check_cloud_shrink`: a cloud of the store left with under three quarters of the offers
  it held, whichever sources they came from. A cloud the store does not hold yet is not guarded:
  its first fetch replaces the bundled snapshot (or SkyPilot folder) for it, as fetching is for,
  and :func:`superseded_notes` says how many of those offers no longer apply;
- :func:`check_price_jumps`: an offer whose price moves 100× or more, up or down, against the
  catalog in effect (store, else the lower layers).

Pure Python: no network, no writing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuwise.base import settings
from gpuwise.catalog.offer import Offer
from gpuwise.errors import CatalogError, InputError

DEFAULT_PRECEDENCE: dict[str, tuple[str, ...]] = {
    "azure": ("azure-prices", "skypilot", "gpuhunt"),
    "*": ("skypilot", "gpuhunt"),
}
"""Per cloud, the offer sources in the order they win (``*``: every other cloud). Azure's own
Retail Prices API is the first-hand source for Azure; SkyPilot's catalog beats gpuhunt elsewhere
because it lists every zone."""
OFFER_SOURCES = ("skypilot", "azure-prices", "gpuhunt")
"""The ``--fetch`` sources that bring offers (the others bring spot bands or reserved prices)."""
PRICE_JUMP = 100.0
"""An offer whose price is this many times higher or lower than the one in effect is refused
(a unit or schema change upstream), unless ``--allow-price-jump``."""
SHRINK_MIN_ROWS = 20
"""The cross-source shrink guard applies once a cloud has at least this many offers."""
SHRINK_KEEP = 0.75
"""A fetch that leaves a cloud with less than this share of its offers is refused."""

Triple = tuple[str, str, str]
"""(cloud, region, instance type): what two sources must both price to compete."""


def source_name(offer: Offer) -> str:
    """The ``--fetch`` source (or other origin) a stored row came from: ``skypilot:v8/aws`` →
    ``skypilot``, ``gpuhunt:gcp@2026… [gcp-a4]`` → ``gpuhunt``."""
    return offer.source.split(":", 1)[0]


def _triple(o: Offer) -> Triple:
    return (o.cloud, o.region, o.instance_type)


def precedence() -> dict[str, tuple[str, ...]]:
    """The per-cloud precedence in effect: :data:`DEFAULT_PRECEDENCE` with
    ``GPUWISE_CATALOG_PRECEDENCE`` (``azure=azure-prices,skypilot;gcp=gpuhunt,skypilot``) on top."""
    out = dict(DEFAULT_PRECEDENCE)
    text = settings.text("GPUWISE_CATALOG_PRECEDENCE") or ""
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        cloud, eq, names = part.partition("=")
        order = tuple(n.strip() for n in names.split(",") if n.strip())
        bad = [n for n in order if n not in OFFER_SOURCES]
        if not eq or not cloud.strip() or not order or bad or len(set(order)) != len(order):
            raise InputError(
                f"GPUWISE_CATALOG_PRECEDENCE: {part!r} is not CLOUD=SOURCE,SOURCE"
                + (f" ({', '.join(map(repr, bad))} is not an offer source)" if bad else ""),
                hint=f"e.g. `gcp=gpuhunt,skypilot;azure=azure-prices,skypilot`; sources: "
                f"{', '.join(OFFER_SOURCES)}; `*` for every other cloud",
            )
        out[cloud.strip().lower()] = order
    return out


def rank_for(order: dict[str, tuple[str, ...]]) -> Callable[[str, str], int]:
    """``rank(source, cloud)``: 0 wins; a source not listed for the cloud ranks after all listed."""

    def rank(source: str, cloud: str) -> int:
        names = order.get(cloud, order.get("*", ()))
        return names.index(source) if source in names else len(names)

    return rank


@dataclass(frozen=True)
class Merged:
    rows: list[Offer]
    notes: tuple[str, ...]


def merge_source(
    store_rows: Sequence[Offer],
    new: Sequence[Offer],
    source: str,
    clouds: Sequence[str],
    rank: Callable[[str, str], int],
) -> Merged:
    """The store after ``source`` brought ``new`` for ``clouds``: its own earlier rows there are
    replaced; another source's rows stay unless ``source`` ranks before it for that instance type
    and region (then they are replaced, and counted); ``source``'s rows for an instance type that a
    source ranking before it already prices are not taken (counted)."""
    covered = set(clouds)
    outside = [o for o in store_rows if o.cloud not in covered]
    theirs = [o for o in store_rows if o.cloud in covered and source_name(o) != source]
    # bundled-snapshot rows a --from-csv merge copied into the store: the fallback, not a source;
    # a fetch that covers their cloud supersedes them all (said in the notes)
    stale = Counter(o.cloud for o in theirs if source_name(o) == "bundled")
    theirs = [o for o in theirs if source_name(o) != "bundled"]
    owner: dict[Triple, str] = {}
    for o in theirs:
        t, name = _triple(o), source_name(o)
        if t not in owner or rank(name, o.cloud) < rank(owner[t], o.cloud):
            owner[t] = name
    lose_theirs: set[Triple] = set()
    lose_new: set[Triple] = set()
    for t in {_triple(o) for o in new} & owner.keys():
        (lose_theirs if rank(source, t[0]) <= rank(owner[t], t[0]) else lose_new).add(t)
    replaced = Counter((o.cloud, source_name(o)) for o in theirs if _triple(o) in lose_theirs)
    not_taken = Counter((o.cloud, owner[_triple(o)]) for o in new if _triple(o) in lose_new)
    notes = (
        [
            f"{cloud}: {n} offer(s) of the bundled snapshot kept in the store dropped ({source} now "
            f"covers {cloud})"
            for cloud, n in sorted(stale.items())
        ]
        + [
            f"{cloud}: {n} offer(s) from {other} replaced ({source} ranks before {other} for {cloud})"
            for (cloud, other), n in sorted(replaced.items())
        ]
        + [
            f"{cloud}: {n} offer(s) not taken ({other} ranks before {source} for {cloud})"
            for (cloud, other), n in sorted(not_taken.items())
        ]
    )
    rows = (
        outside
        + [o for o in theirs if _triple(o) not in lose_theirs]
        + [o for o in new if _triple(o) not in lose_new]
    )
    return Merged(rows, tuple(notes))


def in_effect(state: Sequence[Offer], before: Sequence[Offer], cloud: str) -> list[Offer]:
    """A cloud's offers in effect: the store's when it holds the cloud, else the lower layers'."""
    return [o for o in state if o.cloud == cloud] or [o for o in before if o.cloud == cloud]


def _origins(rows: Sequence[Offer]) -> str:
    counts = Counter(source_name(o) for o in rows)
    return ", ".join(f"{n} from {name}" for name, n in counts.most_common(3))


def check_cloud_shrink(
    source: str,
    clouds: Sequence[str],
    prev_state: Sequence[Offer],
    state: Sequence[Offer],
    before: Sequence[Offer],
) -> None:
    """Refuse when a cloud of the store would keep under :data:`SHRINK_KEEP` of its offers,
    whichever sources they came from (another source's zone rows replaced by fewer region rows,
    a truncated file). Bundled-snapshot rows in the store are the fallback, not counted."""
    for cloud in clouds:
        had = [o for o in prev_state if o.cloud == cloud and source_name(o) != "bundled"]
        now = sum(1 for o in state if o.cloud == cloud)
        if len(had) >= SHRINK_MIN_ROWS and now < len(had) * SHRINK_KEEP:
            raise CatalogError(
                f"{cloud} would go from {len(had)} offers in the store "
                f"({_origins(had)}) to {now} with {source}'s rows; refused so that no source's "
                "rows vanish unsaid",
                hint="change GPUWISE_CATALOG_PRECEDENCE (`gpuwise catalog sources`), or pass "
                "--allow-shrink if the drop is real",
            )


def superseded_notes(
    clouds: Sequence[str], prev_state: Sequence[Offer], before: Sequence[Offer]
) -> tuple[str, ...]:
    """For each cloud entering the store now: how many lower-layer offers stop applying."""
    out = []
    for cloud in clouds:
        if any(o.cloud == cloud for o in prev_state):
            continue
        lower = [o for o in before if o.cloud == cloud]
        if lower:
            out.append(
                f"{cloud}: first fetch into the store; it replaces {len(lower)} offer(s) of "
                f"{_origins(lower)} for {cloud}"
            )
    return tuple(out)


def check_price_jumps(
    source: str,
    new: Sequence[Offer],
    prev_state: Sequence[Offer],
    before: Sequence[Offer],
) -> None:
    """Refuse ``new`` when any offer's on-demand or spot price is :data:`PRICE_JUMP` times higher
    or lower than the price in effect for the same instance type, region and GPU count (from any
    source), naming how many and the first few."""
    prev: dict[tuple[str, str, str, float], Offer] = {}
    for cloud in sorted({o.cloud for o in new}):
        for o in in_effect(prev_state, before, cloud):
            prev.setdefault((*_triple(o), o.gpu_count), o)
    jumps: list[str] = []
    for o in new:
        old = prev.get((*_triple(o), o.gpu_count))
        if old is None:
            continue
        for kind, a, b in (
            ("on-demand", old.on_demand_usd_per_hour, o.on_demand_usd_per_hour),
            ("spot", old.spot_usd_per_hour, o.spot_usd_per_hour),
        ):
            if a and b and max(a / b, b / a) >= PRICE_JUMP:
                jumps.append(f"{o.cloud} {o.region} {o.instance_type} {kind} {a:g} → {b:g}")
    if jumps:
        raise CatalogError(
            f"{len(jumps)} {source} price(s) moved {PRICE_JUMP:g}× or more against the catalog "
            f"in effect (e.g. {'; '.join(jumps[:3])})",
            hint="likely a unit or schema change upstream; nothing from this source was imported "
            "(pass --allow-price-jump if the prices are right)",
        )
