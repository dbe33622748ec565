"""Workload flags for every command that takes a workload, generated from one table.

The options are defined once, in :data:`gpuwise.estimate.WORKLOAD_OPTIONS` (name, kind,
default, unit, help, and the stack each default follows). :func:`workload_options` turns a command
function into one that takes all of them as flags::

    @workload_options(setup=("gpus_per_node", "inter_node_gbps"))
    def estimate(workload_request: WorkloadRequest, gpu: GpuOpt = "A100-80GB", ...) -> None:
        wl = workload_request.workload(calibration)

so ``--seq-len`` has the same type, default and help in ``estimate`` and ``plan`` (a test walks the
whole CLI surface). Numbers are taken as text so ``7B``, ``2e12`` and ``1.5T`` work; the library
parses and checks them (bad values raise InputError → exit 2). Only typer, click and the standard
library are imported at module level.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from gpuwise.cli._flags import named_as_flags
from gpuwise.estimate import OPTIONS, SETUP_OPTIONS, WORKLOAD_OPTIONS, OptionSpec

if TYPE_CHECKING:
    from gpuwise.estimate import Calibration, Workload

F = TypeVar("F", bound=Callable[..., Any])


def _help(o: OptionSpec) -> str:
    text = o.help
    if o.kind == "choice" and o.default is not None and "default" not in text:
        text += f" Default {o.default}."
    return text


def _annotation(o: OptionSpec) -> Any:
    """``Annotated[<type>, typer.Option(...)]`` for one option of the table."""
    kw: dict[str, Any] = {"help": _help(o), "rich_help_panel": o.panel, "show_default": False}
    if o.metavar:
        kw["metavar"] = o.metavar
    elif o.kind == "choice":
        kw["metavar"] = "<" + "|".join(o.choices) + ">"
    if o.kind == "switch":
        return Annotated[bool, typer.Option(o.flag, **kw)]
    if o.kind == "gbps":
        return Annotated[float | None, typer.Option(o.flag, **kw)]
    if o.kind == "int" and o.name == "gpus_per_node":
        return Annotated[int | None, typer.Option(o.flag, **kw)]
    typ: Any = str if o.default is not None else str | None
    return Annotated[typ, typer.Option(o.flag, **kw)]


def _parameter(o: OptionSpec) -> inspect.Parameter:
    return inspect.Parameter(
        o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=_annotation(o)
    )


@dataclass(frozen=True)
class WorkloadRequest:
    """What a command was given for its workload: every option's value, and which were typed."""

    values: dict[str, Any]
    """Option name → value as parsed (text for numbers, bool for switches)."""
    explicit: frozenset[str] = field(default_factory=frozenset)
    """Options given on the command line (the rest may come from the calibration file)."""

    def options(self, calibration: Calibration | None = None) -> dict[str, Any]:
        """Workload option values: typed ones, then the calibration file's ``workload`` section,
        then the table's defaults."""
        out = {o.name: self.values.get(o.name, o.default) for o in WORKLOAD_OPTIONS}
        stack = calibration.workload if calibration is not None else {}
        for name, value in stack.items():
            if name not in self.explicit:
                out[name] = value
        return out

    def workload(self, calibration: Calibration | None = None) -> Workload:
        """The checked Workload (InputError/EstimateError/DataFileError on bad input)."""
        from gpuwise.estimate import workload_from_options

        with named_as_flags(WORKLOAD_FLAGS):
            return workload_from_options(**self.options(calibration))

    def setup(self, name: str) -> Any:
        """A setup option's value (``gpus_per_node``, ``inter_node_gbps``)."""
        return self.values.get(name, OPTIONS[name].default)


def workload_options(*, setup: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Give a command every workload flag (and the GPU-wiring flags named in ``setup``) from the
    options table; the command receives them as one ``workload_request: WorkloadRequest`` argument."""
    specs = (*WORKLOAD_OPTIONS, *(o for o in SETUP_OPTIONS if o.name in setup))

    def decorate(func: F) -> F:
        sig = inspect.signature(func, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "workload_request"]

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            ctx = kwargs.pop(_CONTEXT)
            request = request_from_context(ctx, kwargs)
            for o in specs:
                kwargs.pop(o.name)
            return func(workload_request=request, **kwargs)

        context = inspect.Parameter(
            _CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context
        )
        params = [context, *(_parameter(o) for o in specs)] + [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own
        ]
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params} | {
            "return": sig.return_annotation
        }
        return command  # type: ignore[return-value]

    return decorate


_CONTEXT = "workload_context"


def _typed(ctx: typer.Context | None, name: str) -> bool:
    """Whether option ``name`` was given on the command line (or by an environment variable)."""
    if ctx is None:
        return False
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def request_from_context(ctx: typer.Context | None, params: Mapping[str, Any]) -> WorkloadRequest:
    """The request a command receives: its parsed option values by name, and which were typed."""
    values = {name: params[name] for name in OPTIONS if name in params}
    return WorkloadRequest(values, frozenset(n for n in values if _typed(ctx, n)))


def request_from_values(values: Mapping[str, Any]) -> WorkloadRequest:
    """A request from option values by name (defaults for the rest), as a command would receive."""
    full = {o.name: o.default for o in OPTIONS.values()} | dict(values)
    return WorkloadRequest(full, frozenset(values))


GpuOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        help="GPU model or alias, e.g. A100-80GB, H100, L4 (default: the GPU of --instance-type, "
        "else A100-80GB).",
    ),
]
DEFAULT_GPU = "A100-80GB"
GpusOpt = Annotated[int, typer.Option("--gpus", help="Number of GPUs.")]

# Library errors name the Python argument (``zero=4``); the CLI names the flag (``--zero 4``).
WORKLOAD_FLAGS = {o.name: o.flag for o in OPTIONS.values()} | {"gpus": "--gpus"}
