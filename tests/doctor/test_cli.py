"""``gpuwise doctor`` end to end: this GPU-less machine, a replayed broken node, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def test_json_on_this_machine_says_no_gpu_and_checks_the_rest(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("doctor", "--json", "--no-torch", "--num-workers", "1")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["gpu_present"] is False
    by_name = {c["name"]: c for c in doc["checks"]}
    assert set(by_name) >= {
        "nvidia-driver",
        "cuda-compat",
        "shm",
        "disk",
        "memory",
        "gpu-ecc",
        "nccl-socket-ifname",
    }
    assert (
        by_name["nvidia-driver"]["status"] == "skip"
        and "no NVIDIA GPU" in by_name["nvidia-driver"]["finding"]
    )
    assert by_name["memory"]["status"] in ("ok", "warn")
    assert all(set(c) == {"name", "status", "finding", "fix"} for c in doc["checks"])


def test_replayed_broken_node_fails_with_exit_3(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "doctor", "--json", "--replay", FIXTURES / "replay-broken-node", "--checkpoint-dir", "/"
    )
    assert r.code == 3
    by_name = {c["name"]: c for c in r.json()["checks"]}  # type: ignore[union-attr]
    assert by_name["cuda-compat"]["status"] == "fail"
    assert "CUDA driver version is insufficient" in by_name["cuda-compat"]["finding"]
    assert by_name["nccl-socket-ifname"]["status"] == "fail"
    assert by_name["shm"]["status"] == "fail" and "--shm-size" in by_name["shm"]["fix"]
    assert by_name["gpu-xid"]["status"] == "fail"


def test_table_output(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("doctor", "--replay", FIXTURES / "replay-broken-node", "--only", "cuda-compat,shm")
    assert r.code == 3
    assert "cuda-compat" in r.stdout and "FAIL" in r.stdout and "nvidia-driver" not in r.stdout


def test_bad_input_exits_2(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("doctor", "--num-workers", "-1", "--no-torch")
    assert r.code == 2 and "negative" in r.stderr
    r = cli("doctor", "--only", "shmm", "--no-torch")
    assert r.code == 2 and "did you mean 'shm'" in r.stderr
    r = cli("doctor", "--shm-per-worker-mib", "nan", "--no-torch")
    assert r.code == 2
    r = cli("doctor", "--replay", "/nonexistent")
    assert r.code == 2 and "not a folder" in r.stderr


def test_checkpoint_dir_that_is_a_file_is_refused(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # It used to report the free space of the file's file system as if it were the folder.
    a_file = tmp_path / "ckpt.pt"
    a_file.write_bytes(b"x")
    r = cli("doctor", "--no-torch", "--checkpoint-dir", a_file)
    assert r.code == 2 and "is a file" in r.stderr and r.stderr.count("\n") == 1


def test_replay_json_matches_golden(cli) -> None:  # type: ignore[no-untyped-def]
    """The whole --json document for a recorded node: wording changes show up in review.

    Rerun with GPUWISE_UPDATE_GOLDEN=1 to accept a deliberate change.
    """
    import json
    import os

    golden = Path(__file__).parent / "golden" / "replay-broken-node.json"
    r = cli(
        "doctor", "--json", "--replay", FIXTURES / "replay-broken-node", "--checkpoint-dir", "/"
    )
    current = json.dumps(r.json(), indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("GPUWISE_UPDATE_GOLDEN"):
        golden.write_text(current, "utf-8")
    assert current == golden.read_text("utf-8")


@pytest.mark.parametrize(
    ("layout", "needle"),
    [
        ({}, "not a recorded machine"),  # an empty folder: was diagnosed as a machine
        (
            {"facts.json": b'{"cpu_count": '},
            "not valid JSON",
        ),  # truncated: was JSONDecodeError, exit 1
        (
            {"facts.json": b"[1, 2]"},
            "expected a JSON object, got list",
        ),  # wrong type: was AttributeError, exit 1
        (
            {"facts.json": b'{"cpu_count": "many"}'},
            "unexpected content",
        ),  # wrong field type: was ValueError, exit 1
        (
            {"facts.json": b'{"torch": {"bogus": 1}}'},
            "unexpected keyword",
        ),  # unknown torch field: was TypeError, exit 1
        (
            {"facts.json": b'{"disk": {"/": [1]}}'},
            "unexpected content",
        ),  # [total] without free: was IndexError, exit 1
        (
            {"fs/proc/meminfo": b"\xaf\xff\x00"},
            "not UTF-8 text",
        ),  # binary file: was UnicodeDecodeError, exit 1
        ({"commands/nvidia-smi -q.txt": b"\xff\xfe"}, "not UTF-8 text"),  # binary command output
    ],
)
def test_malformed_recordings_exit_2_naming_the_file(
    cli,
    tmp_path: Path,
    layout: dict[str, bytes],  # type: ignore[no-untyped-def]
    needle: str,
) -> None:
    for rel, content in layout.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(content)
    r = cli("doctor", "--json", "--no-torch", "--replay", tmp_path)
    assert r.code == 2, (r.code, r.stderr)
    assert needle in r.stderr and r.stderr.count("\n") == 1 and "To fix:" in r.stderr
    assert r.stdout == ""


def test_missing_checkpoint_dir_is_bad_input_not_a_failed_check(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("doctor", "--no-torch", "--only", "disk", "--checkpoint-dir", tmp_path / "typo")
    assert r.code == 2 and r.stdout == ""
    assert r.stderr.startswith("error: --checkpoint-dir ") and "no such folder" in r.stderr
    assert r.stderr.count("\n") == 1


def test_the_table_keeps_brackets_in_fixes(cli) -> None:  # type: ignore[no-untyped-def]
    # rich read "[train]" in "pip install 'gpuwise[train]'" as markup and printed "gpuwise'"
    r = cli(
        "doctor", "--no-torch", "--replay", FIXTURES / "replay-broken-node", "--checkpoint-dir", "/"
    )
    assert "pip install 'gpuwise[train]'" in r.stdout


def test_only_inlines_the_fixes_a_fix_refers_to(cli) -> None:  # type: ignore[no-untyped-def]
    replay = FIXTURES / "replay-broken-node"
    alone = cli(
        "doctor", "--json", "--replay", replay, "--only", "torch-cuda", "--checkpoint-dir", "/"
    ).json()
    full = cli("doctor", "--json", "--replay", replay, "--checkpoint-dir", "/").json()
    by_name = {c["name"]: c for c in full["checks"]}
    [torch_cuda] = alone["checks"]
    assert "see the cuda-compat and nvidia-driver checks" in torch_cuda["fix"]
    # the checks it points at were not run: their fixes come along instead of a dangling reference
    assert by_name["cuda-compat"]["fix"] in torch_cuda["fix"]
    assert "nvidia-driver (ok)" in torch_cuda["fix"]
    assert (
        by_name["torch-cuda"]["fix"] == torch_cuda["fix"].split(" [")[0]
    )  # unchanged when all are shown


@pytest.mark.parametrize(
    ("replay", "only", "expected"),
    [
        (None, "shm", False),  # this GPU-less machine, the driver check not selected
        (None, "nvidia-driver,shm", False),  # ... and selected: the same answer
        (FIXTURES / "replay-broken-node", "shm", True),  # a recorded node with GPUs, driver not run
    ],
)
def test_only_reports_gpu_present_from_the_machine_not_the_selection(  # type: ignore[no-untyped-def]
    cli, replay: Path | None, only: str, expected: bool
) -> None:
    args = ["doctor", "--json", "--no-torch", "--only", only, "--checkpoint-dir", "/"]
    if replay is not None:
        args += ["--replay", str(replay)]
    r = cli(*args)
    assert r.code in (0, 3), r.stderr
    assert r.json()["gpu_present"] is expected


@pytest.mark.parametrize(
    ("expect", "code", "status", "finding"),
    [
        # the replayed node has 2×H100: a plan for 8 of them must not pass as "0 fail"
        ("H100x8", 3, "fail", "expected 8×H100, found 2×H100: 6 missing"),
        ("2xA100-80GB", 3, "fail", "expected 2×A100-80GB, found 2×H100"),  # another model
        ("H100", 0, "ok", "2×H100, as expected"),  # any count
        ("H100×2", 0, "ok", "2×H100, as expected"),
        ("H100x1", 0, "warn", "expected 1×H100, found 2×H100"),  # more than planned
    ],
)
def test_expect_gpu_turns_a_wrong_machine_into_a_failed_check(  # type: ignore[no-untyped-def]
    cli, expect: str, code: int, status: str, finding: str
) -> None:
    replay = FIXTURES / "replay-broken-node"
    r = cli("doctor", "--json", "--no-torch", "--replay", replay, "--only", "gpu-expected",
            "--expect-gpu", expect)  # fmt: skip
    assert r.code == code, r.stderr
    (check,) = r.json()["checks"]
    assert (check["status"], check["finding"]) == (status, finding)


def test_expect_gpu_on_a_machine_without_gpu_fails(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # this machine has no GPU (doctor exited 0 on it): with an expectation it is exit 3
    from gpuwise.doctor import gpu_present

    if gpu_present():
        pytest.skip("this machine has an NVIDIA GPU")
    r = cli("doctor", "--no-torch", "--checkpoint-dir", tmp_path, "--expect-gpu", "H100x8")
    assert r.code == 3
    assert "expected 8×H100, found no NVIDIA GPU" in " ".join(r.stdout.split())


@pytest.mark.parametrize(
    ("expect", "needle"),
    [
        ("H10x8", "--expect-gpu 'H10x8': unknown GPU 'H10'"),  # a typo is bad input, not a fail
        ("8xH100x8", "is not MODELxCOUNT"),
        ("H100x0", "the count must be 1 to 1024"),
    ],
)
def test_expect_gpu_typos_are_bad_input(cli, expect: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    r = cli("doctor", "--no-torch", "--expect-gpu", expect)
    assert r.code == 2
    assert needle in r.stderr and r.stderr.count("\n") == 1
