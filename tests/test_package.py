"""The package as users meet it: the public API, light imports, a pure core."""

from __future__ import annotations

import subprocess
import sys

import gpuwise

PUBLIC_API = [
    "Catalog",
    "Estimate",
    "Workload",
    "estimate_workload",
    "workload_from_options",
    "Exporter",
    "FakeGpuReader",
    "HistoryStore",
    "NvmlGpuReader",
    "GpuSpec",
    "GpuwiseError",
    "InputError",
    "Offer",
    "__version__",
    "find_gpu",
    "load_catalog",
    "plan_fleet",
    "query_offers",
    # plan (issue 4)
    "Plan",
    "PlanOption",
    "PlanRequest",
    "plan",
    # doctor and bench (issue 8)
    "run_doctor",
    "DoctorOptions",
    "CheckResult",
    "run_bench",
    "BenchOptions",
    "BenchReport",
    "score_vendors",
    "compute_tco",
    # train (issue 6)
    "Checkpointer",
    "PreemptionWatcher",
    "resilient",
]


def test_public_names_are_pinned() -> None:
    assert sorted(gpuwise.__all__) == sorted(PUBLIC_API)
    assert isinstance(gpuwise.__version__, str) and gpuwise.__version__[0].isdigit()
    for name in PUBLIC_API:
        if name == "__version__":
            continue
        value = getattr(gpuwise, name)
        # Capitalised names are classes users construct or catch; the rest are functions to call.
        if name[0].isupper():
            assert isinstance(value, type), f"gpuwise.{name} is {value!r}, not a class"
        else:
            assert callable(value) and not isinstance(value, type), (
                f"gpuwise.{name} is not a function"
            )


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


HEAVY = {
    "torch",
    "typer",
    "rich",
    "requests",
    "urllib3",
    "httpx",
    "aiohttp",
    "prometheus_client",
    "pynvml",
    "plotly",
    "boto3",
    "botocore",
    "fsspec",
}


def test_import_gpuwise_is_light() -> None:
    loaded = _modules_after("import gpuwise")
    assert not loaded & (HEAVY | {"numpy", "scipy"})


def test_core_imports_no_torch_cli_or_http() -> None:
    core = [
        "gpuwise.hardware",
        "gpuwise.catalog",
        "gpuwise.estimate",
        "gpuwise.planner",
        "gpuwise.fleet",
    ]
    loaded = _modules_after("\n".join(f"import {m}" for m in core))
    assert not {m.split(".")[0] for m in loaded} & HEAVY
