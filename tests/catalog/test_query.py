"""Filtering and sorting offers, on a tiny catalog."""

from __future__ import annotations

import pytest

from gpuwise.catalog import Offer, OfferQuery, cheapest_per_gpu, query_offers, sort_offers
from gpuwise.errors import InputError


def offer(
    cloud: str,
    region: str,
    gpu: str,
    n: float,
    price: float | None,
    spot: float | None = None,
    itype: str = "t",
) -> Offer:
    return Offer(
        cloud, region, None, itype, gpu, n, 80.0, 8, 64, price, spot, "x86_64", "test", "2026"
    )


CATALOG = [
    offer("aws", "us-east-1", "H100", 8, 98.0, 40.0, "p5"),
    offer("aws", "eu-west-1", "H100", 8, 110.0, 120.0, "p5"),  # spot above on-demand: no discount
    offer("lambda", "us-west-1", "H100", 8, 24.0, None, "8x"),
    offer("lambda", "us-west-1", "H100", 1, 3.3, None, "1x"),
    offer("gcp", "us-central1", "L4", 1, 0.7, 0.2, "g2"),
    offer("aws", "us-east-1", "L4", 0.125, 0.2, 0.05, "g6f"),  # a fraction of a GPU
]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (OfferQuery(gpu="H100", count=8), {"p5", "8x"}),
        (OfferQuery(gpu="h100", region="us-*"), {"p5", "8x", "1x"}),
        (
            OfferQuery(gpu="H100", spot=True),
            {"p5"},
        ),  # eu-west-1 spot is no discount; lambda has none
        (OfferQuery(max_price_usd_per_hour=3.3), {"1x", "g2", "g6f"}),
        (
            OfferQuery(spot=True, max_price_usd_per_hour=0.1),
            {"g6f"},
        ),  # cap applies to the spot price
        (OfferQuery(clouds=("lambda",)), {"8x", "1x"}),
        (OfferQuery(min_count=2), {"p5", "8x"}),
    ],
)
def test_query(query: OfferQuery, expected: set[str]) -> None:
    assert {o.instance_type for o in query_offers(CATALOG, query)} == expected


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (OfferQuery(gpu="H1000"), "unknown GPU 'H1000'"),
        (OfferQuery(clouds=("lamda",)), "unknown cloud 'lamda'"),
        (OfferQuery(region="mars-*"), "no region matches"),
    ],
)
def test_bad_names_get_did_you_mean(query: OfferQuery, message: str) -> None:
    with pytest.raises(InputError, match=message):
        query_offers(CATALOG, query)


def test_sorting() -> None:
    assert [o.instance_type for o in sort_offers(CATALOG[:4], "price")] == ["1x", "8x", "p5", "p5"]
    by_gpu = sort_offers(CATALOG[:4], "gpu-price")
    assert [o.on_demand_usd_per_gpu_hour for o in by_gpu] == [3.0, 3.3, 12.25, 13.75]
    assert sort_offers(CATALOG[:4], "spot")[0].region == "us-east-1"  # only real spot first


def test_cheapest_per_gpu_ignores_fractions_and_fake_spot() -> None:
    od, spot = cheapest_per_gpu(CATALOG, spot=False), cheapest_per_gpu(CATALOG, spot=True)
    assert od["H100"].usd_per_gpu_hour == 3.0 and od["H100"].cloud == "lambda"
    assert spot["H100"].usd_per_gpu_hour == 5.0
    assert od["L4"].usd_per_gpu_hour == 0.7  # g6f's 1/8 GPU is not a whole-GPU price
