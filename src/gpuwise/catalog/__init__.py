"""Cloud GPU offers: one :class:`Offer` record from every source, and the queries over them.

Sources (bundled snapshot, SkyPilot catalog folder, user CSV, user store) live in
:mod:`~gpuwise.catalog.sources`; SkyPilot's file quirks in :mod:`~gpuwise.catalog.skypilot`;
reserved/committed discounts in :mod:`~gpuwise.catalog.reserved`; ``catalog update`` in
:mod:`~gpuwise.catalog.update`. Pure Python, no CLI; nothing here talks to the network unless
asked. The fetch names (:func:`fetch_bytes`, :func:`remote_sources`, ...) resolve lazily, so
``import gpuwise.catalog`` does not load the HTTP and TLS stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuwise.base import lazy
from gpuwise.catalog.age import PriceAge, parse_as_of, parse_max_price_age_days, price_age
from gpuwise.catalog.merge import DEFAULT_PRECEDENCE, OFFER_SOURCES, precedence
from gpuwise.catalog.offer import (
    BILLINGS,
    OFFER_COLUMNS,
    Billing,
    Offer,
    offers_to_csv,
    parse_offer_csv,
)
from gpuwise.catalog.query import (
    SORT_KEYS,
    CheapestPrice,
    OfferQuery,
    cheapest_per_gpu,
    query_offers,
    sort_offers,
)
from gpuwise.catalog.reserved import ReservedTerm
from gpuwise.catalog.sources import (
    Catalog,
    CsvFile,
    Layer,
    SkyPilotDir,
    load_catalog,
    source_for_path,
    store_path,
)
from gpuwise.catalog.update import (
    UpdateMode,
    apply_fetched,
    read_manifest,
    update_store,
    user_edited,
)

if TYPE_CHECKING:
    from gpuwise.catalog.fetch import FetchSettings as FetchSettings
    from gpuwise.catalog.fetch import fetch_bytes as fetch_bytes
    from gpuwise.catalog.fetch import seconds_text as seconds_text
    from gpuwise.catalog.remote import DEFAULT_FETCH as DEFAULT_FETCH
    from gpuwise.catalog.remote import REMOTE_SOURCES as REMOTE_SOURCES
    from gpuwise.catalog.remote import remote_sources as remote_sources
    from gpuwise.catalog.remote_common import drop_sovereign as drop_sovereign
    from gpuwise.catalog.remote_common import screen_fields as screen_fields

_LAZY: dict[str, str] = {
    # name: module that defines it (keep the TYPE_CHECKING imports above in step)
    "FetchSettings": "gpuwise.catalog.fetch",
    "fetch_bytes": "gpuwise.catalog.fetch",
    "seconds_text": "gpuwise.catalog.fetch",
    "DEFAULT_FETCH": "gpuwise.catalog.remote",
    "REMOTE_SOURCES": "gpuwise.catalog.remote",
    "remote_sources": "gpuwise.catalog.remote",
    "drop_sovereign": "gpuwise.catalog.remote_common",
    "screen_fields": "gpuwise.catalog.remote_common",
}

__all__ = [
    "BILLINGS",
    "DEFAULT_FETCH",
    "DEFAULT_PRECEDENCE",
    "OFFER_COLUMNS",
    "OFFER_SOURCES",
    "REMOTE_SOURCES",
    "SORT_KEYS",
    "Billing",
    "Catalog",
    "CheapestPrice",
    "CsvFile",
    "FetchSettings",
    "Layer",
    "Offer",
    "OfferQuery",
    "PriceAge",
    "ReservedTerm",
    "SkyPilotDir",
    "UpdateMode",
    "apply_fetched",
    "cheapest_per_gpu",
    "drop_sovereign",
    "fetch_bytes",
    "load_catalog",
    "offers_to_csv",
    "parse_as_of",
    "parse_max_price_age_days",
    "parse_offer_csv",
    "precedence",
    "price_age",
    "query_offers",
    "read_manifest",
    "remote_sources",
    "screen_fields",
    "seconds_text",
    "sort_offers",
    "source_for_path",
    "store_path",
    "update_store",
    "user_edited",
]


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, _LAZY, globals(), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
