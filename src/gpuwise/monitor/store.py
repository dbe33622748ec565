"""The local history: an SQLite file (WAL mode) of per-GPU samples, with retention and downsampling.

Layout (small integers keep 30 days × 8 GPUs × 10 s under 100 MB, see benchmarks/monitor_perf.py):

* ``gpus(id, host, uuid, idx, model, memory_total_mib)``
* ``jobsets(id, names)``: each distinct set of workloads on a GPU, stored once (JSON list)
* ``contexts(id, instance_type, cloud, region, capacity_type, plan_id)``: what a sample ran on
  and for (the node's facts and the job's ``GPUWISE_PLAN_ID``), each distinct one stored once;
  ``''`` = not known
* ``samples(gpu, ts, dur, util_pm, sm_pm, mem_mib, power_w, temp_c, jobset, mig_pm, lost, xids,
  ctx)``, ``WITHOUT ROWID`` keyed by (gpu, ts); ``*_pm`` are per-mille (0–1000), NULL = not read;
  ``mig_pm`` is the active share of a MIG GPU's slices, ``xids`` the XID codes seen (``79,48``),
  ``ctx`` the context id (NULL: recorded before contexts existed). A second row for the same GPU
  and second (a monitor catching up after a stall) adds its duration to the first, never
  replaces it.
* view ``gpu_samples``: one row per sample with its GPU, context and workloads spelled out (for
  other tools, e.g. ``fleet --demand-from-history``); docs/monitoring.md lists its columns.

One process writes a file at a time: the first :meth:`HistoryStore.append` takes an exclusive
``flock`` on the database file itself, so a second ``gpuwise monitor`` reaching the same file by
another path (a symlink, a hard link) exits 2 instead of double-counting; ``<file>.lock`` beside
the real file names the writer's pid. Readers never lock. (SQLite's own locks are POSIX record
locks, independent of ``flock`` on Linux.)

:meth:`HistoryStore.maintain` deletes rows older than the retention and folds rows older than
``downsample_after_s`` into ``bucket_s`` buckets (duration-weighted means; memory keeps the peak,
temperature the maximum, so headroom and alerts are not averaged away).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path

from gpuwise.base.paths import data_dir
from gpuwise.errors import StorageError
from gpuwise.monitor.history import (
    History,
    SampleContext,
    SeriesBuilder,
    WorkloadShares,
    mig_workload_shares,
)
from gpuwise.monitor.snapshot import ACTIVE_THRESHOLD, Snapshot

_MIB = 1024**2
_SCHEMA = """
CREATE TABLE IF NOT EXISTS gpus (id INTEGER PRIMARY KEY, host TEXT NOT NULL, uuid TEXT NOT NULL,
    idx INTEGER, model TEXT, memory_total_mib INTEGER, UNIQUE(host, uuid));
