"""The options of ``gpuwise run``, generated from :class:`~gpuwise.train.LaunchSpec`.

The table is the launch configuration itself (``gpuwise/train/launch_spec.py``): each field that
is a flag carries its flag, help and metavar. :func:`run_flags` gives the command one typer option
per such field, in field order, as :func:`~gpuwise.cli._plan_options.plan_flags` does for
``plan``; :meth:`RunFlags.spec` is the one place that turns what was typed into a
:class:`~gpuwise.train.LaunchSpec` (the launch environment fills in what was left out; the spec
validates itself).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer

from gpuwise.train import LaunchSpec, RunFlag

F = TypeVar("F", bound=Callable[..., Any])
_FLAGS = "flags"


@dataclass(frozen=True)
class RunFlags:
    """``gpuwise run``'s flags as typed, by :class:`~gpuwise.train.LaunchSpec` field name (None:
    left out, for a field the launch environment fills in)."""

    values: Mapping[str, Any]

    def spec(self, command: Sequence[str]) -> LaunchSpec:
        """The launch of ``command`` these flags ask for (InputError when unusable)."""
        from gpuwise.train import from_environment

        env = from_environment()
        fields: dict[str, Any] = {}
        for f, flag in LaunchSpec.flags():
            value = self.values[f.name]
            if flag.from_environment and value is None:
                value = env.get(f.name, f.default)
            elif flag.parse is not None:
                value = flag.parse(value)
            fields[f.name] = value
        return LaunchSpec(tuple(command), **fields)


def _option(f: dataclasses.Field[Any], flag: RunFlag, typ: Any) -> inspect.Parameter:
    """The command parameter of one field: ``Annotated[<type>, typer.Option(...)] = default``."""
    default: Any = f.default
    if flag.parse is not None:  # typed as text, turned into the field's value
        typ, default = str, flag.text_default
    if flag.from_environment:  # left out: None, and the environment or the field's default
        typ, default = typ | None, None
    kw: dict[str, Any] = {"help": flag.help}
    if flag.metavar is not None:
        kw["metavar"] = flag.metavar
    annotation = Annotated[typ, typer.Option(flag.decls, **kw)]
    return inspect.Parameter(
        f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def run_flags(func: F) -> F:
    """Give a command every flag of :class:`~gpuwise.train.LaunchSpec`, in the table's order,
    where the command has its ``flags: RunFlags`` parameter; the command receives them as that
    argument."""
    sig = inspect.signature(func, eval_str=True)
    hints = typing.get_type_hints(LaunchSpec)
    table = [_option(f, flag, hints[f.name]) for f, flag in LaunchSpec.flags()]
    names = [p.name for p in table]
    keyword = inspect.Parameter.KEYWORD_ONLY
    params: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        params += table if p.name == _FLAGS else [p.replace(kind=keyword)]

    @functools.wraps(func)
    def command(**kwargs: Any) -> Any:
        flags = RunFlags({name: kwargs.pop(name) for name in names})
        return func(**{_FLAGS: flags}, **kwargs)

    command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params} | {
        "return": sig.return_annotation
    }
    return command  # type: ignore[return-value]
