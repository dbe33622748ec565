"""Cloud GPU offers: one :class:`Offer` record from every source, and the queries over them.

Sources (bundled snapshot, SkyPilot catalog folder, user CSV, user store) live in
:mod:`~gpuwise.catalog.sources`; SkyPilot's file quirks in :mod:`~gpuwise.catalog.skypilot`;
reserved/committed discounts in :mod:`~gpuwise.catalog.reserved`; ``catalog update`` in
:mod:`~gpuwise.catalog.update`. Pure Python: no network, no CLI.
"""

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
from gpuwise.catalog.sources import Catalog, Layer, load_catalog

__all__ = [
    "BILLINGS",
    "OFFER_COLUMNS",
    "SORT_KEYS",
    "Billing",
    "Catalog",
    "CheapestPrice",
    "Layer",
    "Offer",
    "OfferQuery",
    "cheapest_per_gpu",
    "load_catalog",
    "offers_to_csv",
    "parse_offer_csv",
    "query_offers",
    "sort_offers",
]
