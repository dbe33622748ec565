"""The CLI under hostile surroundings: a reader that goes away, a full disk, no stdout, an ASCII
terminal. Each ends with a correct answer or one ``error:`` line and exit 2, never a traceback.

These run ``python -m gpuwise`` in a subprocess: the point is what real file descriptors do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_module

GPUWISE = [sys.executable, "-m", "gpuwise"]


def _one_error_line(stderr: str) -> str:
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
    return stderr


@pytest.mark.parametrize(
    "args",
    [
        ["offers", "--limit", "400"],  # ~75 kB of table (> a 64 KiB pipe): EPIPE mid-table
        ["offers", "--limit", "0", "--json"],  # ... in the middle of a JSON document
        ["plan", "--help"],  # rich's help printer exited 1 on EPIPE by itself
    ],
)
def test_a_reader_that_stops_early_is_not_an_error(args: list[str]) -> None:
    # `gpuwise offers | head -1`: the first line is the answer; no "Exception ignored", exit 0
    with subprocess.Popen([*GPUWISE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        assert p.stdout is not None and p.stderr is not None
        assert p.stdout.readline()
        p.stdout.close()
        err = p.stderr.read().decode()
        assert p.wait(timeout=120) == 0, err
    # nothing but, at most, the price-age warning (the bundled Azure rows are undated)
    assert err == "" or err.startswith("warning: some prices have no date")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("args", [["gpus"], ["gpus", "--json"], ["estimate", "--help"]])
def test_stdout_on_a_full_disk_is_one_error_line(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [*GPUWISE, *args], stdout=full, stderr=subprocess.PIPE, text=True, check=False
        )
    assert p.returncode == 2
    assert "cannot write the output: No space left on device" in _one_error_line(p.stderr)


def test_a_closed_stdout_is_one_error_line() -> None:
    # started with `>&-`: Python sets sys.stdout to None and rich crashed on None.isatty()
    p = subprocess.run(
        [*GPUWISE, "gpus"],
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        preexec_fn=lambda: os.close(1),
    )
    assert p.returncode == 2
    assert "stdout is closed" in _one_error_line(p.stderr)


ASCII = {"LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": "ascii"}


def test_an_ascii_only_terminal_gets_ascii_lookalikes() -> None:
    # `gpuwise gpus` under LANG=C PYTHONIOENCODING=ascii: UnicodeEncodeError on "—" (exit 1)
    p = run_module(["gpus"], env={**os.environ, **ASCII})
    assert p.returncode == 0, p.stderr
    assert p.stdout.isascii() and "GPU models" in p.stdout
    assert " - " in p.stdout  # "—" (no figure) became "-"
    assert "H100" in p.stdout


def test_an_ascii_only_terminal_still_gets_one_error_line() -> None:
    p = run_module(["estimate", "--model", "no-such-model"], env={**os.environ, **ASCII})
    assert p.returncode == 2
    line = _one_error_line(p.stderr)
    assert line.isascii() and "unknown model preset 'no-such-model' - To fix: " in line


def test_a_100000_character_model_is_one_error_line() -> None:
    p = run_module(["estimate", "--model", "x" * 100_000, "--gpu", "H100"])
    assert p.returncode == 2
    assert len(_one_error_line(p.stderr)) < 400


def test_a_global_batch_below_one_micro_batch_per_gpu_is_raised_and_said(cli) -> None:  # type: ignore[no-untyped-def]
    # --global-batch 2 on 8 GPUs: each GPU runs at least one sequence per step, so the step holds 8
    r = cli(
        "estimate",
        "--model",
        "llama-2-7b",
        "--task",
        "lora",
        "--tokens",
        "1B",
        "--gpu",
        "H100",
        "--gpus",
        "8",
        "--global-batch",
        "2",
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["workload"]["global_batch"] == 8
    [note] = [n for n in doc["notes"] if "smaller than micro-batch 1 × 8 data-parallel GPUs" in n]
    assert "2" in note.split("smaller")[0] and note.endswith("estimated with a global batch of 8")


def _small_file_limit() -> (
    None
):  # in the child: no file may grow past 1 MiB, as on a nearly full disk
    import resource
    import signal

    signal.signal(
        signal.SIGXFSZ, signal.SIG_IGN
    )  # a write past the limit fails (EFBIG) instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


@pytest.mark.slow  # imports torch in a subprocess
def test_a_full_disk_under_the_bench_checkpoint_dir_is_one_error_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    p = subprocess.run(
        [
            *GPUWISE,
            "bench",
            "--quick",
            "--only",
            "storage",
            "--device",
            "cpu",
            "--checkpoint-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=_small_file_limit,
    )
    assert p.returncode == 2, p.stderr
    line = _one_error_line(p.stderr.lstrip("\n"))  # the transient progress bar leaves a blank line
    assert f"cannot write the 16 MiB test file in checkpoint directory {tmp_path}" in line
    assert list(tmp_path.iterdir()) == []  # the scratch folder is gone
