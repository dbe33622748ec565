"""The local history: an SQLite file (WAL mode) of per-GPU samples, with retention and downsampling.

Layout (small integers keep 30 days × 8 GPUs × 10 s under 100 MB, see benchmarks/monitor_perf.py):

* ``gpus(id, host, uuid, idx, model, memory_total_mib)``
* ``jobsets(id, names)``: each distinct set of workloads on a GPU, stored once (JSON list)
* ``samples(gpu, ts, dur, util_pm, sm_pm, mem_mib, power_w, temp_c, jobset, mig_pm, lost, xids)``,
  ``WITHOUT ROWID`` keyed by (gpu, ts); ``*_pm`` are per-mille (0–1000), NULL = not read;
  ``mig_pm`` is the active share of a MIG GPU's slices, ``xids`` the XID codes seen (``79,48``).

One process writes a file at a time: the first :meth:`HistoryStore.append` takes an exclusive
lock on ``<file>.lock`` (a second ``gpuwise monitor`` on the same file exits 2 instead of
double-counting); readers never lock.

:meth:`HistoryStore.maintain` deletes rows older than the retention and folds rows older than
``downsample_after_s`` into ``bucket_s`` buckets (duration-weighted means; memory keeps the peak,
temperature the maximum, so headroom and alerts are not averaged away).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from gpuwise.base.paths import data_dir
from gpuwise.errors import StorageError
from gpuwise.monitor.history import History, SeriesBuilder, WorkloadShares, mig_workload_shares
from gpuwise.monitor.snapshot import Snapshot

_MIB = 1024**2
_SCHEMA = """
CREATE TABLE IF NOT EXISTS gpus (id INTEGER PRIMARY KEY, host TEXT NOT NULL, uuid TEXT NOT NULL,
    idx INTEGER, model TEXT, memory_total_mib INTEGER, UNIQUE(host, uuid));
