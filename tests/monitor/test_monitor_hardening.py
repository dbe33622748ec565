"""Robustness of the monitoring path: strict traces, one writer per history file, PID reuse, a cap
on per-process series, gzip, health counters, Kubernetes names, and the report's observed window."""

from __future__ import annotations

import gzip
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuwise.errors import DataFileError, StorageError
from gpuwise.monitor.exporter import Exporter, GpuCollector
from gpuwise.monitor.fake import FakeGpuReader, parse_trace
from gpuwise.monitor.history import replay_history
from gpuwise.monitor.nvml import lookup_pod, read_proc_info, read_proc_start
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.report import build_report
from gpuwise.monitor.store import HistoryStore


def _trace(frame_gpu: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}], "frames": [{"gpus": [frame_gpu]}], **top}


@pytest.mark.parametrize(
    ("gpu", "field"),
    [
        ({"processes": [{"memory_mib": 5}]}, "processes[0]: missing field 'pid'"),
        ({"processes": "none"}, "frames[0].gpus[0].processes: expected a list"),
        ({"sm_active": "high"}, "frames[0].gpus[0].sm_active"),
        ({"sm_active": 7}, "frames[0].gpus[0].sm_active: expected a finite number from 0 to 1"),
        ({"xid": "79"}, "frames[0].gpus[0].xid: expected a list"),  # was read as XIDs 7 and 9
        ({"xid": ["79"]}, "frames[0].gpus[0].xid[0]"),
        ({"lost": "yes"}, "frames[0].gpus[0].lost"),
        ({"processes": [{"pid": "12"}]}, "processes[0].pid"),
        ({"processes": [{"pid": 1, "mig": 0}]}, "processes[0].mig: instance 0 does not exist"),
        ({"util": 250}, "frames[0].gpus[0].util: expected a finite number from 0 to 100"),
    ],
)
def test_strict_trace_validation_names_the_field(gpu: dict[str, Any], field: str) -> None:
    with pytest.raises(DataFileError, match=r"^t\.yaml: .*" + re.escape(field)):
        parse_trace(_trace(gpu), "t.yaml")


def test_huge_repeat_is_refused_not_expanded() -> None:
    doc = _trace({"util": 5})
    doc["frames"][0]["repeat"] = 10**20
    with pytest.raises(DataFileError, match=r"frames\[0\]\.repeat: the trace expands to more than"):
        parse_trace(doc, "t.yaml")


def test_a_long_trace_replays_without_expanding_its_frames() -> None:
    doc = _trace({"util": 5})
    doc["frames"][0]["repeat"] = 5_000_000  # a list of 5 M frames would take ~40 MB and seconds
    reader = FakeGpuReader(parse_trace(doc, "t.yaml"))
    history = replay_history(reader, 3600, 1_800_000_000.0)
    assert history.gpus[0].duration_s.sum() == pytest.approx(3600)


def test_cli_hostile_inputs_exit_2_with_one_line(cli: Any, tmp_path: Path) -> None:
    notdb = tmp_path / "notes.sqlite"
    notdb.write_text("these are my notes, not a database\n" * 100)
    r = cli("report", "--db", notdb)
    assert (
        r.code == 2
        and r.stderr.count("\n") == 1
        and "not a database" in r.stderr
        and "To fix" in r.stderr
    )
    bad = tmp_path / "t.yaml"
    bad.write_text(
        "gpus: [{name: H100}]\nframes:\n  - repeat: 100000000000000000000\n    gpus: [{util: 5}]\n"
    )
    r = cli("report", "--fake", bad)
    assert r.code == 2 and r.stderr.count("\n") == 1 and "repeat" in r.stderr
    bad.write_text("gpus: [{name: H100}]\nframes:\n  - gpus: [{xid: '79'}]\n")
    r = cli("report", "--fake", bad)
    assert r.code == 2 and str(bad) in r.stderr and "xid" in r.stderr


