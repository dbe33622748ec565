"""The ``gpuwise`` command: one typer app, one error handler.

Command modules import only typer and the standard library at the top; the library (numpy,
scipy, torch, prometheus-client, ...) is imported inside each command, so ``gpuwise --help``
stays fast. Register a command by adding it to :func:`_register`.

Exit codes: 0 success; 1 internal error (a bug: please report it); 2 bad input or environment
(one line ``error: <what> — To fix: <how>``); other codes are documented by the command that
returns them (``gpuwise plan``: 3 = no option meets the
constraints; ``gpuwise doctor``: 3 = a check failed).

Hostile surroundings: a reader that stops early (``gpuwise offers | head -1``) ends the command
quietly with 0; stdout on a full disk, or closed, is one error line and 2; a terminal that cannot
encode "—", "×", ... (``LANG=C``, ``PYTHONIOENCODING=ascii``) gets ASCII look-alikes.
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, get_args

import typer

from gpuwise.base import settings
from gpuwise.base.version import __version__
from gpuwise.errors import GpuwiseError

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2

app = typer.Typer(
    name="gpuwise",
    help="Choose, pay less for, run safely on, and see cloud GPUs for PyTorch work.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},  # = HELP_OPTION_NAMES
)


class _State:
    debug: bool = settings.flag("GPUWISE_DEBUG")


state = _State()


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"gpuwise {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version_callback,
            is_eager=True,
            help="Show the version and exit.",
        ),
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    """Choose, pay less for, run safely on, and see cloud GPUs for PyTorch work."""
    if debug:
        state.debug = True


def _register() -> None:
    """Commands in the order `gpuwise --help` lists them: the job's path first (ARCHITECTURE.md)."""
    from gpuwise.cli import bench, catalog, doctor, estimate, fleet, gpus, monitoring, offers, plan
    from gpuwise.cli import run as run_cmd
    from gpuwise.cli.calibrate import calibrate

    app.command("gpus")(gpus.gpus)
    app.command("offers")(offers.offers)
    app.command("estimate")(estimate.estimate)
    app.command("plan")(plan.plan_command)
    app.command("fleet")(fleet.fleet)
    app.command("tco")(fleet.tco)
    app.command("vendors")(fleet.vendors)
    app.command("run", context_settings=run_cmd.CONTEXT)(run_cmd.run)
    app.command("exporter")(monitoring.exporter)
    app.command("monitor")(monitoring.monitor)
    app.command("report")(monitoring.report)
    app.command("bench")(bench.bench)
    app.command("calibrate")(calibrate)
    app.command("doctor")(doctor.doctor)
    app.add_typer(catalog.app, name="catalog")


_register()

HELP_OPTION_NAMES = ("-h", "--help")


def _plain_metavars(command: Any) -> Any:
    """Help shows ``--cloud TEXT``, ``--db PATH``, ``--limit N`` and a bare ``--json``, never ``<list[str]>``.

    typer labels every option with its Python annotation (``<bool>``, ``<list[Path]>``); this sets
    each option's metavar (unless one was declared) from what it takes: nothing for a flag, ``PATH``
    for files and folders, ``N`` for whole numbers, ``NUMBER`` for other numbers, ``TEXT`` for the
    rest (counts like ``7B`` and durations like ``24h`` are text; the help gives examples).
    Choices keep typer's ``<a|b>`` list. Short words keep the help readable at 80 columns.
    """
    help_option = command.get_help_option(
        typer.Context(command, help_option_names=list(HELP_OPTION_NAMES))
    )
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if param.param_type_name != "option" or param.metavar is not None:
            continue
        desc = getattr(param, "type_descriptor", None)
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif desc is not None and desc.is_choice:
            continue
        elif desc is not None and (desc.is_path or Path in get_args(desc.annotation)):
            param.metavar = "PATH"
        else:
            kinds = (
                {int, float} & {desc.annotation, *get_args(desc.annotation)}
                if desc is not None
                else set()
            )
            param.metavar = "N" if kinds == {int} else "NUMBER" if kinds else "TEXT"
    for sub in (getattr(command, "commands", None) or {}).values():
        _plain_metavars(sub)
    return command


def get_cli() -> Any:
    """The click command tree of ``gpuwise`` as users see it (help with plain metavars)."""
    return _plain_metavars(typer.main.get_command(app))


# Options whose value may be left out (`--from-skypilot [DIR]`): typer has no optional-value
# options, so a bare one gets this value inserted before parsing.
_OPTIONAL_VALUE_OPTIONS = {"--from-skypilot": "default"}


def _fill_optional_values(args: list[str]) -> list[str]:
    out: list[str] = []
    for i, arg in enumerate(args):
        out.append(arg)
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg in _OPTIONAL_VALUE_OPTIONS and (nxt is None or nxt.startswith("-")):
            out.append(_OPTIONAL_VALUE_OPTIONS[arg])
    return out


def _print_error(text: str) -> None:
    # One line, always: a message quoting a file or a parser's multi-line text is folded.
    sys.stderr.write("error: " + " ".join(text.split()) + "\n")


