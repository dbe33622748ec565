"""How ``gpuwise run`` reads a command line and what each rank runs for it.

``python -u -X dev train.py --lr 3`` is taken apart as the interpreter reads it (its own
options, then the script, ``-m module`` or ``-c code``, then the script's arguments), and every
rank runs that interpreter with those options, with :mod:`gpuwise.train._worker` before the
script (torchrun's ``--no-python``). A command that is not Python is ``exec``ed by the same file.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from gpuwise.errors import InputError


@dataclass(frozen=True)
class PythonCommand:
    """A command line that starts a Python interpreter, taken apart as the interpreter reads it."""

    interpreter: str
    """``python``, ``python3.11``, ``/other/venv/bin/python`` ... (as given)."""
    flags: tuple[str, ...]
    """The interpreter's own options: ``-u``, ``-O``, ``-X dev``, ``-W error`` ..."""
    target: tuple[str, ...]
    """``(script,)``, ``("-m", module)``, ``("-c", code)``, ``("-",)`` (stdin) or ``()`` (none)."""
    args: tuple[str, ...]
    """The script's own arguments."""


_PY_OPTIONS_WITH_VALUE = ("X", "W")
_PY_LONG_OPTIONS_WITH_VALUE = ("--check-hash-based-pycs",)


def split_python(command: tuple[str, ...] | list[str]) -> PythonCommand | None:
    """``python -u -X dev train.py --lr 3`` → interpreter, flags, target, args; None when the
    command is not a Python interpreter (its name does not start with ``python``)."""
    if not command or not os.path.basename(command[0]).startswith("python"):
        return None
    interpreter, rest = command[0], list(command[1:])
    flags: list[str] = []
    i = 0
    while i < len(rest):
        token = rest[i]
        if token == "--":  # the end of the options: the script follows
            return PythonCommand(
                interpreter, tuple(flags), tuple(rest[i + 1 : i + 2]), tuple(rest[i + 2 :])
            )
        if token == "-" or not token.startswith("-"):
            return PythonCommand(interpreter, tuple(flags), (token,), tuple(rest[i + 1 :]))
        if token.startswith("--"):
            takes = token in _PY_LONG_OPTIONS_WITH_VALUE
            flags += rest[i : i + 1 + takes]
            i += 1 + takes
            continue
        letters = token[1:]  # grouped short options: -uB, -Xdev, -uc CODE
        for j, letter in enumerate(letters):
            value = letters[j + 1 :]
            if letter in ("m", "c"):
                if j:
                    flags.append("-" + letters[:j])
                if value:
                    return PythonCommand(
                        interpreter, tuple(flags), (f"-{letter}", value), tuple(rest[i + 1 :])
                    )
                target = (f"-{letter}", *rest[i + 1 : i + 2])
                return PythonCommand(interpreter, tuple(flags), target, tuple(rest[i + 2 :]))
            if letter in _PY_OPTIONS_WITH_VALUE and not value:  # -X dev: the value follows
                flags += rest[i : i + 2]
                i += 2
                break
            if letter in _PY_OPTIONS_WITH_VALUE:  # -Xdev: the rest of the token is the value
                flags.append(token)
                i += 1
                break
        else:
            flags.append(token)
            i += 1
    return PythonCommand(interpreter, tuple(flags), (), ())


WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py")
"""The file every worker starts through (:mod:`gpuwise.train._worker`)."""


def worker_command(command: tuple[str, ...] | list[str]) -> list[str]:
    """What each rank runs for ``command``: the command's own interpreter and flags, with
    :mod:`._worker` before the script (it dies with its parent and turns a gpuwise usage error
    into exit 2); a command that is not Python through ``_worker.py --exec``."""
    python = split_python(command)
    if python is None:
        return [sys.executable, WORKER, "--exec", *command]
    if (
        not python.target
        or python.target[0] == "-"
        or len(python.target) < (2 if python.target[0] in ("-m", "-c") else 1)
    ):
        raise InputError(
            f"`{' '.join(command)}` names no script",
            hint="gpuwise run -- python [flags] train.py [args] (or -m module, -c code); not stdin",
        )
    return [python.interpreter, *python.flags, WORKER, *python.target, *python.args]