CREATE TABLE IF NOT EXISTS jobsets (id INTEGER PRIMARY KEY, names TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS samples (gpu INTEGER NOT NULL, ts INTEGER NOT NULL, dur INTEGER NOT NULL,
    util_pm INTEGER, sm_pm INTEGER, mem_mib INTEGER, power_w INTEGER, temp_c INTEGER, jobset INTEGER,
    mig_pm INTEGER, lost INTEGER, xids TEXT,
    PRIMARY KEY (gpu, ts)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS contexts (id INTEGER PRIMARY KEY, instance_type TEXT NOT NULL,
    cloud TEXT NOT NULL, region TEXT NOT NULL, capacity_type TEXT NOT NULL, plan_id TEXT NOT NULL,
    UNIQUE(instance_type, cloud, region, capacity_type, plan_id));
"""
_VIEW = """
CREATE VIEW IF NOT EXISTS gpu_samples AS
SELECT g.host AS host, g.uuid AS uuid, g.idx AS gpu_index, g.model AS model,
    g.memory_total_mib AS memory_total_mib, s.ts AS ts, s.dur AS dur,
    s.util_pm / 1000.0 AS utilization_ratio, s.sm_pm / 1000.0 AS sm_active_ratio,
    s.mem_mib AS memory_used_mib, s.mig_pm / 1000.0 AS mig_active_share,
    COALESCE(s.lost, 0) AS lost, COALESCE(j.names, '[]') AS workloads,
    NULLIF(c.instance_type, '') AS instance_type, NULLIF(c.cloud, '') AS cloud,
    NULLIF(c.region, '') AS region, NULLIF(c.capacity_type, '') AS capacity_type,
    NULLIF(c.plan_id, '') AS plan_id
FROM samples s JOIN gpus g ON g.id = s.gpu
LEFT JOIN jobsets j ON j.id = s.jobset LEFT JOIN contexts c ON c.id = s.ctx;
"""
# Columns added after the first release, added to an older file on open (NULL in old rows).
_ADDED_COLUMNS = (("mig_pm", "INTEGER"), ("lost", "INTEGER"), ("xids", "TEXT"), ("ctx", "INTEGER"))
# a second row for (gpu, ts) is the same second read again: keep both durations, newest values
_INSERT = (
    "INSERT INTO samples (gpu, ts, dur, util_pm, sm_pm, mem_mib, power_w, temp_c, jobset, mig_pm, "
    "lost, xids, ctx) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (gpu, ts) DO UPDATE SET "
    "dur = dur + excluded.dur, util_pm = excluded.util_pm, sm_pm = excluded.sm_pm, "
    "mem_mib = MAX(COALESCE(mem_mib, 0), COALESCE(excluded.mem_mib, 0)), "
    "power_w = excluded.power_w, temp_c = excluded.temp_c, jobset = excluded.jobset, "
    "mig_pm = excluded.mig_pm, lost = excluded.lost, xids = excluded.xids, ctx = excluded.ctx"
)
# downsampling writes a bucket row in place of the rows it folded (deleted first)
_REPLACE = (
    "INSERT OR REPLACE INTO samples (gpu, ts, dur, util_pm, sm_pm, mem_mib, power_w, temp_c, "
    "jobset, mig_pm, lost, xids, ctx) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
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
    int | None,
]

# The columns each table must have (the schema above); checked before a file is used.
_COLUMNS = {
    "gpus": ("id", "host", "uuid", "idx", "model", "memory_total_mib"),
    "jobsets": ("id", "names"),
    "samples": ("gpu", "ts", "dur", "util_pm", "sm_pm", "mem_mib", "power_w", "temp_c", "jobset"),
}


FOLD_AFTER_S = 2 * 86400
"""Reports over windows longer than this read rows folded in SQL (see :meth:`HistoryStore.read`)."""
FOLD_BUCKET_S = 300
"""The folded rows' length: 5 minutes, as downsampling's."""
MAX_BUCKETS = 10_000
"""At most this many folded rows per GPU and class (longer buckets for longer windows)."""


def default_db_path() -> Path:
    """``<data dir>/monitor.sqlite``."""
    return data_dir() / "monitor.sqlite"


def _pm(x: float | None) -> int | None:
    return None if x is None else round(x * 1000)


class HistoryStore:
    """Append snapshots, read windows back, keep the file small. Not thread-safe: one per thread."""

    def __init__(
        self, path: Path | str | None = None, *, create: bool = True, flag: str = "--db"
    ) -> None:
        """Open (``create=True``: or start) the history at ``path``.

        ``create=False`` is for readers (``gpuwise report --db``): a file without gpuwise's
        tables, an empty one included, is refused and left exactly as it was. ``flag``: the
        option that named the file, for the hints (``fleet --demand-from-history``).
        """
        self._flag = flag
        self.path = Path(path) if path is not None else default_db_path()
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            elif not self.path.is_file():
                raise StorageError(
                    f"no history database at {self.path}",
                    hint=f"give {flag} the file that `gpuwise monitor --db` writes",
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
            self._db.executescript(_VIEW)
        except sqlite3.DatabaseError as exc:
            raise StorageError(
                f"cannot open the history database {self.path}: {exc}",
                hint=f"give another {flag} path, or move the broken file away",
            ) from exc
        except OSError as exc:
            raise StorageError(
                f"cannot create {self.path.parent}: {exc.strerror}",
                hint="give a writable --db path",
            ) from exc
        self._gpu_ids: dict[tuple[str, str], int] = {}
        self._jobset_ids: dict[str, int] = {}
        self._context_ids: dict[SampleContext, int] = {}
        self._lock_fd: int | None = None
        self._spare_fds: list[int] = []

    def lock_writer(self) -> None:
        """Become the file's only writer, or raise :class:`StorageError` naming the other one."""
        if self._lock_fd is not None:
            return
        import fcntl

        real = Path(os.path.realpath(self.path))
        try:
            fd = os.open(real, os.O_RDONLY)  # the database file itself, whatever path led here
        except OSError as exc:
            raise StorageError(
                f"cannot open {real}: {exc.strerror}", hint="give a writable --db path"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            # closed only after SQLite's connection: closing a descriptor of the database file
            # would drop the POSIX locks SQLite holds on it in this process
            self._spare_fds.append(fd)
            try:
                other = real.with_name(real.name + ".lock").read_text().strip() or "?"
            except OSError:
                other = "?"
            raise StorageError(
                f"{self.path} is already being written by pid {other} (another `gpuwise monitor`); "
                "two writers would count every GPU-hour twice",
                hint="stop the other monitor, or give this one another --db",
            ) from None
        self._lock_fd = fd
        with contextlib.suppress(OSError):  # only informational: the lock is the flock
            real.with_name(real.name + ".lock").write_text(str(os.getpid()))

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
                hint=f"give another {self._flag} path (gpuwise creates the file when it does "
                "not exist)"
                if create
                else f"give {self._flag} the file that `gpuwise monitor --db` writes",
            )

    def close(self) -> None:
        self._db.close()  # first: then closing our descriptors cannot drop SQLite's locks
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
        for fd in self._spare_fds:
            os.close(fd)
        self._spare_fds = []

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

    def _context_id(self, ctx: SampleContext | None) -> int | None:
        if ctx is None or ctx == SampleContext():
            return None
        cid = self._context_ids.get(ctx)
        if cid is None:
            key = (
                ctx.instance_type or "",
                ctx.cloud or "",
                ctx.region or "",
                ctx.capacity_type or "",
                ctx.plan_id or "",
            )
            self._db.execute(
                "INSERT OR IGNORE INTO contexts(instance_type, cloud, region, capacity_type, "
                "plan_id) VALUES (?,?,?,?,?)",
                key,
            )
            cid = self._context_ids[ctx] = int(
                self._db.execute(
                    "SELECT id FROM contexts WHERE instance_type=? AND cloud=? AND region=? "
                    "AND capacity_type=? AND plan_id=?",
                    key,
                ).fetchone()[0]
            )
        return cid

    def append(
        self, snap: Snapshot, duration_s: float, context: SampleContext | None = None
    ) -> int:
        """Store one snapshot whose samples stand for ``duration_s`` each; returns rows written.
        ``context``: the node (and plan) the samples ran on; a GPU whose processes carry a
        ``GPUWISE_PLAN_ID`` is recorded with theirs."""
        self.lock_writer()
        rows = []
        from dataclasses import replace

        for g in snap.gpus:
            plan = g.plan_id
            ctx = context if plan is None else replace(context or SampleContext(), plan_id=plan)
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
                    self._context_id(ctx),
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
        """Insert raw rows (used by :meth:`append` and the benchmark; 9-column rows leave the MIG,
        health and context columns NULL). Takes the writer lock first."""
        self.lock_writer()
        full = [r if len(r) == 13 else (*r, *(None,) * (13 - len(r))) for r in rows]
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
                " MAX(lost), MAX(xids), MAX(ctx), COUNT(*) "
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
            self._db.executemany(_REPLACE, [tuple(b[:13]) for b in buckets])
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted, folded

    # -- reading -------------------------------------------------------------------------
    def _select(self, start_s: float, end_s: float, bucket_s: int) -> sqlite3.Cursor:
        """Rows of the window, raw (``bucket_s`` 0) or folded in SQL into ``bucket_s`` buckets
        per GPU, workload set, context, health and activity class (active, idle, unknown), so
        the report's hours, dollars, active and idle hours and peaks stay exact: a bucket row's
        mean activity has the class of every row in it, memory keeps the peak."""
        if not bucket_s:
            return self._db.execute(
                "SELECT gpu, ts, dur, util_pm, sm_pm, mem_mib, power_w, temp_c, jobset, mig_pm, "
                "lost, xids, ctx FROM samples WHERE ts >= ? AND ts < ? ORDER BY gpu, ts",
                (start_s, end_s),
            )

        def mean(col: str) -> str:
            return (
                f"CAST(ROUND(SUM({col} * dur) * 1.0 / NULLIF(SUM(CASE WHEN {col} IS NOT NULL "
                f"THEN dur END), 0)) AS INTEGER)"
            )

        active = round(ACTIVE_THRESHOLD * 1000)
        return self._db.execute(
            f"SELECT gpu, MIN(ts), SUM(dur), {mean('util_pm')}, {mean('sm_pm')}, MAX(mem_mib), "
            f"{mean('power_w')}, MAX(temp_c), jobset, {mean('mig_pm')}, MAX(lost), "
            "GROUP_CONCAT(DISTINCT xids), ctx FROM samples WHERE ts >= ? AND ts < ? "
            "GROUP BY gpu, ts / ?, jobset, ctx, COALESCE(lost, 0), "
            "CASE WHEN COALESCE(sm_pm, util_pm) IS NULL THEN -1 "
            f"WHEN COALESCE(sm_pm, util_pm) >= {active} THEN 1 ELSE 0 END "
            "ORDER BY gpu, 2",
            (start_s, end_s, bucket_s),
        )

    def read(self, start_s: float, end_s: float, bucket_s: int | None = None) -> History:
        """Every GPU's samples with ``start_s <= ts < end_s``. ``bucket_s``: fold rows into
        buckets of this many seconds in SQL (0: raw rows); by default windows longer than
        :data:`FOLD_AFTER_S` are folded into :data:`FOLD_BUCKET_S` (or more, for at most
        :data:`MAX_BUCKETS` per GPU), so a 30-day report reads thousands of rows, not millions.
        Idle stretches and leak detection then work at the bucket's resolution."""
        if bucket_s is None:
            window = end_s - start_s
            bucket_s = (
                0
                if window <= FOLD_AFTER_S
                else max(FOLD_BUCKET_S, -(-int(window) // MAX_BUCKETS // 60) * 60)
            )
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
        contexts = {
            cid: SampleContext(*(v or None for v in rest))
            for cid, *rest in self._db.execute(
                "SELECT id, instance_type, cloud, region, capacity_type, plan_id FROM contexts"
            )
        }
        builders: dict[int, SeriesBuilder] = {}
        for (
            gid,
            ts,
            dur,
            util,
            sm,
            mem,
            power,
            temp,
            jobset,
            mig,
            lost,
            xids,
            ctx,
        ) in self._select(start_s, end_s, bucket_s):
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
                context=contexts.get(ctx),
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
