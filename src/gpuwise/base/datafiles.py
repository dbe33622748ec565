"""Reading the text of gpuwise's data files; turning rows into values is each capability's job.

Bundled CSV tables carry the source of every figure in ``#`` comment lines, which
:func:`commented_csv` skips. Users keep YAML overrides (``reserved.yaml``, ``spot.yaml``) in the
config folder; :func:`read_user_yaml` reads one and names the file in a one-line error. The
``parse_*`` functions that check fields and name the bad row live with the data they build.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from gpuwise.errors import DataFileError, parse_error_text


def commented_csv(text: str) -> csv.DictReader[str]:
    """Rows of CSV ``text`` as dicts, with blank lines and ``#`` comment lines left out."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return csv.DictReader(io.StringIO("\n".join(lines)))


def read_user_yaml(path: Path) -> Any:
    """The parsed YAML in a user's override file; DataFileError naming it when unreadable or malformed."""
    import yaml

    try:
        return yaml.safe_load(path.read_text("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
        raise DataFileError(
            f"{path}: not valid YAML ({parse_error_text(exc)})", hint="fix the file or remove it"
        ) from None
