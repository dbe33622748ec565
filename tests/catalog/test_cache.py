"""The parsed-store cache: same answers as parsing the CSV, and never trusted when it does not match."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from gpuwise.catalog import OfferQuery, load_catalog, offers_to_csv, query_offers, sort_offers
from gpuwise.catalog.cache import cache_path
from gpuwise.catalog.offer import parse_offer_csv
from gpuwise.catalog.sources import BundledSnapshot, UserStore, layer_sources, store_path


def _write_store(offers: list, factor: int = 2) -> Path:
    big = [
        dataclasses.replace(o, region=f"{o.region}-c{i}" if i else o.region, source=f"test:{i}")
        for i in range(factor)
        for o in offers
    ]
    # one row left without source/as_of, so the origin fallback is part of what is cached
    big[-1] = dataclasses.replace(big[-1], source="", as_of="")
    path = store_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(offers_to_csv(big))
    return path


@pytest.fixture()
def bundled() -> list:
    return BundledSnapshot().read()[0]


def _plain(path: Path) -> list:
    return parse_offer_csv(path.read_text("utf-8"), str(path))


def test_cached_store_gives_the_same_offers_in_the_same_order(bundled: list) -> None:
    path = _write_store(bundled)
    first = UserStore().read()
    assert cache_path("store").is_file()
    second = UserStore().read()  # from the cache
    assert first == second
    assert second[0] == _plain(path)
    assert [type(o) for o in second[0][:3]] == [type(o) for o in bundled[:3]]
    assert second[0][-1].source == str(path) and second[0][-1].as_of == "unknown"
    # derived values and hashing behave as on parsed offers
    assert {o.key for o in second[0]} == {o.key for o in first[0]}
    assert [o.on_demand_usd_per_gpu_hour for o in second[0]] == [
        o.on_demand_usd_per_gpu_hour for o in first[0]
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        second[0][0].cloud = "x"  # type: ignore[misc]


def test_catalog_and_query_answers_match_the_plain_path(bundled: list) -> None:
    path = _write_store(bundled)
    load_catalog()  # writes the cache
    fast = load_catalog()
    # the plain path: both layers parsed from CSV, no cache, no skipped snapshot
    plain = layer_sources(
        [
            _Plain("bundled", BundledSnapshot().read()),
            _Plain("store", (_plain(path), str(path), max(o.as_of for o in _plain(path)))),
        ],
        per_cloud=True,
    )
    assert fast.offers == plain.offers
    assert fast.layers == plain.layers
    assert [(la.kind, la.rows, la.note) for la in fast.layers] == [
        ("bundled", 0, "superseded by a later source"),
        ("store", len(fast.offers), ""),
    ]
    for q in (
        OfferQuery(gpu="H100", count=8),
        OfferQuery(clouds=("aws",), region="us-*"),
        OfferQuery(spot=True),
    ):
        assert sort_offers(query_offers(fast.offers, q)) == sort_offers(
            query_offers(plain.offers, q)
        )


@dataclasses.dataclass(frozen=True)
class _Plain:
    kind: str
    result: tuple

    def read(self) -> tuple:
        return self.result


def test_store_with_some_clouds_still_layers_over_the_bundled_snapshot(bundled: list) -> None:
    aws = [o for o in bundled if o.cloud == "aws"][:5]
    _write_store(aws, factor=1)
    catalog = load_catalog()
    assert {o.cloud for o in catalog.offers} == {o.cloud for o in bundled}
    assert [o for o in catalog.offers if o.cloud == "aws"] == _plain(store_path())


def test_bundled_manifest_names_the_snapshot_clouds(bundled: list) -> None:
    clouds, as_of = BundledSnapshot().manifest()
    assert clouds == {o.cloud for o in bundled}
    assert as_of == BundledSnapshot().read()[2]


def test_changed_store_is_reparsed_not_served_from_a_stale_cache(bundled: list) -> None:
    path = _write_store(bundled)
    UserStore().read()
    old_cache = cache_path("store").read_bytes()
    changed = _plain(path)
    changed[0] = dataclasses.replace(changed[0], on_demand_usd_per_hour=123.5)
    path.write_text(offers_to_csv(changed))
    offers = UserStore().read()[0]
    assert offers[0].on_demand_usd_per_hour == 123.5
    assert offers == _plain(path)
    assert cache_path("store").read_bytes() != old_cache  # rebuilt for the new file


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # truncated
        lambda b: b"not a pickle at all",  # garbage
        lambda b: b"",  # empty
        lambda b: pickle.dumps({"format": 999}),  # another format
        lambda b: pickle.dumps(dataclasses.replace),  # a function reference: refused, never called
    ],
)
def test_corrupt_cache_is_ignored_and_rebuilt(bundled: list, damage) -> None:  # type: ignore[no-untyped-def]
    path = _write_store(bundled)
    UserStore().read()
    cache = cache_path("store")
    good = cache.read_bytes()
    cache.write_bytes(damage(good))
    assert UserStore().read()[0] == _plain(path)
    assert cache.read_bytes() != damage(good)
    assert UserStore().read()[0] == _plain(path)


def test_cache_with_matching_hash_but_bad_rows_is_ignored(bundled: list) -> None:
    path = _write_store(bundled)
    UserStore().read()
    cache = cache_path("store")
    data = pickle.loads(cache.read_bytes())
    data["rows"] = [row[:-1] for row in data["rows"]]  # one field short
    cache.write_bytes(pickle.dumps(data))
    assert UserStore().read()[0] == _plain(path)


def test_catalog_update_writes_the_cache(tmp_path: Path, bundled: list) -> None:
    from gpuwise.catalog.sources import CsvFile
    from gpuwise.catalog.update import update_store

    src = tmp_path / "mine.csv"
    src.write_text(
        offers_to_csv([dataclasses.replace(o, cloud="onprem", source="mine") for o in bundled[:4]])
    )
    update_store(CsvFile(src))
    assert cache_path("store").is_file()
    cached = pickle.loads(cache_path("store").read_bytes())
    assert len(cached["rows"]) == len(_plain(store_path()))


def test_unwritable_cache_folder_still_answers(bundled: list) -> None:
    path = _write_store(bundled)
    cache_path("store").parent.parent.mkdir(parents=True, exist_ok=True)
    cache_path("store").parent.write_text("a file where the cache folder would be")
    assert UserStore().read()[0] == _plain(path)
