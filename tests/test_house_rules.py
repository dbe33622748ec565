"""House rules that are written down are also checked (STYLE.md rule 22: a rule with no test gets
broken): the Python versions the package claims, "only `cli/` prints or exits", and the file
paths the docs name. The size rules are in ``test_size.py``, the layers in ``test_architecture.py``,
the fast-test timer in ``conftest.py``.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "gpuwise"


# --- the Python versions -------------------------------------------------------------------------


def test_the_python_claim_is_the_one_tested() -> None:
    # pyproject said >=3.10 and CONTRIBUTING "3.10+" while CI ran 3.11 only and 3.10 failed
    # (tomllib, the pinned typer). The claim, the tools' targets and the docs say one version, and
    # the suite runs on it (CI runs the oldest supported interpreter).
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    assert project["project"]["requires-python"] == ">=3.11"
    assert project["tool"]["mypy"]["python_version"] == "3.11"
    assert project["tool"]["ruff"]["target-version"] == "py311"
    assert "Python 3.11 or newer" in (ROOT / "CONTRIBUTING.md").read_text("utf-8")
    assert "Python 3.11 or newer" in (ROOT / "README.md").read_text("utf-8")
    assert "3.10+" not in (ROOT / "CONTRIBUTING.md").read_text("utf-8")
    assert sys.version_info >= (3, 11)


def test_mypy_ignores_missing_imports_only_for_named_packages() -> None:
    # a global ignore_missing_imports hid a miss; the untyped third-party packages are named
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["mypy"]
    assert "ignore_missing_imports" not in mypy
    for override in mypy["overrides"]:
        assert all(not m.startswith("gpuwise") for m in override["module"])


# --- only cli/ prints or exits -------------------------------------------------------------------

# Calls that print to the terminal or end the process. A library returns values and raises
# gpuwise.errors; the CLI (and a program's own `main`) decides what is printed and the exit code.
_FORBIDDEN_CALLS = {"print", "exit", "quit", "sys.exit", "os._exit", "os.abort"}

# (module under src/gpuwise, what it does) → why it may. Keyed by name, not line, so edits
# elsewhere in the module do not churn this table. Remove an entry when its reason goes.
ALLOWED: dict[tuple[str, str], str] = {
    ("bench/proof/runner.py", "print"): "the GPU proof is its own program (`python -m "
    "gpuwise.bench.proof`) run on the rented machine; main() and its step log are its CLI",
    ("bench/proof/worker.py", "print"): "a worker process: one JSON line per result on stdout "
    "is its protocol with the runner",
    ("bench/proof/worker.py", "sys.exit"): "the worker's `__main__` exit code",
    ("bench/proof/worker.py", "raise SystemExit"): "the worker's usage error, as its exit code",
    ("train/_torchrun.py", "print"): "the torchrun wrapper process (`python -m "
    "gpuwise.train._torchrun`) reports how its workers ended, as torchrun does",
    ("train/_torchrun.py", "sys.exit"): "the torchrun wrapper's `__main__` exit code",
    ("train/_writer.py", "os._exit"): "the forked checkpoint-writer child must end without "
    "running the parent's atexit handlers or flushing its buffers twice",
    ("train/chaos.py", "os._exit"): "the forked chaos child simulates a crash: no cleanup on "
    "purpose",
    ("train/fake_metadata.py", "print"): "`python -m gpuwise.train.fake_metadata` is a small "
    "server program; its main() prints the URL to use",
    ("train/_worker.py", "sys.exit"): "the worker bootstrap is each rank's `__main__` under "
    "`gpuwise run`: a gpuwise usage error becomes exit 2 there (issue 35)",
    ("train/_worker.py", "os._exit"): "the worker bootstrap dies at once when its launcher died "
    "before PR_SET_PDEATHSIG was set (no orphan may train on)",
    # resilient(exit_on_preemption=True | "at_exit") is the caller's documented request to end the
    # process with 75 after a preemption; nothing is registered at import (issue 35)
    ("train/loop.py", "sys.exit"): "exit_on_preemption=True: the caller asked for exit 75",
    ("train/loop.py", "os._exit"): "exit_on_preemption='at_exit', registered at the preemption",
    ("train/loop.py", "atexit"): "exit_on_preemption='at_exit', registered at the preemption",
    ("train/_torch.py", "atexit"): "settle_gloo_at_exit: a sharded checkpointer, once made, "
    "lets gloo's threads finish before finalization (a torch abort otherwise); nothing at import",
}


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def process_calls(source: str) -> set[str]:
    """What ``source`` does that prints or ends the process: the forbidden calls, ``raise
    SystemExit``, and any use of ``atexit`` (importing it is the intent to register)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in _FORBIDDEN_CALLS:
                found.add(name)
        elif isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if _dotted(exc) == "SystemExit":
                found.add("raise SystemExit")
        elif isinstance(node, ast.Import) and any(a.name == "atexit" for a in node.names):
            found.add("atexit")
        elif isinstance(node, ast.ImportFrom) and node.module in ("atexit", "sys", "os"):
            names = {a.name for a in node.names}
            if node.module == "atexit" or names & {"exit", "_exit", "abort"}:
                found.add("atexit" if node.module == "atexit" else f"from {node.module} import")
    return found


