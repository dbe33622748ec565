"""Freeze the CLI surface: every command and its options. Other tools script against these names.

A change here must be deliberate: rerun with GPUWISE_UPDATE_GOLDEN=1 and commit the golden file.
"""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden" / "surface.txt"


def _walk(command, path: str) -> list[str]:  # type: ignore[no-untyped-def]
    params = sorted(opt for p in command.params for opt in getattr(p, "opts", []) if opt.startswith("-"))
    args = [p.name.upper() for p in command.params if getattr(p, "param_type_name", "") == "argument"]
    lines = [f"{path} {' '.join(args)} :: {' '.join(params)}".replace("  ", " ")]
    for name in sorted(getattr(command, "commands", {}) or {}):
        lines += _walk(command.commands[name], f"{path} {name}")
    return lines


def surface() -> str:
    import typer

    from gpuwise.cli.main import app

    return "\n".join(_walk(typer.main.get_command(app), "gpuwise")) + "\n"


def test_cli_surface_is_frozen() -> None:
    current = surface()
    if os.environ.get("GPUWISE_UPDATE_GOLDEN"):
        GOLDEN.write_text(current)
    assert current == GOLDEN.read_text(), "CLI surface changed: rerun with GPUWISE_UPDATE_GOLDEN=1 if deliberate"


def test_contract_commands_exist() -> None:
    # DESIGN.md's command table; each lands with its issue.
    names = {line.split(" :: ")[0].split()[1] for line in surface().splitlines() if line.split()[1] != "::"}
    assert {"gpus", "offers", "catalog"} <= names
