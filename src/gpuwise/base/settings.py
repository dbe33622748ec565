"""Every environment variable gpuwise reads, declared once and read on call.

That is every ``GPUWISE_*`` name, and the few other tools' names gpuwise honours as they do
(gpuhunt's catalog location, the XDG folders, Kubernetes' ``NODE_NAME``).

Library code never reads ``os.environ`` for a ``GPUWISE_*`` name itself: it asks this module,
which knows each variable's kind, default and meaning (:data:`SETTINGS`, also the table in
``docs/settings.md``). Values are read when asked for, never at import, so a test or a
container can set them at any time. A value that cannot be read raises
:class:`~gpuwise.errors.InputError` naming the variable and how to fix it.

Variables that gpuwise *sets* for the processes it starts (``GPUWISE_RUN_DIR`` for the ranks
``gpuwise run`` launches, ``GPUWISE_CHECKPOINT_DIR`` in exported jobs) are declared here too,
since the child reads them through this module.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpuwise.errors import InputError

Kind = Literal["text", "path", "url", "number", "seconds", "count", "flag", "list"]


@dataclass(frozen=True)
class Setting:
    """One environment variable."""

    name: str
    """The variable's name, ``GPUWISE_...``."""
    kind: Kind
    """How its value is read: free text, a path, a URL, a number, seconds, a switch or a comma list."""
    area: str
    """The capability that reads it (for the docs table)."""
    help: str
    """What it changes, and its default when unset."""


def _s(name: str, kind: Kind, area: str, help: str) -> tuple[str, Setting]:
    return name, Setting(name, kind, area, help)


