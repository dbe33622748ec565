"""Rendering shared by all commands: ``--json`` documents and rich tables.

``--json`` prints exactly one JSON document on stdout and nothing else; NaN and infinities are
never written (they become ``null``), numpy scalars become plain numbers, dataclasses dicts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import sys
from collections.abc import Collection, Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout and nothing else.")
]


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types for dataclasses, numpy scalars/arrays, paths, dates, enums, tuples."""
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        to_dict = getattr(obj, "to_dict", None)
        data = (
            to_dict()
            if callable(to_dict)
            else {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        )
        return to_jsonable(data)
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (dt.datetime, dt.date)):
        return obj.isoformat()
    if isinstance(obj, Enum):
        return to_jsonable(obj.value)
    item = getattr(obj, "item", None)  # numpy scalar
    if callable(item) and getattr(obj, "shape", None) == ():
        return to_jsonable(item())
    tolist = getattr(obj, "tolist", None)  # numpy array
    if callable(tolist):
        return to_jsonable(tolist())
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(data), indent=2, allow_nan=False) + "\n")


def console(stderr: bool = False) -> Console:
    """A rich console; when output is piped or captured, wide enough for whole tables (no "…")."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 160
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


def make_table(
    columns: Collection[str], *, title: str | None = None, left: Collection[str] = ()
) -> Table:
    """A rich table with these column headers: numbers right-aligned, the ``left`` ones (names) left."""
    from rich.table import Table

    t = Table(title=title)
    for col in columns:
        t.add_column(col, justify="left" if col in left else "right")
    return t


def money(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"${value:,.{digits}f}"


def number(value: float | None, fmt: str = ",.1f") -> str:
    return "—" if value is None else format(value, fmt)


def split_list(values: list[str] | None) -> list[str]:
    """``--cloud aws,gcp --cloud lambda`` → ``['aws', 'gcp', 'lambda']``."""
    return [v.strip() for raw in values or [] for v in raw.split(",") if v.strip()]


CatalogFlag = Annotated[
    list[Path] | None,
    typer.Option(
        "--catalog",
        help="Use only these offer files (gpuwise or SkyPilot CSV) or SkyPilot "
        "catalog folders instead of the default catalog. Repeatable.",
    ),
]
