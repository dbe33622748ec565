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
from collections.abc import Collection, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

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
    """A rich console: the terminal's width; piped or captured, ``$COLUMNS`` when set, else 160."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else _columns_env() or _PIPED_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


# Piped output without $COLUMNS: wide enough for the widest table whole (a file has no width).
_PIPED_WIDTH = 160
# A text column (names) may be folded onto several lines, but not narrower than this.
_TEXT_FLOOR = 12


def _columns_env() -> int | None:
    import os

    raw = os.environ.get("COLUMNS", "").strip()
    return int(raw) if raw.isdigit() and 20 <= int(raw) <= 10_000 else None


def print_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    left: Collection[str] = (),
    whole: Collection[str] = (),
    drop: Sequence[str] = (),
    out: Console | None = None,
) -> None:
    """Print a table that fits the console: numbers and ``whole`` names on one line, other
    names folded onto several lines if need be, and never "…".

    When even that is too wide, the columns in ``drop`` go first, in that order (least
    important first), and a dim line names them; ``--json`` always has every field.
    """
    from rich.cells import cell_len

    out = out or console()
    natural = [
        max([cell_len(col), *(cell_len(r[i]) for r in rows)]) for i, col in enumerate(columns)
    ]
    minimum = []
    for i, col in enumerate(columns):
        word = max(cell_len(w) for w in col.split())  # a header may wrap between words
        if col in left and col not in whole:
            minimum.append(min(natural[i], max(word, _TEXT_FLOOR)))
        else:
            minimum.append(max([word, *(cell_len(r[i]) for r in rows)]))  # rows may be empty
    kept = list(range(len(columns)))
    hidden: list[str] = []

    def needed() -> int:
        return sum(minimum[i] for i in kept) + 3 * len(kept) + 1  # padding and borders

    for name in drop:
        if needed() <= out.width:
            break
        kept.remove(columns.index(name))
        hidden.append(name)
    widths = {i: minimum[i] for i in kept}
    spare = out.width - needed()
    for i in sorted(kept, key=lambda i: i in {columns.index(c) for c in left}):  # numbers first
        grow = max(0, min(spare, natural[i] - widths[i]))
        widths[i] += grow
        spare -= grow
    from rich.table import Table

    table = Table(title=title)
    for i in kept:
        justify: Literal["left", "right"] = "left" if columns[i] in left else "right"
        table.add_column(columns[i], justify=justify, width=widths[i], overflow="fold")
    for r in rows:
        table.add_row(*(r[i] for i in kept))
    out.print(table)
    if hidden:
        out.print(f"[dim]Not shown in {out.width} columns: {', '.join(hidden)} (see --json).[/dim]")


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