def test_only_the_cli_prints_or_exits() -> None:
    broken = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("cli/"):
            continue
        for what in sorted(process_calls(path.read_text("utf-8"))):
            if (rel, what) not in ALLOWED:
                broken.append(f"{rel}: {what}")
    assert not broken, (
        "only cli/ prints or ends the process; return a value or raise a gpuwise.errors error "
        f"instead (or add a reason to ALLOWED in {Path(__file__).name}): {broken}"
    )


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("print('x')", {"print"}),
        ("import sys\nsys.exit(2)", {"sys.exit"}),
        ("import os\nos._exit(1)", {"os._exit"}),
        ("import atexit\natexit.register(f)", {"atexit"}),
        ("from atexit import register", {"atexit"}),
        ("from sys import exit", {"from sys import"}),
        ("raise SystemExit(3)", {"raise SystemExit"}),
        ("raise SystemExit", {"raise SystemExit"}),
        ("log.info('x'); sys.stdout.flush(); os.kill(pid, 9)", set()),  # not exits
    ],
)
def test_the_print_and_exit_check_sees_every_form(source: str, found: set[str]) -> None:
    assert process_calls(source) == found


# --- paths the docs name -------------------------------------------------------------------------

DOCS = sorted(
    [
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / n for n in ("README.md", "ARCHITECTURE.md", "CONTRIBUTING.md")),
    ]
)
_EXTENSIONS = (
    ".py",
    ".md",
    ".csv",
    ".gz",
    ".yaml",
    ".yml",
    ".json",
    ".toml",
    ".txt",
    ".j2",
    ".html",
    ".sh",
    "Dockerfile",
)
# Where a short path in the docs is read from: the repository, the package (``base/nvml.py``),
# a package's own folder (``data/gpus.csv`` under hardware/), the Kubernetes deploy folder.
_BASES = [
    ROOT,
    ROOT / "src",
    PACKAGE,
    ROOT / "docs",
    ROOT / "deploy" / "kubernetes",
    *(p for p in PACKAGE.iterdir() if p.is_dir()),
]
# Paths in other projects' repositories, cited with their project in the sentence.
ELSEWHERE = {
    "doc/PERFORMANCE.md": "nccl-tests",
    "compute/accelerator/README.md": "stas00/ml-engineering",
    "docs/en/benchmark/a100_fp16.md": "LMDeploy",
    "scripts/train/benchmarking/sweep.sh": "MosaicML llm-foundry",
    "docs/reference_throughput.md": "VectorLM",
    "benchmarks/llama3_h100_202412_torchtitan.md": "torchtitan",
    ".gpuwise-dist/": "made by `plan --export` in the user's workdir",
    "gpuwise-runs/": "made by training beside its checkpoints (run records, issue 30)",
}


def _named_paths(text: str) -> set[str]:
    """Backquoted tokens that are repository paths: a folder part and a file extension (or a
    trailing slash); placeholders (``<cloud>``, ``WORKDIR/``, ``…``) and URLs are not paths."""
    out = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        token = token.rstrip(".,:;)")
        if "/" not in token or re.search(r"[<>{}*…$=~]|://|^[-/]|^[A-Z]+/", token):
            continue
        if token.endswith(_EXTENSIONS) or token.endswith("/"):
            out.add(token)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_path_the_docs_name_exists(doc: Path) -> None:
    missing = sorted(
        p
        for p in _named_paths(doc.read_text("utf-8"))
        if p not in ELSEWHERE and not any((base / p).exists() for base in [doc.parent, *_BASES])
    )
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


def test_the_path_check_reads_paths_and_skips_placeholders() -> None:
    text = (
        "`base/nvml_fake.py`, `data/gpus.csv`, `<cloud>/vms.csv`, `WORKDIR/x.whl`, `--gpu`, `a.b`"
    )
    assert _named_paths(text) == {"base/nvml_fake.py", "data/gpus.csv"}


