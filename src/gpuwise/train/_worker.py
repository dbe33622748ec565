"""How ``gpuwise run`` starts each worker: ``PYTHON [its flags] _worker.py SCRIPT [args]``.

The launcher runs this file by its path, under the interpreter and with the interpreter flags
the command line names (``gpuwise run -- python -u -X dev train.py``, or another virtual
environment's ``python``), through torchrun's ``--no-python``. It then:

1. ties the worker's life to its parent's (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``): when the
   launcher or its torchrun dies, even of SIGKILL, no worker goes on training and writing the
   checkpoint folder; ``GPUWISE_PARENT_PID`` names the parent it was started by, so a worker whose
   parent died before the call ends at once;
2. runs ``SCRIPT`` (or ``-m MODULE``, ``-c CODE``) as the interpreter itself would: ``sys.argv``,
   ``sys.path[0]`` and ``__main__`` as with ``python SCRIPT``;
3. turns a gpuwise usage error that escapes the script (a ``GpuwiseError`` a retry cannot change:
   not a storage, device or checkpoint problem) into one line ``error: <what> — To fix: <how>`` on
   stderr, the same line in ``GPUWISE_RUN_DIR/usage-error``, and exit code 2, which ends the
   run at once instead of being retried as a crash.

``--exec CMD ...`` (a command that is not Python) does step 1 and then replaces itself with CMD.

It imports nothing of gpuwise (the other interpreter may not have it; when the script raised a
gpuwise error, gpuwise is loaded) and keeps to syntax every supported Python reads.
"""

from __future__ import annotations

import os
import sys

PARENT_ENV = "GPUWISE_PARENT_PID"
RUN_DIR_ENV = "GPUWISE_RUN_DIR"
"""Both declared in :mod:`gpuwise.base.settings`; read directly here, since this file cannot
import gpuwise (module docstring)."""
USAGE_ERROR_FILE = "usage-error"
EXIT_USAGE = 2
RETRIED_ERRORS = ("StorageError", "DeviceError", "CheckpointError")
"""gpuwise errors that may pass on a retry (storage, driver, a checkpoint being written)."""
PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = 9) -> None:
    """Linux: get ``sig`` (SIGKILL) when the parent dies; exit at once when it already did."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):  # no libc prctl: nothing to tie
        return
    expected = os.environ.get(PARENT_ENV, "")
    if expected.isdigit() and os.getppid() != int(expected):
        os._exit(128 + sig)  # the parent died before prctl: as if the signal had come


def _usage_error(exc: BaseException) -> bool:
    errors = sys.modules.get("gpuwise.errors")
    base = getattr(errors, "GpuwiseError", None)
    if base is None or not isinstance(exc, base):
        return False
    return not any(cls.__name__ in RETRIED_ERRORS for cls in type(exc).__mro__)


def _report(exc: BaseException) -> None:
    one_line = getattr(exc, "one_line", None)
    text = "error: " + (one_line() if callable(one_line) else str(exc))
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
    run_dir = os.environ.get(RUN_DIR_ENV)
    if run_dir:
        try:
            with open(os.path.join(run_dir, USAGE_ERROR_FILE), "w") as f:
                f.write(text + "\n")
        except OSError:
            pass


def _run(args: list[str]) -> None:
    import runpy

    here = os.path.dirname(os.path.realpath(__file__))
    ours = bool(sys.path) and os.path.realpath(sys.path[0] or ".") == here
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]  # runpy puts the module's file first
        if ours:
            sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        if ours:
            sys.path[0] = ""
        import types

        module = types.ModuleType("__main__")  # a fresh __main__, as `python -c` has
        sys.modules["__main__"] = module
        exec(compile(args[1], "<string>", "exec"), module.__dict__)
    else:
        sys.argv = list(args)
        if ours:
            sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


def main() -> None:
    args = sys.argv[1:]
    if not args:
        sys.stderr.write("usage: _worker.py (SCRIPT | -m MODULE | -c CODE | --exec CMD) [ARGS]\n")
        sys.exit(EXIT_USAGE)
    die_with_parent()
    if args[0] == "--exec":
        os.execvp(args[1], args[1:])
    try:
        _run(args)
    except BaseException as exc:
        if not _usage_error(exc):
            raise
        _report(exc)
        sys.exit(EXIT_USAGE)


if __name__ == "__main__":
    main()