# What an ASCII-only terminal (LANG=C, PYTHONIOENCODING=ascii) shows for the few non-ASCII
# characters gpuwise prints; anything else becomes "?".
_ASCII_FALLBACK = {
    "—": "-",
    "–": "-",
    "‑": "-",
    "−": "-",
    "…": "...",
    "×": "x",
    "·": "*",
    "≤": "<=",
    "≥": ">=",
    "≈": "~",
    "→": "->",
    "←": "<-",
    "±": "+/-",
    "µ": "u",
    "’": "'",
    "‘": "'",
    "“": '"',
    "”": '"',
    "•": "*",
    "✓": "ok",
    "✗": "x",
    "°": " deg",
    "★": "*",
    "÷": "/",
    "↔": "<->",
    "⇒": "=>",
    "²": "^2",
    "§": "S",
    "├": "+",
    "└": "+",
    "─": "-",
    "│": "|",
    "μ": "u",
    "√": "sqrt",
    "Σ": "sum",
}


def _ascii_fallback(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start : exc.end]
    return "".join(_ASCII_FALLBACK.get(ch, "?") for ch in bad), exc.end


codecs.register_error("gpuwise-ascii", _ascii_fallback)


def _fit_streams_to_encoding() -> None:
    """Make stdout/stderr print what they cannot encode as ASCII look-alikes instead of crashing."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            "—×…".encode(encoding)
        except UnicodeEncodeError:
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(errors="gpuwise-ascii")
        except LookupError:
            pass


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's final flush cannot fail again on a dead stdout."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (
        OSError,
        ValueError,
        AttributeError,
    ):  # no real fd (captured in tests): nothing to silence
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpuwise`` console script; returns the exit code."""
    if sys.stdout is None or sys.stderr is None:  # started with `>&-`: there is nowhere to print
        closed = "stdout" if sys.stdout is None else "stderr"
        if sys.stderr is not None:
            _print_error(
                f"{closed} is closed — To fix: run gpuwise with {closed} open (redirect it to a file)"
            )
        return EXIT_USAGE
    _fit_streams_to_encoding()
    out, err = sys.stdout, sys.stderr
    try:
        return _main(argv)
    except SystemExit as exc:
        if exc.code != 1 or (
            sys.stdout is out and not isinstance(exc.__context__, BrokenPipeError)
        ):
            raise
        # typer or rich met a closed pipe (EPIPE) and exits 1 (typer after swapping in quiet
        # streams). The reader went away: not a bug, nothing to say.
        sys.stdout, sys.stderr = out, err
        _silence_stdout()
        return EXIT_OK
    except (
        BrokenPipeError
    ):  # the reader went away (`gpuwise gpus | head -1`): what it read is the answer
        _silence_stdout()
        return EXIT_OK
    except OSError as exc:  # stdout is a full disk (/dev/full) or a failed device
        _silence_stdout()
        _print_error(
            f"cannot write the output: {exc.strerror or exc} — To fix: free space on the output's "
            "disk, or redirect stdout elsewhere"
        )
        return EXIT_USAGE


def _main(argv: Sequence[str] | None) -> int:
    state.debug = settings.flag("GPUWISE_DEBUG") or "--debug" in (
        argv if argv is not None else sys.argv
    )
    command = get_cli()
    try:
        args = _fill_optional_values(list(argv) if argv is not None else sys.argv[1:])
        rv = command.main(args=args, prog_name="gpuwise", standalone_mode=False)
        sys.stdout.flush()  # a write error on stdout surfaces here, not in the interpreter's exit
    except GpuwiseError as exc:
        if state.debug:
            import traceback

            traceback.print_exc()
        _print_error(exc.one_line())
        return EXIT_USAGE
    except typer.TyperException as exc:  # typer's (vendored click's) usage errors
        if not exc.format_message():  # bare `gpuwise`: the help was the answer
            return EXIT_OK
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "gpuwise"
        fix = f" — To fix: see `{where} --help`" if exc.exit_code == EXIT_USAGE else ""
        _print_error(f"{exc.format_message()}{fix}")
        return exc.exit_code
    except typer.Abort:
        _print_error("aborted")
        return 130
    except OSError as exc:
        if _stdout_is_broken(exc):
            raise  # main() reports a closed pipe or a full disk under stdout
        return _internal_error(exc)
    except Exception as exc:  # a bug: say so, show the traceback only with --debug
        return _internal_error(exc)
    return rv if isinstance(rv, int) else EXIT_OK


def _internal_error(exc: Exception) -> int:
    if state.debug:
        raise exc
    _print_error(
        f"internal error: {type(exc).__name__}: {exc} — To fix: rerun with --debug "
        "and report the traceback"
    )
    return EXIT_INTERNAL


_OUTPUT_ERRNOS = {errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG}


def _stdout_is_broken(exc: OSError) -> bool:
    """True when ``exc`` came from stdout (closed pipe, full disk): stdout then refuses a probe line."""
    if exc.errno not in _OUTPUT_ERRNOS:
        return False
    try:  # the failed write may have been dropped from the buffer: probe with one more
        sys.stdout.write("\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        return True
    return False


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