SETTINGS: dict[str, Setting] = dict(
    [
        _s(
            "GPUWISE_HOME",
            "path",
            "paths",
            "one folder for config/ and data/ (default: XDG folders)",
        ),
        _s(
            "GPUWISE_SKYPILOT_CATALOG",
            "text",
            "catalog",
            "SkyPilot's local catalog root, or `off` (default ~/.sky/catalogs)",
        ),
        _s("GPUWISE_DEBUG", "flag", "cli", "show tracebacks, as --debug does"),
        _s("GPUWISE_FETCH_TIMEOUT_S", "seconds", "catalog", "socket timeout per fetch attempt"),
        _s("GPUWISE_FETCH_MAX_BYTES", "number", "catalog", "largest body a fetch accepts"),
        _s(
            "GPUWISE_SKYPILOT_CATALOG_URL",
            "url",
            "catalog",
            "where SkyPilot catalog files are fetched",
        ),
        _s("GPUWISE_SKYPILOT_CLOUDS", "list", "catalog", "clouds fetched from SkyPilot's catalog"),
        _s("GPUWISE_AWS_SPOT_ADVISOR_URL", "url", "catalog", "AWS Spot Instance Advisor file"),
        _s("GPUWISE_AZURE_PRICES_URL", "url", "catalog", "Azure Retail Prices API base"),
        _s("GPUWISE_AWS_PRICE_LIST_URL", "url", "catalog", "AWS price list base"),
        _s(
            "GPUWISE_AWS_PRICE_LIST_REGIONS",
            "list",
            "catalog",
            "regions read from the AWS price list",
        ),
        _s("GPUWISE_GPUHUNT_PROVIDERS", "list", "catalog", "providers read from gpuhunt's catalog"),
        _s(
            "GPUWISE_SKYPILOT_COMMITS_URL",
            "url",
            "catalog",
            "GitHub commits API that dates SkyPilot catalog files, or `off`",
        ),
        _s(
            "GPUWISE_FETCH_DEADLINE_S",
            "seconds",
            "catalog",
            "overall deadline of one download, retries included (default 300)",
        ),
        _s(
            "GPUWISE_FETCH_RUN_DEADLINE_S",
            "seconds",
            "catalog",
            "overall deadline of one `catalog update --fetch` run (default 1800)",
        ),
        _s(
            "GPUWISE_CATALOG_DIR",
            "path",
            "catalog",
            "folder of the catalog store, shared by a scheduled refresh and its readers "
            "(default <data dir>/catalog)",
        ),
        _s(
            "GPUWISE_CATALOG_LOCK_TIMEOUT_S",
            "seconds",
            "catalog",
            "how long `catalog update` waits for another update's lock (default 600)",
        ),
        _s(
            "GPUWISE_CATALOG_PRECEDENCE",
            "text",
            "catalog",
            "which fetched source wins per cloud, e.g. `gcp=gpuhunt,skypilot;*=skypilot,gpuhunt` "
            "(default: `catalog sources`)",
        ),
        _s("GPUWISE_PIP_SPEC", "text", "planner", "what an exported job's setup installs"),
        _s("GPUWISE_CHECKPOINT_DIR", "text", "train", "checkpoint URL an exported job writes to"),
        _s("GPUWISE_SETTINGS", "text", "train", "the planner's chosen settings, for the job"),
        _s(
            "GPUWISE_PLAN",
            "path",
            "train",
            "the plan file (`plan --save`) the job runs; set by `gpuwise run --plan` and exports",
        ),
        _s(
            "GPUWISE_PLAN_ID",
            "text",
            "train/monitor",
            "the plan id of the job on this machine; labels run records and GPU metrics",
        ),
        _s("GPUWISE_CLOUD", "text", "train/monitor", "this machine's cloud (default: detected)"),
        _s("GPUWISE_REGION", "text", "monitor", "this machine's region, for its price"),
        _s(
            "GPUWISE_CAPACITY_TYPE",
            "text",
            "monitor",
            "this machine's capacity type, on-demand or spot, for its price (default: detected)",
        ),
        _s(
            "GPUWISE_INSTANCE_TYPE",
            "text",
            "monitor",
            "this machine's instance type, for its price",
        ),
        _s(
            "GPUWISE_GPU_PRICE_USD_PER_HOUR",
            "number",
            "monitor",
            "what one GPU-hour costs here (overrides the catalog)",
        ),
        _s(
            "GPUWISE_HOST",
            "text",
            "monitor",
            "the host label on every series (default: NODE_NAME, hostname)",
        ),
        _s("GPUWISE_METADATA_URL", "url", "train", "base URL of every cloud's metadata service"),
        _s(
            "GPUWISE_POLL_INTERVAL_S",
            "seconds",
            "train",
            "how often notices are polled (default 5)",
        ),
        _s(
            "GPUWISE_GRACE_PERIOD_S",
            "seconds",
            "train",
            "window assumed after a termination signal (default 30)",
        ),
        _s("GPUWISE_RUN_DIR", "path", "train", "set by `gpuwise run` for its ranks"),
        _s(
            "GPUWISE_RUN_ID",
            "text",
            "train",
            "names a run's records (`gpuwise-runs/`); `gpuwise run` makes one unless set",
        ),
        _s(
            "GPUWISE_ATTEMPT",
            "count",
            "train",
            "set by `gpuwise run` for its ranks: 0 for the first start, +1 per restart",
        ),
        _s(
            "GPUWISE_ALLOW_PLAN_MISMATCH",
            "flag",
            "train",
            "train although the job differs from the plan (`gpuwise run --allow-plan-mismatch`)",
        ),
        _s(
            "GPUWISE_PILOT_STEPS",
            "count",
            "train",
            "measure this many optimizer steps after warm-up, then stop (`gpuwise run --pilot`)",
        ),
        _s(
            "GPUWISE_PILOT_WARMUP",
            "count",
            "train",
            "optimizer steps a pilot runs before it measures (default 2)",
        ),
        _s(
            "GPUWISE_PARENT_PID",
            "count",
            "train",
            "set by `gpuwise run` and its torchrun: the process a worker dies with",
        ),
        _s(
            "GPUWISE_LOCAL_CHECKPOINT_DIR",
            "path",
            "train",
            "local staging folder for remote checkpoints",
        ),
        # What an exported job reads back (gpuwise.planner.job_settings): the searched settings
        _s(
            "GPUWISE_ZERO",
            "count",
            "job",
            "ZeRO stage the plan chose (0 = DDP, 3 = FSDP full shard)",
        ),
        _s("GPUWISE_RECOMPUTE", "text", "job", "activation recomputation the plan chose"),
        _s("GPUWISE_MICRO_BATCH", "count", "job", "sequences per GPU per forward/backward pass"),
        _s("GPUWISE_ACCUMULATION", "count", "job", "micro-batches per optimizer step per replica"),
        _s("GPUWISE_GLOBAL_BATCH", "count", "job", "sequences per optimizer step"),
        _s("GPUWISE_DATA_PARALLEL", "count", "job", "model replicas the plan assumed"),
        _s("GPUWISE_TENSOR_PARALLEL", "count", "job", "GPUs one model copy is split over"),
        # Other tools' variables that gpuwise honours the same way they do
        _s("GPUHUNT_CATALOG_URL", "url", "catalog", "gpuhunt's own: where its catalogs are"),
        _s("GPUHUNT_CATALOG_DIR", "path", "catalog", "gpuhunt's own: a folder of its catalogs"),
        _s(
            "SKYPILOT_TASK_ID",
            "text",
            "train",
            "SkyPilot's own: the task's id, kept across a managed job's recoveries; names the run "
            "records when GPUWISE_RUN_ID is unset",
        ),
        _s("NODE_NAME", "text", "monitor", "Kubernetes' node name (downward API), the host label"),
        _s("XDG_CONFIG_HOME", "path", "paths", "where the config folder goes (~/.config)"),
        _s("XDG_DATA_HOME", "path", "paths", "where the data folder goes (~/.local/share)"),
    ]
)


