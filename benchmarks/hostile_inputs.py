"""Feed the CLI a few hundred hostile inputs; count internal errors, tracebacks and unclear errors.

Every option of every command (walked from the real click tree, so new flags are covered) gets
values a user or a script may pass by mistake: empty, NaN, infinities, negatives, huge numbers,
units where none belong, a BOM, a folder or an empty/binary/BOM file for a path. Then whole-file
cases (empty, BOM-prefixed, binary, truncated YAML/CSV/JSON), and surroundings that need real file
descriptors (LANG=C, a closed stdout, a reader that goes away), run as subprocesses.

A case passes when it ends with exit 0, 2 or 3 and, on exit 2, one ``error: ... — To fix: ...``
line. It fails on exit 1 ("internal error"), a traceback, or an error that is not one line.
No network: every fetch URL points at a closed port on 127.0.0.1.

    PYTHONPATH=src python benchmarks/hostile_inputs.py          # the table; exit 1 if any failed
    PYTHONPATH=src python benchmarks/hostile_inputs.py --show   # also each failing case
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Commands that run until stopped, start processes or measure hardware: called with the flags that
# make them finish at once, or skipped (their bad-input paths are covered by their own tests).
BASE_ARGS: dict[str, list[str]] = {
    "gpus": [],
    "offers": [],
    "estimate": ["--params", "1B"],
    "plan": ["--params", "1B", "--gpu", "H100", "--max-nodes", "1", "--cloud", "lambda"],
    "fleet": ["--profile", "--profile-hours", "48"],
    "tco": ["--gpu", "H100"],
    "vendors": ["--criteria", str(ROOT / "examples" / "vendors.yaml")],
    "report": ["--fake", "idle"],
    "monitor": ["--fake", "idle", "--reads", "1"],
    "exporter": ["--fake", "idle", "--once"],
    "doctor": ["--no-torch"],
    "catalog info": [],
}
SKIP_OPTIONS = {"--help", "--version", "--debug", "--html", "--save-demand", "--output", "--db"}
CASE_TIMEOUT_S = 60

VALUES = [
    "",  # empty
    "nan",
    "inf",
    "-1",
    "-1h",  # a negative duration
    "1e30h",  # a huge one
    "1e309",  # past a float
    "abc",
    "\ufeff8",  # a BOM pasted in front of a number
    "x" * 2000,
]


def _files(tmp: Path) -> dict[str, Path]:
    made = {
        "empty": tmp / "empty.csv",
        "bom": tmp / "bom.csv",
        "binary": tmp / "binary.bin",
        "yaml-broken": tmp / "broken.yaml",
        "json-broken": tmp / "broken.json",
        "folder": tmp / "folder",
        "missing": tmp / "missing" / "nothing.csv",
    }
    made["empty"].write_bytes(b"")
    made["bom"].write_bytes(b"\xef\xbb\xbftimestamp,gpu,gpus,interruptible\n")
    made["binary"].write_bytes(bytes(range(256)) * 4)
    made["yaml-broken"].write_text("vendors: [\n  - {name: a,\n")
    made["json-broken"].write_text('{"hidden_size": 4096, "num_attention_heads": ')
    made["folder"].mkdir()
    return made


def _commands() -> dict[str, list[tuple[str, str, bool]]]:
    """command path → [(option, metavar, is_flag)] from the real click tree."""
    from gpuwise.cli.main import get_cli

    out: dict[str, list[tuple[str, str, bool]]] = {}

    def walk(cmd: object, path: str) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, f"{path} {name}".strip())
            return
        params = []
        for p in getattr(cmd, "params", []):
            if p.param_type_name != "option":
                continue
            name = max(p.opts, key=len)
            params.append((name, str(p.metavar or ""), bool(getattr(p, "is_flag", False))))
        out[path] = params

    walk(get_cli(), "")
    return out


def cases(files: dict[str, Path]) -> Iterator[tuple[str, list[str]]]:
    """(kind, argv) for every option of every command that can run here."""
    for command, params in sorted(_commands().items()):
        if command not in BASE_ARGS:
            continue
        base = [*command.split(), *BASE_ARGS[command]]
        for name, metavar, is_flag in params:
            if is_flag or name in SKIP_OPTIONS or name in BASE_ARGS[command]:
                continue
            if metavar == "PATH":
                for kind, path in files.items():
                    yield f"{command} {name} <{kind} file>", [*base, name, str(path)]
                continue
            for value in VALUES:
                yield f"{command} {name}", [*base, name, value]
    # whole files in the places that read them
    for kind, path in files.items():
        yield f"fleet --demand <{kind}>", ["fleet", "--demand", str(path)]
        yield f"vendors --criteria <{kind}>", ["vendors", "--criteria", str(path)]
        yield f"estimate --model <{kind}>", ["estimate", "--model", str(path)]
        yield f"offers --catalog <{kind}>", ["offers", "--catalog", str(path)]
        yield f"report --fake <{kind}>", ["report", "--fake", str(path)]
        yield (
            f"catalog update --from-csv <{kind}>",
            [
                "catalog",
                "update",
                "--from-csv",
                str(path),
                "--dry-run",
            ],
        )


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    from gpuwise.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except _Timeout:
        code = -1
    except SystemExit as exc:  # a case that escapes main() is a finding too
        code = exc.code if isinstance(exc.code, int) else 1
        err.write("SystemExit escaped main()\n")
    except BaseException as exc:  # a benchmark counts a crash, it does not stop at one
        code = 1
        err.write(f"Traceback (escaped main): {type(exc).__name__}: {exc}\n")
    finally:
        signal.alarm(0)
    return code, out.getvalue(), err.getvalue()


def run_subprocess(argv: list[str], env: dict[str, str], fd: str = "") -> tuple[int, str, str]:
    """``python -m gpuwise ARGV``; ``fd``: "stdout-closed" (started with ``>&-``), "stdin-closed"."""
    p = subprocess.run(
        [sys.executable, "-m", "gpuwise", *argv],
        stdin=subprocess.DEVNULL,
        stdout=None if fd == "stdout-closed" else subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=env,
        timeout=CASE_TIMEOUT_S,
        check=False,
        preexec_fn=(lambda: os.close(1 if fd == "stdout-closed" else 0)) if fd else None,
    )
    return p.returncode, p.stdout or "", p.stderr


def verdict(code: int, stdout: str, stderr: str) -> str | None:
    """None when the answer is acceptable, else what is wrong."""
    text = stdout + stderr
    if code == -1:
        return "timeout"
    if "Traceback" in text:
        return "traceback"
    if code == 1 or "internal error" in stderr:
        return "internal error"
    if code not in (0, 2, 3):
        return f"exit {code}"
    if code == 2:
        lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
        if len(lines) != 1:
            return "not one error line"
        if "To fix" not in lines[0]:
            return "no fix in the error"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", action="store_true", help="print each failing case")
    ap.add_argument("--only", default="", help="run only the commands starting with this")
    args = ap.parse_args()
    failures: list[tuple[str, list[str], str, str]] = []
    kinds: Counter[str] = Counter()
    n = 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = {
            **os.environ,
            "GPUWISE_HOME": str(tmp / "home"),
            "GPUWISE_SKYPILOT_CATALOG": "off",
            "COLUMNS": "100",
        }
        for name in list(env):  # no fetch leaves the machine: a closed port on loopback
            if name.startswith("GPUWISE_") and name.endswith("_URL"):
                env[name] = "http://127.0.0.1:9"
        os.environ.clear()
        os.environ.update(env)
        os.chdir(tmp)
        files = _files(tmp)
        for label, argv in cases(files):
            if not label.startswith(args.only):
                continue
            n += 1
            code, out, err = run_in_process(argv)
            why = verdict(code, out, err)
            if why:
                failures.append((label, argv, why, (err or out).strip().splitlines()[-1:][0:1]))
                kinds[why] += 1
        # surroundings that need real file descriptors
        ascii_env = {**env, "LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": "ascii"}
        fd_cases = [
            ("LANG=C gpus", ["gpus"], ascii_env, ""),
            ("LANG=C plan", ["plan", *BASE_ARGS["plan"]], ascii_env, ""),
            ("LANG=C doctor", ["doctor", "--no-torch"], ascii_env, ""),
            ("LANG=C estimate error", ["estimate", "--params", "nan"], ascii_env, ""),
            ("stdout closed", ["offers"], env, "stdout-closed"),
            ("stdin closed", ["estimate", "--params", "7B"], env, "stdin-closed"),
        ]
        for label, argv, case_env, fd in fd_cases:
            if not label.startswith(args.only) and args.only:
                continue
            n += 1
            code, out, err = run_subprocess(argv, case_env, fd)
            why = verdict(code, out, err)
            if why:
                failures.append((label, argv, why, err.strip().splitlines()[-1:]))
                kinds[why] += 1
    seconds = time.perf_counter() - started
    print("| hostile inputs | cases | failed | internal errors | tracebacks | other | seconds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    other = len(failures) - kinds["internal error"] - kinds["traceback"]
    print(
        f"| CLI, every option of {len(BASE_ARGS)} commands + files + fds | {n} | {len(failures)} | "
        f"{kinds['internal error']} | {kinds['traceback']} | {other} | {seconds:.0f} |"
    )
    if args.show or failures:
        for label, argv, why, last in failures:
            shown = " ".join(a if len(a) < 60 else a[:20] + "…" for a in argv)
            print(f"- {why}: {label}: gpuwise {shown} → {' '.join(last)[:300]}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
