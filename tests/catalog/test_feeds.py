"""Each source imports its real feed: Azure paging through the API's own ``:443``-style next
links, the whole Spot Advisor file, gpuhunt's flagged rows, AWS price-list duplicates, and
per-row refusal of odd or hostile values (served on loopback by a real HTTP server)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from tests.catalog.servers import FixtureServer


def _default_port_server() -> FixtureServer:
    """A fixture server on port 80 of a random 127.x address (any 127/8 address is loopback), so
    that the base URL has no port and Azure's next links carry the explicit ``:80``."""
    for _ in range(5):
        host = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
        try:
            return FixtureServer(host, 80)
        except OSError:
            continue
    pytest.skip("cannot bind port 80 on a loopback address (needs root or CAP_NET_BIND_SERVICE)")


@pytest.fixture
def port80(monkeypatch: pytest.MonkeyPatch) -> Iterator[FixtureServer]:
    srv = _default_port_server()
    monkeypatch.setenv("GPUWISE_AZURE_PRICES_URL", f"{srv.base}/azure/api/retail/prices")
    monkeypatch.setenv("GPUWISE_FETCH_TIMEOUT_S", "2")
    yield srv
    srv.close()


def test_azure_pages_through_a_next_link_with_the_default_port(cli, port80: FixtureServer) -> None:  # type: ignore[no-untyped-def]
    assert ":" not in port80.base.removeprefix("http://")  # the base names no port
    r = cli("catalog", "update", "--fetch", "azure-prices", "--json")
    assert r.code == 0, r.stderr
    assert "/azure/page2" in port80.hits  # the second page, linked as http://host:80/azure/page2
    (az,) = r.json()["sources"]
    assert az["reserved_prices"] == 2  # the reservations are on page 2


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (
            "https://prices.azure.com/api/retail/prices",
            "https://prices.azure.com:443/x?$skip=1",
            True,
        ),
        ("https://prices.azure.com/api", "https://PRICES.azure.com/api", True),
        ("http://h/api", "http://h:80/api", True),
        ("https://prices.azure.com/api", "https://prices.azure.com:444/api", False),
        ("https://prices.azure.com/api", "http://prices.azure.com:443/api", False),
        ("https://prices.azure.com/api", "https://example.com:443/api", False),
        ("https://prices.azure.com/api", "https://prices.azure.com:bad/api", False),
    ],
)
def test_origin_is_scheme_host_and_effective_port(a: str, b: str, same: bool) -> None:
    from gpuwise.catalog.remote_azure import same_origin_key

    assert (same_origin_key(a) == same_origin_key(b)) is same
