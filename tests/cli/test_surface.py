"""Freeze the CLI surface: every command, its options and their metavars. Other tools script against these names.

A change here must be deliberate: rerun with GPUWISE_UPDATE_GOLDEN=1 and commit the golden file.
"""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden" / "surface.txt"


def _option(p) -> str:  # type: ignore[no-untyped-def]
    """``--output/-o PATH``: every spelling of one option, then its metavar as help shows it."""
    names = "/".join([*p.opts, *getattr(p, "secondary_opts", [])])
    return f"{names} {p.metavar}" if p.metavar else names


def _walk(command, path: str) -> list[str]:  # type: ignore[no-untyped-def]
    params = sorted(
        (
            _option(p)
            for p in command.params
            if any(o.startswith("-") for o in getattr(p, "opts", []))
        ),
        key=lambda text: text.lstrip("-"),
    )
    args = [
        p.name.upper() for p in command.params if getattr(p, "param_type_name", "") == "argument"
    ]
    lines = [f"{path} {' '.join(args)} :: {', '.join(params)}".replace("  ", " ")]
    for name in sorted(getattr(command, "commands", {}) or {}):
        lines += _walk(command.commands[name], f"{path} {name}")
    return lines


def surface() -> str:
    from gpuwise.cli.main import get_cli

    return "\n".join(_walk(get_cli(), "gpuwise")) + "\n"


def test_cli_surface_is_frozen() -> None:
    current = surface()
    if os.environ.get("GPUWISE_UPDATE_GOLDEN"):
        GOLDEN.write_text(current)
    assert current == GOLDEN.read_text(), (
        "CLI surface changed: rerun with GPUWISE_UPDATE_GOLDEN=1 if deliberate"
    )


def test_contract_commands_exist() -> None:
    # The command table of the README (and ARCHITECTURE.md); each landed with its issue.
    names = {
        line.split(" :: ")[0].split()[1]
        for line in surface().splitlines()
        if line.split()[1] != "::"
    }
    assert {"gpus", "offers", "catalog"} <= names