def test_report_on_the_leak_mentions_the_leak(cli: Any) -> None:
    r = cli("report", "--fake", "leak", "--price-usd-per-hour", "2", "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["gpus"][0]["memory_leak"] and "out of memory" in doc["gpus"][0]["memory_leak"]
    assert [x["action"] for x in doc["recommendations"]].count("fix-memory-leak") == 1
    r = cli("report", "--fake", "leak", "--price-usd-per-hour", "2")
    assert "fix-memory-leak" in r.stdout and "carol/serve" in r.stdout


def test_a_second_writer_is_refused(tmp_path: Path, cli: Any) -> None:
    db = tmp_path / "h.sqlite"
    snap = FakeGpuReader.from_scenario("idle").read()
    with HistoryStore(db) as first:
        first.append(snap, 10)
        with HistoryStore(db) as second:
            with pytest.raises(StorageError, match="already being written by pid"):
                second.append(snap, 10)
            assert len(second.read(0, 2e9).gpus) == 2  # reading needs no lock
        r = cli("monitor", "--fake", "idle", "--reads", "1", "--interval", "1s", "--db", db)
        assert r.code == 2 and "already being written" in r.stderr and "another --db" in r.stderr
    with HistoryStore(db) as third:  # the lock goes with the first writer
        third.append(snap, 10)


def test_a_symlink_to_the_same_file_is_the_same_writer(tmp_path: Path) -> None:
    """The lock is on the database file itself: reaching it through a symlink (which used to
    count every GPU-hour twice: 1.8× with two monitors) is refused too."""
    db = tmp_path / "h.sqlite"
    snap = FakeGpuReader.from_scenario("idle").read()
    with HistoryStore(db) as first:
        first.append(snap, 10)
        other = tmp_path / "other" / "alias.sqlite"
        other.parent.mkdir()
        other.symlink_to(db)
        with (
            HistoryStore(other) as second,
            pytest.raises(StorageError, match="already being written by pid"),
        ):
            second.append(snap, 10)
        first.append(snap, 10)  # the first writer is unharmed
        assert len(first.read(0, 2e9).gpus) == 2


def test_report_flags_more_allocated_than_observed_hours(tmp_path: Path, cli: Any) -> None:
    """Two histories written into one file (what a symlink used to allow) overlap: the same hour
    is counted twice. The report says so instead of printing doubled dollars silently."""
    db = tmp_path / "h.sqlite"
    import time

    end = float(int(time.time()) - 60)  # `report --since` counts back from now
    for offset in (0.0, 5.0):  # two writers, samples 5 s apart, each covering every 10 s
        clock = iter(end - 3600 + offset + 10 * k for k in range(360))
        reader = FakeGpuReader.from_scenario("idle", clock=lambda c=clock: next(c))
        with HistoryStore(db) as store:
            for _ in range(360):
                store.append(reader.read(), 10)
    with HistoryStore(db) as store:
        rep = build_report(
            store.read(end - 7200, end), PriceBook(price_usd_per_hour=2.0, offers=())
        )
    assert rep.warnings and "samples overlap" in rep.warnings[0] and "2.00×" in rep.warnings[0]
    r = cli("report", "--db", db, "--since", "2h", "--price-usd-per-hour", "2", "--json")
    assert r.code == 0 and json.loads(r.stdout)["warnings"]
    # one writer: no warning
    single = tmp_path / "one.sqlite"
    clock = iter(end - 3600 + 10 * k for k in range(360))
    reader = FakeGpuReader.from_scenario("idle", clock=lambda c=clock: next(c))
    with HistoryStore(single) as store:
        for _ in range(360):
            store.append(reader.read(), 10)
        rep = build_report(
            store.read(end - 7200, end), PriceBook(price_usd_per_hour=2.0, offers=())
        )
    assert rep.warnings == ()


def test_a_reused_pid_is_a_new_process() -> None:
    doc = {
        "gpus": [{"name": "NVIDIA H100 80GB HBM3"}],
        "frames": [
            {
                "gpus": [
                    {
                        "processes": [
                            {"pid": 77, "user": "alice", "workload": "alice/job", "start": 100}
                        ]
                    }
                ]
            },
            {"gpus": [{"processes": [{"pid": 77, "user": "bob", "start": 999}]}]},
        ],
    }
    reader = FakeGpuReader(parse_trace(doc, "t"))
    assert reader.read().gpus[0].processes[0].user == "alice"
    assert reader.read().gpus[0].processes[0].user == "bob"  # not alice's cached owner


def test_proc_start_time_and_pod_names(tmp_path: Path) -> None:
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    uid = "0b3a8c1e-1111-2222-3333-444455556666"
    (proc / "stat").write_text(
        "4242 (python (x)) S 1 4242 4242 0 -1 4194560 " + " ".join(["0"] * 12) + " 987654 0 0\n"
    )
    (proc / "status").write_text("Name:\tpython\nUid:\t0\t0\t0\t0\n")
    (proc / "cmdline").write_bytes(b"python\0train.py\0")
    (proc / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/cri-containerd-"
        + "a" * 64
        + ".scope\n"
    )
    pods = tmp_path / "pods"
    (pods / f"ml-team_trainer-7f9c_{uid}" / "trainer").mkdir(parents=True)
    assert read_proc_start(4242, tmp_path / "proc") == 987654
    assert lookup_pod(uid, pods) == ("ml-team", "trainer-7f9c", "trainer")
    info = read_proc_info(4242, tmp_path / "proc", pods)
    assert (info.pod_uid, info.namespace, info.pod, info.container) == (
        uid,
        "ml-team",
        "trainer-7f9c",
        "trainer",
    )
    assert lookup_pod("not-there", pods) == (None, None, None)


def _families(collector: GpuCollector) -> dict[str, list[Any]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    out: dict[str, list[Any]] = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_process_series_are_capped_per_gpu() -> None:
    procs = [{"pid": 100 + k, "memory_mib": 100 * k, "sm_util": k} for k in range(1, 6)]
    reader = FakeGpuReader(parse_trace(_trace({"processes": procs}), "t"))
    collector = GpuCollector(max_process_series=2)
    collector.update(reader.read())
    s = _families(collector)
    assert sorted(x.labels["pid"] for x in s["gpuwise_process_gpu_memory_bytes"]) == [
        "104",
        "105",
    ]  # the largest
    assert s["gpuwise_exporter_process_series_dropped"][0].value == 3
    assert s["gpuwise_gpu_processes"][0].value == 5
    assert {x.labels["pid"]: x.value for x in s["gpuwise_process_sm_utilization_ratio"]} == {
        "104": 0.04,
        "105": 0.05,
    }


def test_health_counters_dcgm_users_expect() -> None:
    reader = FakeGpuReader.from_scenario("xid")
    collector = GpuCollector()
    for _ in range(
        4
    ):  # frame 3: both GPUs busy; GPU 1 reports XID 79, PCIe replays and NVLink errors
        collector.update(reader.read())
    s = _families(collector)
    by = {name: {x.labels.get("gpu"): x for x in s.get(name, [])} for name in s}
    assert by["gpuwise_gpu_energy_joules_total"]["0"].value > 0
    assert by["gpuwise_gpu_memory_temperature_celsius"]["0"].value == 62
    assert by["gpuwise_gpu_dram_active_ratio"]["0"].value == pytest.approx(0.41)
    assert by["gpuwise_gpu_sm_occupancy_ratio"]["0"].value == pytest.approx(0.28)
    assert by["gpuwise_gpu_row_remap_failure"]["0"].value == 0
    assert {x.labels["cause"] for x in s["gpuwise_gpu_remapped_rows"]} == {
        "correctable",
        "uncorrectable",
    }
    assert by["gpuwise_gpu_encoder_utilization_ratio"]["0"].value == 0
    assert by["gpuwise_process_sm_utilization_ratio"]["0"].value == pytest.approx(0.93)
    assert {x.labels["gpu"]: x.value for x in s["gpuwise_gpu_pcie_replays_total"]} == {
        "0": 0,
        "1": 12,
    }
    assert {
        (x.labels["gpu"], x.labels["kind"]): x.value
        for x in s["gpuwise_gpu_nvlink_errors_total"]
        if x.value
    } == {("1", "crc_flit"): 3, ("1", "replay"): 1}
    assert by["gpuwise_gpu_nvlink_tx_bytes_total"]["0"].value == 7_500_000 * 1024


def test_metrics_are_gzipped_on_request() -> None:
    exp = Exporter(FakeGpuReader.from_scenario("idle"), port=0, interval_s=3600)
    exp.start()
    try:
        req = urllib.request.Request(exp.url + "/metrics", headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            text = gzip.decompress(r.read()).decode()
        with urllib.request.urlopen(exp.url + "/metrics", timeout=10) as r:
            assert r.headers["Content-Encoding"] is None
            plain = r.read().decode()
        assert "gpuwise_gpu_up" in text and text.splitlines()[:5] == plain.splitlines()[:5]
        assert exp.server.request_queue_size >= 128
    finally:
        exp.stop()


def test_report_window_and_savings_come_from_the_data_observed(tmp_path: Path) -> None:
    reader = FakeGpuReader.from_scenario("idle")
    db = tmp_path / "h.sqlite"
    end = 1_800_000_000.0
    with HistoryStore(db) as store:
        for k in range(36):  # 6 minutes of 10-second samples
            snap = reader.read()
            from dataclasses import replace

            store.append(replace(snap, timestamp_s=end - 360 + 10 * k), 10)
        docs = []
        for since_h in (1, 24, 24 * 30):
            rep = build_report(
                store.read(end - since_h * 3600, end), PriceBook(price_usd_per_hour=4.0, offers=())
            )
            docs.append(rep)
    for rep in docs:
        assert rep.observed_hours == pytest.approx(0.1)
        assert all(r.host == "fake-idle" for r in rep.recommendations)
    savings = [
        sorted((r.action, r.saving_usd_per_month) for r in rep.recommendations) for rep in docs
    ]
    # not scaled with --since (the 30-day window reads rows folded in SQL: the same to 1e-9)
    for other in savings[1:]:
        assert [a for a, _ in other] == [a for a, _ in savings[0]]
        assert [v for _, v in other] == pytest.approx([v for _, v in savings[0]], rel=1e-9)
    assert json.dumps(savings[0])


def test_a_history_that_is_not_a_database_names_the_flag_that_gave_it(
    cli: Any, tmp_path: Path
) -> None:
    notdb = tmp_path / "notes.sqlite"
    notdb.write_text("these are my notes, not a database\n" * 100)
    r = cli("fleet", "--demand-from-history", notdb)
    assert r.code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "another --demand-from-history path" in r.stderr and "--db path" not in r.stderr
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    r = cli("fleet", "--demand-from-history", empty)
    assert r.code == 2 and "give --demand-from-history the file" in r.stderr, r.stderr
