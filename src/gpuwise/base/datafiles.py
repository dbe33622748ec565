"""Reading the text of gpuwise's data files; turning rows into values is each capability's job.

Bundled CSV tables carry the source of every figure in ``#`` comment lines, which
:func:`commented_csv` skips. Users keep YAML overrides (``reserved.yaml``, ``spot.yaml``) in the
config folder; :func:`read_user_yaml` reads one and names the file in a one-line error. The
``parse_*`` functions that check fields and name the bad row live with the data they build.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from gpuwise.errors import DataFileError, parse_error_text


def commented_csv(text: str) -> csv.DictReader[str]:
    """Rows of CSV ``text`` as dicts, with blank lines and ``#`` comment lines left out."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return csv.DictReader(io.StringIO("\n".join(lines)))


# Bidirectional control characters (Unicode's explicit embeddings, overrides and isolates, and
# the implicit marks): a cell holding one displays in another order than it is stored, the
# "Trojan Source" trick (CVE-2021-42574). No GPU, region or instance name needs one.
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# A cell starting with one of these is a formula to a spreadsheet (OWASP "CSV Injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def refuse_bidi_controls(
    text: str, origin: str, error: type[DataFileError] = DataFileError
) -> None:
    """Raise ``error`` naming the row and column of the first bidi control character in CSV ``text``.

    One regular-expression scan of the whole text; the rows are read only to name the cell.
    """
    if _BIDI.search(text) is None:
        return
    rows = csv.reader(io.StringIO(text))
    header = next(rows, [])
    for lineno, cells in enumerate([header, *rows], start=1):
        for i, cell in enumerate(cells):
            if m := _BIDI.search(cell):
                column = header[i] if lineno > 1 and i < len(header) else f"{i + 1}"
                where = f"{origin}, header" if lineno == 1 else f"{origin}, row {lineno}"
                raise error(
                    f"{where}, column {column}: {cell!r} holds the bidirectional control "
                    f"character U+{ord(m.group()):04X}, which shows text in another order than "
                    "it is stored",
                    hint="delete that character from the cell",
                )
    raise error(  # inside a quoted line break or the like: still refused
        f"{origin}: holds a bidirectional control character", hint="delete that character"
    )


def csv_safe_cell(value: object) -> object:
    """A cell as written to CSV: text starting with ``= + - @``, tab or CR gets a leading ``'``.

    OWASP's rule against CSV (formula) injection: a spreadsheet then shows the text instead of
    running it. :func:`csv_text_cell` removes the quote again, so files round-trip.
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_text_cell(cell: str) -> str:
    """A text cell read from CSV, undoing :func:`csv_safe_cell`'s leading ``'``."""
    if cell.startswith("'") and cell[1:].startswith(_FORMULA_START):
        return cell[1:]
    return cell


def read_user_yaml(path: Path) -> Any:
    """The parsed YAML in a user's override file; DataFileError naming it when unreadable or malformed."""
    import yaml

    try:
        return yaml.safe_load(path.read_text("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
        raise DataFileError(
            f"{path}: not valid YAML ({parse_error_text(exc)})", hint="fix the file or remove it"
        ) from None
