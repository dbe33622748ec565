"""The repository cites nothing outside itself: no design file that is not in it, no sibling folder."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_TEXT = {".py", ".md", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".sh", ".html", ".json"}
# Spelled in pieces so this file does not match itself.
_FORBIDDEN = (
    "DESIGN" + ".md",
    "../" + "shared/",
    "shared/" + "data/",
    "research " + "notes",  # the team's notes live outside the repository: cite the source itself
    "notes " + "§",
)


def _files() -> list[Path]:
    out = []
    for top in ("src", "tests", "docs", "scripts", "benchmarks", "examples", "deploy", ".ci"):
        base = ROOT / top
        if base.is_dir():
            out += [p for p in base.rglob("*") if p.is_file() and p.suffix in _TEXT]
    return out + [p for p in ROOT.glob("*") if p.is_file() and p.suffix in _TEXT]


@pytest.mark.parametrize("needle", _FORBIDDEN)
def test_no_reference_outside_the_repository(needle: str) -> None:
    hits = [
        str(p.relative_to(ROOT))
        for p in _files()
        if needle in p.read_text("utf-8", errors="replace")
    ]
    assert not hits, f"{needle!r} in {hits}"
