"""Run history as files: every run record and plan file under a folder, local or in object storage.

Training leaves one :class:`~gpuwise.base.recipe.RunRecord` per attempt under
``<checkpoint dir>/gpuwise-runs/``; ``gpuwise plan --save`` and every export write a plan file
(``plan.json``, ``<job>.plan.json``). :func:`read_runs` walks a folder (``/data/ckpt``,
``s3://bucket/jobs``, ``gs://...``: anything fsspec opens) and returns both, each record with the
plan it ran, found by ``plan_id``. ``gpuwise calibrate --from-runs``, ``gpuwise report --runs`` and
``gpuwise plan --spot-mtbf auto`` all read history through here, so they see the same runs.

A file that is not a record or plan (truncated, hand-edited, another schema) is set aside with the
reason, never half-read; the callers say what they skipped. fsspec is imported on call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwise.base.recipe import RUNS_FOLDER, PlanFile, RunRecord, parse_plan_file, parse_run_record
from gpuwise.errors import GpuwiseError, InputError, StorageError

PLAN_NAMES = ("plan.json", ".plan.json")
"""A file is read as a plan file when its name is ``plan.json`` or ends in ``.plan.json``."""


@dataclass(frozen=True)
class FoundRun:
    """One run record and where it was found."""

    path: str
    """The record's URL or local path."""
    record: RunRecord
    plan: PlanFile | None
    """The plan file whose ``plan_id`` the record names; None when none was found."""

    @property
    def key(self) -> str:
        """``<run id>/<attempt>``: names one attempt in reports and calibration files."""
        return f"{self.record.run_id}/{self.record.attempt}"


@dataclass(frozen=True)
class RunHistory:
    """What :func:`read_runs` found under a folder."""

    root: str
    runs: tuple[FoundRun, ...]
    """Every readable record, oldest start first."""
    plans: Mapping[str, PlanFile]
    """Plan files by ``plan_id`` (from the folder and the plan files given)."""
    skipped: tuple[str, ...] = ()
    """Files that could not be read as a record or plan, each with the reason."""

    @property
    def missing_plans(self) -> tuple[str, ...]:
        """Plan ids that records name but no plan file holds."""
        ids = {r.record.plan_id for r in self.runs if r.record.plan_id and r.plan is None}
        return tuple(sorted(i for i in ids if i))


def read_runs(
    root: str | Path,
    *,
    plan_files: Sequence[str | Path] = (),
    storage_options: Mapping[str, Any] | None = None,
) -> RunHistory:
    """Every run record under ``root`` (in any ``gpuwise-runs/`` folder, at any depth) with its plan.

    ``plan_files``: more plan files to match records against (local paths); they win over a plan
    file of the same id found under ``root``. InputError when ``root`` does not exist or holds no
    run record; StorageError when the storage cannot be listed.
    """
    url = str(root)
    fs, base = _open(url, storage_options)
    try:
        if not fs.exists(base):
            raise InputError(
                f"no folder at {url}",
                hint="give the checkpoint folder (or a folder above it) that holds gpuwise-runs/",
            )
        names = sorted(fs.find(base)) if fs.isdir(base) else [base]
    except GpuwiseError:
        raise
    except Exception as exc:  # every backend has its own tree (OSError, ClientError, ...)
        raise StorageError(
            f"cannot list {url}: {type(exc).__name__}: {exc}",
            hint="check the URL, the credentials and that the storage is reachable",
        ) from exc
    records: list[tuple[str, RunRecord]] = []
    plans: dict[str, PlanFile] = {}
    skipped: list[str] = []
    for name in names:
        parts = name.replace("\\", "/").split("/")
        # a run keeps the plan it ran beside its records (<plan id>.plan.json): a plan, not a record
        is_plan = parts[-1] == PLAN_NAMES[0] or parts[-1].endswith(PLAN_NAMES[1])
        is_record = (
            not is_plan and len(parts) > 1 and parts[-2] == RUNS_FOLDER and name.endswith(".json")
        )
        if not (is_record or is_plan):
            continue
        shown = _shown(url, base, name)
        try:
            raw = _read(fs, name, shown)
            if is_record:
                records.append((shown, parse_run_record(raw, shown)))
            else:
                plan = parse_plan_file(raw, shown)
                plans.setdefault(plan.plan_id, plan)
        except InputError as exc:
            skipped.append(str(exc))
    for path in plan_files:
        from gpuwise.base.recipe import load_plan_file

        plan = load_plan_file(path)
        plans[plan.plan_id] = plan
    if not records:
        raise InputError(
            f"no run records under {url}" + (f" ({len(skipped)} unreadable)" if skipped else ""),
            hint=f"give the folder that holds {RUNS_FOLDER}/ (training writes one record per "
            "attempt there, beside its checkpoints)",
        )
    records.sort(key=lambda r: (r[1].started, r[1].run_id, r[1].attempt))
    found = tuple(
        FoundRun(path, rec, plans.get(rec.plan_id) if rec.plan_id else None)
        for path, rec in records
    )
    return RunHistory(root=url, runs=found, plans=plans, skipped=tuple(skipped))


def _open(url: str, options: Mapping[str, Any] | None) -> tuple[Any, str]:
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url, **dict(options or {}))
    except (ValueError, ImportError) as exc:
        raise InputError(
            f"cannot open {url}: {exc}",
            hint="give a local folder or a URL fsspec knows (s3://, gs://); install its package "
            "(s3fs, gcsfs) for object storage",
        ) from None
    return fs, str(path).rstrip("/") or "/"


def _read(fs: Any, name: str, shown: str) -> bytes:
    try:
        with fs.open(name, "rb") as f:
            data: bytes = f.read()
    except Exception as exc:
        raise InputError(
            f"{shown}: cannot read ({type(exc).__name__}: {exc})", hint="check the storage"
        ) from None
    return data


def _shown(url: str, base: str, name: str) -> str:
    """The file as the user would name it: under the URL they gave."""
    rel = name[len(base) :].lstrip("/") if name.startswith(base) else name
    return url.rstrip("/") + "/" + rel if rel else url
