"""`gpuwise exporter`, `gpuwise monitor` and `gpuwise report` end to end, and what they say to bad input."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest


def test_monitor_records_and_report_reads_the_db(cli: Any, tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    r = cli("monitor", "--fake", "idle", "--reads", "2", "--interval", "1s", "--db", db, "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["reads"] == 2 and doc["rows_written"] == 4 and Path(doc["db"]) == db
    r = cli("report", "--db", db, "--since", "1h", "--price-usd-per-hour", "2", "--json")
    assert r.code == 0, r.stderr
    rep = r.json()
    assert rep["source"] == f"sqlite:{db}"
    assert len(rep["gpus"]) == 2
    # Each stored row stands for 1 s. Two reads usually land in two wall-clock seconds (2 rows per
    # GPU), but on a loaded machine both may land in one second and the store keeps one row per
    # GPU per second: the report must credit exactly the rows the monitor left, never a guess.
    with sqlite3.connect(db) as con:
        rows = dict(con.execute("SELECT gpu, COUNT(*) FROM samples GROUP BY gpu").fetchall())
    assert len(rows) == 2 and all(n in (1, 2) for n in rows.values())
    assert sorted(g["allocated_hours"] for g in rep["gpus"]) == pytest.approx(
        sorted(n / 3600 for n in rows.values())
    )


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "an empty file"),  # report used to write gpuwise's schema into it and exit 0
        (b"gpu,hours\n0,1\n" * 50, "cannot open the history database"),  # a CSV, not SQLite
    ],
)
def test_report_refuses_a_db_it_did_not_write_and_leaves_it_untouched(
    cli: Any, tmp_path: Path, content: bytes, needle: str
) -> None:
    db = tmp_path / "given.sqlite"
    db.write_bytes(content)
    r = cli("report", "--db", db, "--since", "1h", "--price-usd-per-hour", "2", "--json")
    assert r.code == 2, r.stdout
    assert needle in r.stderr and r.stderr.count("\n") == 1
    assert db.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["given.sqlite"]  # no -wal, -shm, .lock


def test_monitor_default_db_is_in_the_data_dir(cli: Any, isolated_env: Path) -> None:
    r = cli("monitor", "--fake", "mig", "--reads", "1", "--json")
    assert r.code == 0, r.stderr
    assert Path(r.json()["db"]).is_relative_to(isolated_env)


def test_report_terminal_output(cli: Any) -> None:
    r = cli("report", "--fake", "idle", "--price-usd-per-hour", "4")
    assert r.code == 0, r.stderr
    assert "wasted $168.00" in r.stdout and "release" in r.stdout and "bob/notebook" in r.stdout


def test_exporter_once_prints_metrics(cli: Any) -> None:
    r = cli("exporter", "--fake", "thermal", "--once", "--price-usd-per-hour", "2.5")
    assert r.code == 0, r.stderr
    assert re.search(r'gpuwise_gpu_cost_usd_per_hour\{[^}]*gpu="0"[^}]*\} 2\.5', r.stdout)
    assert "gpuwise_gpu_temperature_celsius" in r.stdout


def test_exporter_serves_until_interrupted(free_port: Any, wait_for: Any) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuwise",
            "exporter",
            "--fake",
            "xid",
            "--port",
            str(port),
            "--interval",
            "0.1s",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(
            proc.stdout.readline() + "".join(iter(lambda: proc.stdout.readline(), "}\n")) + "}"
        )
        assert info["url"] == f"http://127.0.0.1:{port}"

        def lost() -> bool:
            with urllib.request.urlopen(info["metrics"], timeout=5) as resp:
                return (
                    'gpuwise_gpu_up{gpu="1"' in (text := resp.read().decode())
                    and "} 0.0" in text.split('gpuwise_gpu_up{gpu="1"', 1)[1].split("\n", 1)[0]
                )

        wait_for(lost, 30, "GPU 1 to be reported lost while the exporter keeps serving")
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["report", "--fake", "idel"], "unknown fake scenario 'idel' — To fix: use one of"),  # typo
        (["report", "--fake", "idle", "--since", "-1h"], "--since must be positive"),  # negative
        (["report", "--fake", "idle", "--since", "nan"], "--since must be a finite number"),
        (["report", "--fake", "idle", "--since", "forever"], "cannot read --since"),
        (["report", "--fake", "idle", "--since", "100000h"], "longer than 10 years"),  # huge
        (["report", "--fake", "idle", "--since", "100000000h"], "longer than 1000 years"),  # a typo
        (["report", "--fake", "idle", "--until", "1e20"], "--until must be ≤"),
        (
            ["report", "--fake", "idle", "--until", "10", "--since", "1h"],
            "the window starts before 1970",
        ),
        (["report", "--fake", "idle", "--price-usd-per-hour", "-3"], "must be ≥ 0"),
        (
            ["report", "--fake", "idle", "--instance-type", "p9.huge"],
            "instance type 'p9.huge' is not in the catalog",
        ),
        (["report", "--prometheus", "ftp://x"], "--prometheus must be an http(s) URL"),
        (
            ["report", "--fake", "idle", "--db", "x.sqlite"],
            "give only one of --db, --prometheus and --fake",
        ),
        (["report", "--db", "/nonexistent/h.sqlite"], "no history at /nonexistent/h.sqlite"),
        (["report", "--prometheus", "http://127.0.0.1:9"], "cannot query Prometheus"),
        (["monitor", "--fake", "idle", "--reads", "0"], "--reads must be ≥ 1"),
        (["monitor", "--fake", "idle", "--interval", "0s"], "--interval must be > 0"),
        (["monitor", "--fake", "idle", "--interval", "0.5s"], "--interval must be ≥ 1 s"),
        (["exporter", "--fake", "idle", "--port", "99999"], "--port must be 0-65535"),
        (["exporter", "--fake", "/nonexistent/trace.json"], "cannot read trace"),
        (
            ["report", "--fake", "idle", "--price-usd-per-hour", "1"],
            "cannot read GPUWISE_CAPACITY_TYPE 'bogus'",
        ),
        (["exporter", "--fake", "idle", "--once", "--node-info", "cloud"], "--node-info must be"),
        (
            ["exporter", "--fake", "idle", "--once", "--process-command", "full"],
            "--process-command must be one of off, executable, hash",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    cli: Any, args: list[str], needle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "GPUWISE_CAPACITY_TYPE" in needle:
        monkeypatch.setenv("GPUWISE_CAPACITY_TYPE", "bogus")
    r = cli(*args)
    assert r.code == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("instance", "cloud", "says", "suggests"),
    [
        # a typo: the exporter serves, unpriced, and suggests the real name
        ("p5.48xlarg", None, "not in the catalog", "p5.48xlarge"),
        # a real name in the wrong cloud: it says which cloud has it, and never suggests itself
        ("p5.48xlarge", "gcp", "it is a aws instance type", None),
    ],
)
def test_an_instance_the_catalog_lacks_keeps_the_exporter_serving(
    cli: Any,
    monkeypatch: pytest.MonkeyPatch,
    instance: str,
    cloud: str | None,
    says: str,
    suggests: str | None,
) -> None:
    """It used to exit 2: a crash loop of GPU monitoring over a gap in the price catalog."""
    monkeypatch.setenv("GPUWISE_INSTANCE_TYPE", instance)
    if cloud:
        monkeypatch.setenv("GPUWISE_CLOUD", cloud)
    r = cli("exporter", "--fake", "idle", "--once")
    assert r.code == 0, r.stderr
    info = [line for line in r.stdout.splitlines() if line.startswith("gpuwise_node_price_info{")]
    assert info and all(f'price_source="unknown instance type {instance}' in x for x in info)
    assert says in info[0]
    assert "gpuwise_gpu_cost_usd_per_hour{" not in r.stdout  # unpriced, not $0
    mean = re.search(r"did you mean ([^?]*)\?", info[0])
    if suggests is None:
        assert mean is None or instance not in mean.group(1).split(", "), info[0]
    else:
        assert mean is not None and suggests in mean.group(1).split(", "), info[0]


def test_malformed_trace_file(cli: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [{}]\nframes:\n  - gpus: [{util: lots}]\n")
    r = cli("report", "--fake", bad)
    assert r.code == 2 and "frames[0].gpus[0].util: expected a finite number" in r.stderr
    bad.write_text("gpus: [\n")
    r = cli("report", "--fake", bad)
    assert r.code == 2 and "not valid JSON/YAML" in r.stderr


def test_without_nvml_the_commands_say_how_to_fix(cli: Any) -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML")  # pragma: no cover
    except pynvml.NVMLError:
        pass
    r = cli("exporter", "--once")
    assert r.code == 2 and "cannot start NVML" in r.stderr and "--fake idle" in r.stderr


def _limit_file_size() -> None:  # runs in the child: files may not grow past 20 kB
    import resource

    signal.signal(
        signal.SIGXFSZ, signal.SIG_IGN
    )  # a write past the limit fails with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))


@pytest.mark.slow
def test_report_html_failed_write_keeps_the_old_report(tmp_path: Path) -> None:
    # a failed --html write used to truncate the previous report and leave 20 kB of half an HTML page
    out = tmp_path / "report.html"
    out.write_text("last week's report\n")
    r = subprocess.run(
        [sys.executable, "-m", "gpuwise", "report", "--fake", "idle", "--html", str(out)],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=_limit_file_size,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: cannot write") and r.stderr.count("\n") == 1
    assert out.read_text() == "last week's report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary left behind