@pytest.mark.parametrize(
    ("doc", "stale", "now"),
    [
        # the NVML fake moved to the base layer; the size rules live in their own test file
        ("CONTRIBUTING.md", "Teach the fake (`monitor/fake.py`)", "base/nvml_fake.py"),
        ("ARCHITECTURE.md", "monitor.fake.FakeNvml", "base.nvml_fake"),
        ("ARCHITECTURE.md", "over 150 (`tests/test_architecture.py`)", "tests/test_size.py"),
    ],
)
def test_docs_name_where_things_live_now(doc: str, stale: str, now: str) -> None:
    text = (ROOT / doc).read_text("utf-8")
    assert stale not in text and now in text


# --- the torch the train extra asks for ----------------------------------------------------------


def test_the_train_extra_keeps_a_gpu_images_torch() -> None:
    # `gpuwise[train]` pinned torch==2.13.0: installing it (or an export's wheel) into a GPU image
    # replaced the image's torch. It asks for a range; the test set pins one version inside it.
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    torch = next(
        Requirement(r)
        for r in project["optional-dependencies"]["train"]
        if Requirement(r).name == "torch"
    )
    assert not any(spec.operator in ("==", "===") for spec in torch.specifier)
    assert not torch.specifier.contains("2.6.0") and torch.specifier.contains("2.7.0")
    pinned = re.search(r"^torch==(\S+)$", (ROOT / "constraints/test.txt").read_text(), re.M)
    assert pinned is not None and torch.specifier.contains(pinned.group(1))


# --- import circles ------------------------------------------------------------------------------


def import_circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through imports (strongly connected
    components of more than one module, Tarjan): a pair that imports each other, or a longer ring."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(imports.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return found


def test_no_import_circle_between_modules() -> None:
    # Modules that reach each other through imports, at any depth of a function (grimp reads
    # function-local and TYPE_CHECKING imports too, so a deferred import does not hide a circle).
    # catalog cache↔sources, doctor nvml/nvsmi↔probe and cli estimate↔main were broken with a
    # small types module (doctor/facts.py) or by moving one function where both sides need it;
    # estimate estimator↔measured/suggest by handing the estimator its factors and fix search as
    # parameters (estimate/efficiency.py holds the factor type, estimate/api.py fills in the
    # defaults); planner/wheel.py and train/writers.py find the package folder from their own
    # file instead of importing the `gpuwise` facade that re-exports them.
    import grimp

    graph = grimp.build_graph("gpuwise", include_external_packages=False)
    imports = {
        # a module importing itself (a `__main__` that re-imports its own name) is no circle
        m: graph.find_modules_directly_imported_by(m) - {m}
        for m in graph.modules
    }
    assert import_circles(imports) == []


@pytest.mark.parametrize(
    ("imports", "circles"),
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),  # a ring of three
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ],
)
def test_the_circle_check_sees_rings_of_any_length(
    imports: dict[str, set[str]], circles: list[list[str]]
) -> None:
    assert import_circles(imports) == circles


# --- one helper for each small job ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),  # older nvidia-ml-py: bytes
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"),  # newer: str
        (b"Vendor \xff GPU", "Vendor \ufffd GPU"),  # not UTF-8: replaced, never an error
    ],
)
def test_one_nvml_text_decoder(raw: object, text: str) -> None:
    from gpuwise.base.nvml import nvml_text

    assert nvml_text(raw) == text


@pytest.mark.parametrize(
    ("name", "canonical"),
    [("NVIDIA H100 80GB HBM3", "H100"), ("Tesla T4", "T4"), ("Some Future GPU", None)],
)
def test_one_gpu_name_canonicalizer(name: str, canonical: str | None) -> None:
    from gpuwise.hardware import canonical_gpu_name
    from gpuwise.monitor.pricing import canonical_gpu

    assert canonical_gpu_name(name) == canonical == canonical_gpu(name)


# --- metric names the report queries are the ones the exporter serves ---------------------------


def test_report_queries_only_metrics_the_exporter_serves() -> None:
    # monitor/prometheus.py types the metric names into its PromQL; a renamed metric must fail here,
    # not as an empty report against a real Prometheus
    from prometheus_client import CollectorRegistry, generate_latest

    from gpuwise.monitor import FakeGpuReader
    from gpuwise.monitor.exporter import GpuCollector
    from gpuwise.monitor.pricing import PriceBook

    served: set[str] = set()
    for scenario in ("thermal", "mig", "xid"):
        collector = GpuCollector(PriceBook(price_usd_per_hour=2.5, offers=()))
        collector.update(FakeGpuReader.from_scenario(scenario).read())
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        text = generate_latest(registry).decode()
        served |= set(re.findall(r"^# TYPE (\w+) ", text, re.M))
        served |= {f"{name}_total" for name in re.findall(r"^# TYPE (\w+) counter", text, re.M)}
    queried = set(re.findall(r"gpuwise_\w+", (PACKAGE / "monitor" / "prometheus.py").read_text()))
    assert queried and queried <= served, sorted(queried - served)
