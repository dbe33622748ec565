"""`gpuwise plan`'s own options are one table (PlanFlags): flags generated from it, one mapping to
PlanRequest, and no second list of names joined through ``locals()``."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from typing import Any

from gpuwise.cli import plan as plan_cli
from gpuwise.cli._plan_options import PlanFlags
from gpuwise.planner import PlanRequest


def _plan_click_command() -> Any:
    from gpuwise.cli.main import get_cli

    return get_cli().commands["plan"]  # type: ignore[attr-defined]


def test_every_table_field_is_a_flag_with_the_tables_default() -> None:
    params = {p.name: p for p in _plan_click_command().params}
    for f in dataclasses.fields(PlanFlags):
        assert f.name in params, f.name
        default = params[f.name].default
        assert default == f.default or (default is None and f.default is None), f.name


def test_the_flag_defaults_make_the_library_defaults() -> None:
    """The CLI's defaults (text as typed: "8%", "0.9") mean what PlanRequest's defaults mean."""
    assert PlanFlags().request(spot_mtbf=None, inter_node_gbps=None) == PlanRequest()


def test_flags_map_to_request_fields() -> None:
    flags = PlanFlags(
        gpu=["H100,A100-80GB", "L4"],
        cloud=["AWS"],
        billing=["Spot"],
        deadline="2d",
        memory_headroom="10%",
        search=False,
        download_gbps=2.5,
    )
    request = flags.request(spot_mtbf="72h", inter_node_gbps=400.0)
    assert request.gpus == ("H100", "A100-80GB", "L4")
    assert request.clouds == ("aws",) and request.billings == ("spot",)
    assert request.deadline_hours == 48.0 and request.spot_mtbf_hours == 72.0
    assert request.memory_headroom == 0.10 and request.search_settings is False
    assert request.inter_node_gbit_s == 400.0 and request.download_gbit_s == 2.5


def test_plan_command_lists_no_option_twice() -> None:
    """The command takes the table as one argument; no name tuple, no ``locals()``."""
    source = Path(plan_cli.__file__).read_text()
    calls = {
        node.func.id
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert "locals" not in calls
    inner = inspect.unwrap(plan_cli.plan_command)
    own = set(inspect.signature(inner).parameters)
    assert own == {"workload_request", "flags", "catalog", "max_price_age", "json"}
    assert not own & {f.name for f in dataclasses.fields(PlanFlags)}
