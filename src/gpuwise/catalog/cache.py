"""A parsed copy of a gpuwise-schema CSV, so a large catalog store loads without re-parsing it.

Parsing and validating 40,000 CSV rows costs far more than the query that follows, and the store
only changes when ``gpuwise catalog update`` writes it. So the parsed rows are kept in a cache file
(``<data dir>/cache/catalog-<name>.pickle``) together with the SHA-256 of the exact CSV bytes they
came from, the origin string and the column list. The cache is used only when all of those match
the file being read now; anything else (a changed, replaced or edited CSV, another gpuwise version's
format, a truncated or corrupt cache file) is ignored and the CSV is parsed again, which rewrites
the cache atomically. The answers are the same either way: the cache holds exactly the values that
:func:`~gpuwise.catalog.offer.parse_offer_csv` produced.

The file is a pickle of plain data only (a dict of str/float/None tuples), written by gpuwise, and
it is read with an unpickler that refuses every class or function reference, so a planted file
cannot run code: at worst it is ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import pickle
from pathlib import Path
from typing import Any

from gpuwise.base.paths import data_dir, write_bytes_atomic
from gpuwise.catalog.offer import OFFER_COLUMNS, Offer, parse_offer_csv
from gpuwise.errors import CatalogError

CACHE_FORMAT = 1
"""Bump when the cached layout or the parser's output changes."""


def cache_path(name: str) -> Path:
    """Where the parsed copy of the CSV called ``name`` is kept."""
    return data_dir() / "cache" / f"catalog-{name}.pickle"


class _PlainUnpickler(pickle.Unpickler):
    """Loads dicts, lists, tuples, strings, numbers and None; refuses any class or function."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}")


def _read(path: Path, digest: str, origin: str) -> list[Offer] | None:
    try:
        data = _PlainUnpickler(io.BytesIO(path.read_bytes())).load()
    except Exception:  # missing, unreadable, truncated, corrupt, refused: parse the CSV instead
        return None
    if not (
        isinstance(data, dict)
        and data.get("format") == CACHE_FORMAT
        and data.get("sha256") == digest
        and data.get("origin") == origin
        and data.get("columns") == list(OFFER_COLUMNS)
    ):
        return None
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows:
        return None
    try:
        return _build(rows)
    except (TypeError, ValueError):  # a row that is not a tuple of the right width
        return None


def _build(rows: list[tuple[Any, ...]]) -> list[Offer]:
    """Offers from cached field tuples, without re-running the checks the CSV parse already did."""
    if not all(type(row) is tuple for row in rows):
        raise TypeError("a cached row is not a tuple")

    def make(
        row: tuple[Any, ...],
        new: Any = object.__new__,
        set_: Any = object.__setattr__,
        cols: tuple[str, ...] = OFFER_COLUMNS,
    ) -> Offer:
        offer: Offer = new(Offer)
        set_(offer, "__dict__", dict(zip(cols, row, strict=True)))
        return offer

    return list(map(make, rows))


def _write(path: Path, digest: str, origin: str, offers: list[Offer]) -> None:
    strings: dict[str, str] = {}  # one object per distinct string: a smaller, faster pickle
    rows = [
        tuple(strings.setdefault(v, v) if isinstance(v, str) else v for v in o.__dict__.values())
        for o in offers
    ]
    blob = pickle.dumps(
        {
            "format": CACHE_FORMAT,
            "sha256": digest,
            "origin": origin,
            "columns": list(OFFER_COLUMNS),
            "rows": rows,
        },
        protocol=pickle.HIGHEST_PROTOCOL,
    )
    with contextlib.suppress(OSError):  # a read-only data folder only costs speed
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, blob)


def decode_text(data: bytes, origin: str) -> str:
    """UTF-8 text (a BOM dropped) of an offers file's bytes; an error names ``origin``."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CatalogError(
            f"{origin}: not UTF-8 text (byte {exc.start})", hint="save the file as UTF-8 CSV"
        ) from None


def parse_offer_bytes(data: bytes, origin: str, name: str) -> list[Offer]:
    """:func:`parse_offer_csv` of UTF-8 CSV bytes, served from the cache ``name`` when it matches."""
    digest = hashlib.sha256(data).hexdigest()
    path = cache_path(name)
    offers = _read(path, digest, origin)
    if offers is not None:
        return offers
    offers = parse_offer_csv(decode_text(data, origin), origin)
    if list(offers[0].__dict__) == list(OFFER_COLUMNS):
        _write(path, digest, origin, offers)
    return offers