def _declared(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in gpuwise.base.settings.SETTINGS") from None


def text(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The variable's value, or None when unset or empty."""
    _declared(name)
    value = (os.environ if env is None else env).get(name)
    return value or None


def flag(name: str, env: Mapping[str, str] | None = None) -> bool:
    """True when set to anything but ``""``, ``0``, ``false``, ``no`` or ``off``."""
    value = text(name, env)
    return value is not None and value.strip().lower() not in ("0", "false", "no", "off")


def path(name: str, env: Mapping[str, str] | None = None) -> Path | None:
    """The variable as a path (``~`` expanded), or None when unset."""
    value = text(name, env)
    return Path(value).expanduser() if value else None


def listed(name: str, default: str, env: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated list, blanks dropped; ``default`` when unset."""
    value = text(name, env) or default
    return [part.strip() for part in value.split(",") if part.strip()]


def number(
    name: str,
    default: float,
    *,
    env: Mapping[str, str] | None = None,
    positive: bool = True,
) -> float:
    """A finite number (``positive``: > 0, else ≥ 0); ``default`` when unset."""
    raw = text(name, env)
    if raw is None:
        return default
    kind = "seconds" if _declared(name).kind == "seconds" else "a number"
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        want = "a positive" if positive else "a non-negative"
        raise InputError(
            f"{name}={raw!r} is not {want} number",
            hint=f"unset {name} or set it to {want} number ({kind}), e.g. {name}=30",
        )
    return value


def count(name: str, default: int, env: Mapping[str, str] | None = None) -> int:
    """A whole number ≥ 0; ``default`` when unset."""
    raw = text(name, env)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise InputError(
            f"{name}={raw!r} is not a whole number",
            hint=f"unset {name} or set it to a whole number ≥ 0, e.g. {name}=2",
        )
    return value


def markdown_table() -> str:
    """The variables as the Markdown table in ``docs/settings.md`` (a test keeps the two equal)."""
    rows = ["| variable | kind | read by | what it does |", "| --- | --- | --- | --- |"]
    rows += [f"| `{s.name}` | {s.kind} | {s.area} | {s.help} |" for s in SETTINGS.values()]
    return "\n".join(rows) + "\n"
