"""Inputs a user gets wrong, each answered with one line that names the real problem and its fix.

Every row was a wrong or misleading answer before (issue 36): an internal error, a folder created
silently, "pick another port" for an address that is not one, "command not found" for a script
without its execute bit, the token-count hint for `--epochs inf`, a three-line redirect error.
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.catalog.servers import CatalogServer

PLAN = ("plan", "--params", "1B", "--gpu", "H100", "--max-nodes", "1")


def _one_line(stderr: str) -> str:
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    assert "internal error" not in stderr and "Traceback" not in stderr
    return stderr


def _cd(monkeypatch: pytest.MonkeyPatch, path: Path) -> Path:
    monkeypatch.chdir(path)
    return path


def _a_file(d: Path) -> str:
    (d / "train.py").write_text("")
    return "train.py"


def _a_folder_with_a_file_in_the_way(d: Path) -> str:
    (d / ".gpuwise-dist").write_text("")  # mkdir of the wheel folder fails: an OSError
    return "."


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (_a_file, "is a file"),  # was NotADirectoryError: an internal error, exit 1
        (lambda d: "no/such/dir", "is not there"),  # was created silently, the wheel put in it
        (_a_folder_with_a_file_in_the_way, "cannot write the gpuwise wheel"),  # an OSError
    ],
)
def test_plan_export_workdir_must_be_a_writable_folder(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: Any, needle: str
) -> None:
    _cd(monkeypatch, tmp_path)
    workdir = make(tmp_path)
    r = cli(*PLAN, "--export", "skypilot", "--workdir", workdir)
    assert r.code == 2, r.stdout
    assert needle in _one_line(r.stderr) and "--workdir" in r.stderr
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    ("host", "needle"),
    [
        ("999.1.1.1", "is not an IP address"),  # was "pick another --port"
        ("1:2:3", "is not an IP address"),
        # a real address of no interface here: EADDRNOTAVAIL, no packet leaves the machine
        ("10.254.254.254", "Cannot assign requested address"),
    ],
)
def test_exporter_host_that_is_not_ours_says_so(cli: Any, host: str, needle: str) -> None:
    r = cli("exporter", "--fake", "idle", "--host", host, "--port", "0")
    assert r.code == 2
    assert needle in _one_line(r.stderr)
    assert "give --host as an address of this machine" in r.stderr
    assert "pick another --port" not in r.stderr


@pytest.mark.parametrize(
    ("program", "needle", "fix"),
    [
        ("./job.sh", "'./job.sh' is not executable", "chmod +x ./job.sh"),  # said "not found"
        ("job.sh", "a file of that name is in this folder", "write ./job.sh"),
        ("sub", "is a folder, not a program", "gpuwise run -- python train.py"),
        ("./nosuch.sh", "command not found", "check the spelling"),
    ],
)
def test_run_says_why_a_program_cannot_start(
    cli: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    program: str,
    needle: str,
    fix: str,
) -> None:
    _cd(monkeypatch, tmp_path)
    (tmp_path / "job.sh").write_text("echo hi\n")  # no execute bit
    (tmp_path / "sub").mkdir()
    r = cli("run", "--no-torchrun", "--", program)
    assert r.code == 2
    assert needle in _one_line(r.stderr) and fix in r.stderr


def test_calibration_folder_is_not_called_missing(cli: Any, tmp_path: Path) -> None:
    r = cli("estimate", "--params", "1B", "--calibration", tmp_path)
    assert r.code == 2
    assert "is a folder, not a calibration file" in _one_line(r.stderr)
    assert "no such" not in r.stderr


@pytest.mark.parametrize(
    ("args", "needle", "fix"),
    [
        # all three said "cannot read ... write it with a unit", which they have
        (("--deadline", "-1h"), "--deadline must be positive, got '-1h'", "positive duration"),
        (("--restart-time", "-10s"), "--restart-time must be positive", "positive duration"),
        (("--deadline", "1e30h"), "'1e30h' is longer than 1000 years", "check the number"),
    ],
)
def test_plan_durations_say_what_is_wrong(
    cli: Any, args: tuple[str, str], needle: str, fix: str
) -> None:
    r = cli(*PLAN, *args)
    assert r.code == 2
    assert needle in _one_line(r.stderr) and fix in r.stderr
    assert "write it with a unit" not in r.stderr


def test_a_duration_with_an_exponent_reads() -> None:
    from gpuwise.units import parse_duration_hours

    assert parse_duration_hours("1e2h", "--deadline") == 100.0


@pytest.mark.parametrize(
    ("args", "needle", "fix"),
    [
        # the token-count hint ("write epochs as e.g. 7e9, 7B") fits neither
        (
            ("estimate", "--params", "1B", "--samples", "1000", "--epochs", "inf"),
            "epochs must be a finite number, got 'inf'",
            "as a plain number, e.g. 3 or 1.5",
        ),
        (
            ("fleet", "--profile", "--profile-hours", "48", "--spot-capacity", "H100=nan"),
            "--spot-capacity must be a finite number, got 'nan'",
            "a number of GPUs",
        ),
    ],
)
def test_not_finite_numbers_get_their_own_hint(
    cli: Any, args: tuple[str, ...], needle: str, fix: str
) -> None:
    r = cli(*args)
    assert r.code == 2
    assert needle in _one_line(r.stderr) and fix in r.stderr
    assert "7B" not in r.stderr


def test_a_redirect_loop_is_one_line(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server = CatalogServer()

    def loop(h: BaseHTTPRequestHandler) -> None:
        h.send_response(302)
        h.send_header("Location", h.path)
        h.send_header("Content-Length", "0")
        h.end_headers()

    try:
        server.overrides["/aws/vms.csv"] = loop
        monkeypatch.setenv("GPUWISE_SKYPILOT_CATALOG_URL", server.base)
        r = cli("catalog", "update", "--fetch", "skypilot")
    finally:
        server.close()
    assert r.code == 2
    # `catalog update --fetch` says one progress line per source first (issue 33), then the error
    progress, _, error = r.stderr.partition("\n")
    assert progress.startswith("[1/1] skypilot: refused")
    assert "(HTTP 302 redirects in a loop)" in _one_line(error)


@pytest.mark.parametrize("key", ["head_dim", "d_kv"])
def test_head_dim_zero_in_a_config_is_refused(cli: Any, tmp_path: Path, key: str) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_hidden_layers": 32,
                "vocab_size": 32000,
                "intermediate_size": 11008,
                key: 0,  # was silently read as "not given"
            }
        )
    )
    r = cli("estimate", "--model", cfg)
    assert r.code == 2
    assert f"field '{key}' must be > 0" in _one_line(r.stderr)


def test_estimate_fix_table_says_its_real_order(cli: Any) -> None:
    # the title said "least speed cost first" above a hardware fix that is faster
    r = cli("estimate", "--model", "llama-2-7b", "--gpu", "H100", "--json")
    fixes = r.json()["suggestions"]  # type: ignore[index]
    hardware = ["gpu" in f["changes"] or "gpus" in f["changes"] for f in fixes]
    assert hardware == sorted(hardware) and any(hardware) and not all(hardware)
    text = " ".join(cli("estimate", "--model", "llama-2-7b", "--gpu", "H100").stdout.split())
    assert "settings on these GPUs first (least speed cost first), then a bigger GPU" in text


@pytest.mark.parametrize(
    ("flag", "path", "needle", "fix"),
    [
        ("--from-csv", "nosuch.csv", "nosuch.csv: no such file", "check the --from-csv path"),
        ("--from-skypilot", "nosuch", "nosuch: no such folder", "check the --from-skypilot path"),
    ],
)
def test_catalog_update_names_its_own_flag(
    cli: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flag: str,
    path: str,
    needle: str,
    fix: str,
) -> None:
    _cd(monkeypatch, tmp_path)
    r = cli("catalog", "update", flag, path)
    assert r.code == 2
    assert needle in _one_line(r.stderr) and fix in r.stderr
    assert "--catalog" not in r.stderr


def test_plan_export_table_goes_where_the_docs_say(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/plan.md: the YAML on stdout puts the table on stderr; with -o the table stays on stdout
    _cd(monkeypatch, tmp_path)
    r = cli(*PLAN, "--export", "skypilot")
    assert r.code == 0, r.stderr
    assert r.stdout.startswith("# SkyPilot task") and "choices" in r.stderr
    r = cli(*PLAN, "--export", "skypilot", "-o", "task.yaml")
    assert r.code == 0, r.stderr
    assert "choices" in r.stdout and "wrote skypilot export to task.yaml" in r.stdout
    assert (tmp_path / "task.yaml").read_text().startswith("# SkyPilot task")
    doc = Path(__file__).parents[2] / "docs" / "plan.md"
    said = " ".join(doc.read_text("utf-8").split())
    assert re.search(
        r"with `-o task\.yaml` it writes the YAML there and the table stays on stdout", said
    )