CREATE TABLE IF NOT EXISTS jobsets (id INTEGER PRIMARY KEY, names TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS samples (gpu INTEGER NOT NULL, ts INTEGER NOT NULL, dur INTEGER NOT NULL,
    util_pm INTEGER, sm_pm INTEGER, mem_mib INTEGER, power_w INTEGER, temp_c INTEGER, jobset INTEGER,
    mig_pm INTEGER, lost INTEGER, xids TEXT,
    PRIMARY KEY (gpu, ts)) WITHOUT ROWID;
"""
# Columns added after the first release, added to an older file on open (NULL in old rows).
_ADDED_COLUMNS = (("mig_pm", "INTEGER"), ("lost", "INTEGER"), ("xids", "TEXT"))
_INSERT = (
    "INSERT OR REPLACE INTO samples (gpu, ts, dur, util_pm, sm_pm, mem_mib, power_w, temp_c, jobset, mig_pm, "
    "lost, xids) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
)
Row = tuple[
    int,
    int,
    int,
    int | None,
    int | None,
    int | None,
    int | None,
    int | None,
    int | None,
    int | None,
    int | None,
    str | None,
]

# The columns each table must have (the schema above); checked before a file is used.
_COLUMNS = {
    "gpus": ("id", "host", "uuid", "idx", "model", "memory_total_mib"),
    "jobsets": ("id", "names"),
    "samples": ("gpu", "ts", "dur", "util_pm", "sm_pm", "mem_mib", "power_w", "temp_c", "jobset"),
}


def default_db_path() -> Path:
    """``<data dir>/monitor.sqlite``."""
    return data_dir() / "monitor.sqlite"


def _pm(x: float | None) -> int | None:
    return None if x is None else round(x * 1000)


class HistoryStore:
    """Append snapshots, read windows back, keep the file small. Not thread-safe: one per thread."""

    def __init__(self, path: Path | str | None = None, *, create: bool = True) -> None:
        """Open (``create=True``: or start) the history at ``path``.

        ``create=False`` is for readers (``gpuwise report --db``): a file without gpuwise's
        tables, an empty one included, is refused and left exactly as it was.
        """
        self.path = Path(path) if path is not None else default_db_path()
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            elif not self.path.is_file():
                raise StorageError(
                    f"no history database at {self.path}",
                    hint="give the --db file `gpuwise monitor` writes",
                )
            self._db = sqlite3.connect(self.path, timeout=10)
            self._check_schema(create)  # first: WAL mode would persist in another program's file
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            have = {str(r[1]) for r in self._db.execute("PRAGMA table_info(samples)")}
            for name, kind in _ADDED_COLUMNS:
                if name not in have:
                    self._db.execute(f"ALTER TABLE samples ADD COLUMN {name} {kind}")
        except sqlite3.DatabaseError as exc:
            raise StorageError(
                f"cannot open the history database {self.path}: {exc}",
                hint="give another --db path, or move the broken file away",
            ) from exc
        except OSError as exc:
            raise StorageError(
                f"cannot create {self.path.parent}: {exc.strerror}",
                hint="give a writable --db path",
            ) from exc
        self._gpu_ids: dict[tuple[str, str], int] = {}
        self._jobset_ids: dict[str, int] = {}
        self._lock_fd: int | None = None

    def lock_writer(self) -> None:
        """Become the file's only writer, or raise :class:`StorageError` naming the other one."""
        if self._lock_fd is not None:
            return
        import fcntl

        lock = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(
                f"cannot create {lock}: {exc.strerror}", hint="give a writable --db path"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            other = os.read(fd, 32).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StorageError(
                f"{self.path} is already being written by pid {other} (another `gpuwise monitor`); "
                "two writers would count every GPU-hour twice",
                hint="stop the other monitor, or give this one another --db",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def _check_schema(self, create: bool) -> None:
        """Refuse another program's SQLite file before adding tables to it or reading it wrongly."""
        tables = {
            str(r[0]) for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        problem = ""
        if not create and not tables & _COLUMNS.keys():
            problem = "an empty file" if self.path.stat().st_size == 0 else "no gpuwise tables"
        if tables and not tables & _COLUMNS.keys():
            problem = f"tables {', '.join(sorted(tables))}; none of gpuwise's"
        for table in sorted(tables & _COLUMNS.keys()):
            have = {str(r[1]) for r in self._db.execute(f"PRAGMA table_info({table})")}
            if missing := [c for c in _COLUMNS[table] if c not in have]:
                problem = f"table {table} lacks column(s) {', '.join(missing)}"
                break
        if problem:
            self._db.close()
            raise StorageError(
                f"{self.path} is not a gpuwise history database ({problem})",
                hint="give another --db path (gpuwise creates the file when it does not exist)"
                if create
                else "give the --db file `gpuwise monitor` writes",
            )

    def close(self) -> None:
        self._db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------
    def _gpu_id(self, host: str, uuid: str, idx: int, model: str, total_mib: int | None) -> int:
        key = (host, uuid)
        gid = self._gpu_ids.get(key)
        if gid is None:
            self._db.execute(
                "INSERT OR IGNORE INTO gpus(host, uuid, idx, model, memory_total_mib) VALUES (?,?,?,?,?)",
                (host, uuid, idx, model, total_mib),
            )
            row = self._db.execute("SELECT id FROM gpus WHERE host=? AND uuid=?", key).fetchone()
            gid = self._gpu_ids[key] = int(row[0])
        return gid

    def _jobset_id(
        self, names: tuple[str, ...], shares: WorkloadShares | None = None
    ) -> int | None:
        """The id of a set of workloads: a JSON list of names, or for a MIG GPU a list of
        ``[name, share, active]`` (see :attr:`GpuSeries.workload_shares`)."""
        if not names:
            return None
        text = (
            json.dumps(sorted(names))
            if shares is None
            else json.dumps(sorted([w, round(share, 6), active] for w, share, active in shares))
        )
        jid = self._jobset_ids.get(text)
        if jid is None:
            self._db.execute("INSERT OR IGNORE INTO jobsets(names) VALUES (?)", (text,))
            jid = self._jobset_ids[text] = int(
                self._db.execute("SELECT id FROM jobsets WHERE names=?", (text,)).fetchone()[0]
            )
        return jid

    def append(self, snap: Snapshot, duration_s: float) -> int:
        """Store one snapshot whose samples stand for ``duration_s`` each; returns rows written."""
        self.lock_writer()
        rows = []
        for g in snap.gpus:
            total = None if g.memory_total_bytes is None else g.memory_total_bytes // _MIB
            gid = self._gpu_id(snap.host, g.uuid, g.index, g.name, total)
            rows.append(
                (
                    gid,
                    int(snap.timestamp_s),
                    max(1, round(duration_s)),
                    _pm(g.utilization_gpu_ratio),
                    _pm(g.sm_active_ratio),
                    None if g.memory_used_bytes is None else g.memory_used_bytes // _MIB,
                    None if g.power_w is None else round(g.power_w),
                    None if g.temperature_c is None else round(g.temperature_c),
                    self._jobset_id(
                        tuple(sorted({p.workload for p in g.processes})), mig_workload_shares(g)
                    ),
                    _pm(g.mig_active_share),
                    1 if g.lost else None,
                    ",".join(str(code) for code, _ in g.xid_counts) or None,
                )
            )
        self.append_rows(rows)
        return len(rows)

    def append_rows(
        self,
        rows: list[Row]
        | list[
            tuple[
                int,
                int,
                int,
                int | None,
                int | None,
                int | None,
                int | None,
                int | None,
                int | None,
            ]
        ],
    ) -> None:
        """Insert raw rows (used by :meth:`append` and the benchmark; 9-column rows leave the MIG
        and health columns NULL). Takes the writer lock first."""
        self.lock_writer()
        full = [r if len(r) == 12 else (*r, None, None, None) for r in rows]
        try:
            with self._db:
                self._db.executemany(_INSERT, full)
        except sqlite3.DatabaseError as exc:
            raise StorageError(
                f"cannot write to {self.path}: {exc}", hint="check the disk is not full"
            ) from exc

    def register_gpu(self, host: str, uuid: str, idx: int, model: str, total_mib: int) -> int:
        return self._gpu_id(host, uuid, idx, model, total_mib)

    # -- maintenance ---------------------------------------------------------------------
    def maintain(
        self,
        *,
        now_s: float | None = None,
        retention_s: float = 90 * 86400,
        downsample_after_s: float = 35 * 86400,
        bucket_s: int = 300,
    ) -> tuple[int, int]:
        """Delete rows past the retention, downsample old rows; returns (deleted, folded)."""
        now = time.time() if now_s is None else now_s
        self.lock_writer()
        with self._db:
            deleted = self._db.execute(
                "DELETE FROM samples WHERE ts < ?", (int(now - retention_s),)
            ).rowcount
            cutoff = int(now - downsample_after_s)
            cur = self._db.execute(
                "SELECT gpu, (ts / ?) * ?, SUM(dur), "
                " CAST(ROUND(SUM(util_pm * dur) * 1.0 / NULLIF(SUM(CASE WHEN util_pm IS NOT NULL THEN dur END), 0)) AS INTEGER),"
                " CAST(ROUND(SUM(sm_pm * dur) * 1.0 / NULLIF(SUM(CASE WHEN sm_pm IS NOT NULL THEN dur END), 0)) AS INTEGER),"
                " MAX(mem_mib),"
                " CAST(ROUND(SUM(power_w * dur) * 1.0 / NULLIF(SUM(CASE WHEN power_w IS NOT NULL THEN dur END), 0)) AS INTEGER),"
                " MAX(temp_c), MAX(jobset),"
                " CAST(ROUND(SUM(mig_pm * dur) * 1.0 / NULLIF(SUM(CASE WHEN mig_pm IS NOT NULL THEN dur END), 0)) AS INTEGER),"
                " MAX(lost), MAX(xids), COUNT(*) "
                "FROM samples WHERE ts < ? AND dur < ? GROUP BY gpu, ts / ? HAVING COUNT(*) > 1",
                (bucket_s, bucket_s, cutoff, bucket_s, bucket_s),
            )
            buckets = cur.fetchall()
            folded = 0
            for gpu, start, *_rest in buckets:
                folded += self._db.execute(
                    "DELETE FROM samples WHERE gpu=? AND ts >= ? AND ts < ? AND dur < ?",
                    (gpu, start, start + bucket_s, bucket_s),
                ).rowcount
            self._db.executemany(_INSERT, [tuple(b[:12]) for b in buckets])
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted, folded

    # -- reading -------------------------------------------------------------------------
    def read(self, start_s: float, end_s: float) -> History:
        """Every GPU's samples with ``start_s <= ts < end_s``."""
        jobsets: dict[int, tuple[tuple[str, ...], WorkloadShares | None]] = {}
        for jid, text in self._db.execute("SELECT id, names FROM jobsets"):
            items = json.loads(text)
            if items and isinstance(items[0], list):  # a MIG GPU's [name, share, active] entries
                shares = tuple((str(w), float(share), bool(active)) for w, share, active in items)
                jobsets[jid] = (tuple(sorted({w for w, _, _ in shares})), shares)
            else:
                jobsets[jid] = (tuple(items), None)
        gpus = {
            gid: (host, uuid, idx, model, total)
            for gid, host, uuid, idx, model, total in self._db.execute("SELECT * FROM gpus")
        }
        builders: dict[int, SeriesBuilder] = {}
        for gid, ts, dur, util, sm, mem, power, temp, jobset, mig, lost, xids in self._db.execute(
            "SELECT gpu, ts, dur, util_pm, sm_pm, mem_mib, power_w, temp_c, jobset, mig_pm, lost, xids "
            "FROM samples WHERE ts >= ? AND ts < ? ORDER BY gpu, ts",
            (start_s, end_s),
        ):
            b = builders.get(gid)
            if b is None:
                host, uuid, idx, model, total = gpus[gid]
                b = builders[gid] = SeriesBuilder(
                    host, uuid, idx, model, float(total) * _MIB if total else float("nan")
                )
            b.add(
                ts,
                dur,
                None if util is None else util / 1000,
                None if sm is None else sm / 1000,
                None if mem is None else mem * _MIB,
                power,
                temp,
                jobsets[jobset][0] if jobset in jobsets else (),
                shares=jobsets[jobset][1] if jobset in jobsets else None,
                mig_share=None if mig is None else mig / 1000,
                lost=bool(lost),
                xids=tuple(int(x) for x in xids.split(",") if x.isdigit()) if xids else (),
            )
        return History(
            start_s,
            end_s,
            tuple(b.build() for b in builders.values()),
            source=f"sqlite:{self.path}",
        )

    def size_bytes(self) -> int:
        """Database size on disk (main file + WAL)."""
        wal = self.path.with_name(self.path.name + "-wal")
        return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
