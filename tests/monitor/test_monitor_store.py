"""The SQLite history: WAL mode, round trip, retention, downsampling that keeps peaks and hours,
and the same report from a recorded history as from the replayed trace."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpuwise.errors import StorageError
from gpuwise.monitor.fake import FakeGpuReader, scenario
from gpuwise.monitor.history import replay_history
from gpuwise.monitor.pricing import PriceBook
from gpuwise.monitor.report import build_report
from gpuwise.monitor.store import HistoryStore, default_db_path
from tests.monitor.test_monitor_report import _offer

T0 = 1_700_000_100.0  # a multiple of the 300 s downsampling bucket


def _record(store: HistoryStore, name: str, reads: int, step_s: float, t0: float = T0) -> None:
    clock = iter(t0 + k * step_s for k in range(reads))
    reader = FakeGpuReader(scenario(name), clock=lambda: next(clock))
    for _ in range(reads):
        store.append(reader.read(), step_s)


def test_default_path_is_in_the_data_dir(isolated_env: Path) -> None:
    assert default_db_path().is_relative_to(isolated_env)


def test_wal_mode_and_round_trip(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.sqlite") as store:
        _record(store, "idle", 5, 10)
        h = store.read(T0, T0 + 50)
    assert (
        sqlite3.connect(tmp_path / "h.sqlite").execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    )
    by = {s.index: s for s in h.gpus}
    assert len(by[0]) == 5 and list(by[0].duration_s) == [10] * 5
    assert by[0].workloads[0] == ("alice/train",) and by[1].workloads[0] == ()
    assert (
        by[0].memory_used_bytes[0] == 61000 * 1024**2
        and by[0].memory_total_bytes == 81559 * 1024**2
    )
    assert by[0].utilization_ratio[0] == pytest.approx(0.97)
    assert by[0].sm_active_ratio[1] == pytest.approx(0.62)


def test_recorded_history_gives_the_same_report_as_the_replay(tmp_path: Path) -> None:
    """144 reads of the idle scenario, 600 s apart, stored and read back = the trace replayed over 24 h."""
    prices = PriceBook(price_usd_per_hour=2.0, offers=())
    with HistoryStore(tmp_path / "h.sqlite") as store:
        _record(store, "idle", 144, 600)
        stored = build_report(store.read(T0, T0 + 86400), prices)
    replayed = build_report(
        replay_history(FakeGpuReader.from_scenario("idle"), 86400, T0 + 86400), prices
    )
    for a, b in zip(stored.gpus, replayed.gpus, strict=True):
        # the first read has no GPM sample yet: that 10-minute frame falls back to utilization
        assert a.allocated_hours == pytest.approx(b.allocated_hours)
        assert a.idle_hours == pytest.approx(b.idle_hours)
        assert a.wasted_usd == pytest.approx(b.wasted_usd)
    assert stored.idle_hours == pytest.approx(42.0)


def test_retention_and_downsampling(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "h.sqlite") as store:
        _record(store, "leak", 120, 10)  # 20 minutes of 10 s samples, memory climbing
        before = store.read(T0, T0 + 1200)
        deleted, folded = store.maintain(
            now_s=T0 + 1200 + 86400, retention_s=10 * 86400, downsample_after_s=86400, bucket_s=300
        )
        after = store.read(T0, T0 + 1200)
        assert deleted == 0 and folded == 120
        s0, s1 = before.gpus[0], after.gpus[0]
        assert len(s1) == 4  # four 5-minute rows
        assert s1.duration_s.sum() == s0.duration_s.sum()  # hours are kept
        assert s1.memory_used_bytes.max() == s0.memory_used_bytes.max()  # the peak survives
        store.maintain(now_s=T0 + 1200 + 11 * 86400, retention_s=10 * 86400)
        assert store.read(T0, T0 + 1200).gpus == ()


def test_unusable_database_is_a_storage_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageError, match="cannot open the history database"):
        HistoryStore(bad)


@pytest.mark.parametrize(
    ("schema", "needle"),
    [
        # another program's database: was "internal error: OperationalError: no such column: ts" (exit 1)
        ("CREATE TABLE samples (x INTEGER)", "table samples lacks column(s) gpu, ts"),
        # a database with no gpuwise tables: gpuwise used to add its tables (and WAL mode) to it
        ("CREATE TABLE invoices (id INTEGER, usd REAL)", "tables invoices; none of gpuwise's"),
    ],
)
def test_someone_elses_sqlite_file_is_refused_untouched(
    tmp_path: Path, schema: str, needle: str
) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(schema)
    before = path.read_bytes()
    with pytest.raises(StorageError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        HistoryStore(path)
    assert path.read_bytes() == before  # no tables added, journal mode unchanged
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_empty_file_and_own_history_still_open(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(
        b""
    )  # a 0-byte file is an empty SQLite database: gpuwise may create its tables
    with HistoryStore(empty):
        pass
    with HistoryStore(empty) as store:  # reopening its own file passes the schema check
        assert store.path == empty


def test_a_long_window_is_folded_in_sql_with_the_same_report(tmp_path: Path) -> None:
    """Three days of 10 s rows with activity flickering around the 5 % threshold, two workload
    sets, a lost stretch and two nodes: the report over rows folded in SQL (what a window over
    two days reads) has the raw rows' hours, active and idle hours, dollars, peak memory and
    per-workload figures, from a small fraction of the rows."""
    import random

    from gpuwise.monitor.history import SampleContext

    rng = random.Random(3)
    with HistoryStore(tmp_path / "h.sqlite") as store:
        gid = store.register_gpu("n1", "GPU-x", 0, "NVIDIA H100 80GB HBM3", 81559)
        jobs = [None, store._jobset_id(("team/a",)), store._jobset_id(("team/b",))]
        ctxs = [
            store._context_id(SampleContext("a100-1", "testcloud", "r1", "on-demand", "p1")),
            store._context_id(SampleContext("h200-8", "testcloud", "r1", "spot", None)),
        ]
        rows = []
        for k in range(3 * 8640):
            ts = 1_000_000 + 10 * k
            rows.append(
                (
                    gid,
                    ts,
                    10,
                    rng.choice([None, 0, 40, 49, 50, 51, 300, 900]),
                    rng.choice([None, None, 20, 60, 700]),
                    rng.randint(0, 80000),
                    rng.randint(60, 700),
                    rng.randint(30, 80),
                    jobs[(k // 700) % 3],
                    None,
                    1 if 20000 <= k < 20100 else None,
                    "79" if k == 20000 else None,
                    ctxs[(k // 5000) % 2],
                )
            )
        store.append_rows(rows)
        start, end = 1_000_000, 1_000_000 + 3 * 86400
        raw, folded = store.read(start, end, bucket_s=0), store.read(start, end)
    assert len(folded.gpus[0]) < len(raw.gpus[0]) / 5
    offers = (_offer("A100-80GB", 2.5, 1, "a100-1"), _offer("H200", 40.0, 8, "h200-8"))
    a, b = (build_report(h, PriceBook(offers=offers)) for h in (raw, folded))
    for field in ("allocated_hours", "active_hours", "idle_hours", "cost_usd", "wasted_usd"):
        assert getattr(b, field) == pytest.approx(getattr(a, field), rel=1e-9), field
    ga, gb = a.gpus[0], b.gpus[0]
    assert gb.peak_memory_gib == ga.peak_memory_gib and gb.xid_codes == ga.xid_codes == (79,)
    assert gb.lost and ga.lost
    assert {w.workload: round(w.cost_usd or 0, 6) for w in b.workloads} == {
        w.workload: round(w.cost_usd or 0, 6) for w in a.workloads
    }
    assert [(p.plan_id, round(p.cost_usd or 0, 6)) for p in b.plans] == [
        (p.plan_id, round(p.cost_usd or 0, 6)) for p in a.plans
    ]
