"""Run every step of the GPU proof within its time limit and write the dated report.

The step list, each step's time cap (full run / ``--quick``) and the run's overall budget live
here. The caps add up to more than the budget on purpose: a step that finishes early leaves its
time to the later ones, and each step is cut to what the budget still holds (keeping a floor for
every step after it), so the run ends within the budget and every step gets to run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpuwise.bench.proof import report, scrape, steps
from gpuwise.bench.proof.detect import NvmlFacts, read_nvml
from gpuwise.bench.proof.report import ProofRun, StepResult
from gpuwise.bench.proof.steps import Context, StepTimeout

StepFn = Callable[[Context], StepResult]


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    run: StepFn
    cap_s: float
    """Time cap of a full run."""
    quick_cap_s: float
    """Time cap with ``--quick``."""


STEPS: tuple[Step, ...] = (
    Step("doctor", steps.doctor_step, 60, 30),
    Step("bench", steps.bench_step, 240, 70),
    Step("exporter", scrape.exporter_step, 70, 35),
    Step("memory-throughput", steps.gpt_step, 150, 60),
    Step("checkpoint", steps.checkpoint_step, 120, 40),
    Step("pytest-gpu", steps.pytest_step, 120, 40),
)
BUDGET_S = 570.0
"""A full run ends within 9.5 minutes (the goal: 10 on one H100)."""
QUICK_BUDGET_S = 225.0
"""``--quick`` ends within 3.75 minutes (the goal: 4)."""
FLOOR_S = 15.0
"""Time kept for each step still to come."""


def run_steps(
    ctx: Context,
    plan: Sequence[Step],
    budget_s: float,
    quick: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[StepResult, ...]:
    """Run each step with its deadline; an exception or a timeout becomes that step's result and
    the next step runs regardless."""
    end = clock() + budget_s
    results = []
    for i, step in enumerate(plan):
        start = clock()
        left_for_rest = FLOOR_S * (len(plan) - i - 1)
        cap = step.quick_cap_s if quick else step.cap_s
        limit = min(
            cap, max(end - start - left_for_rest, 5.0)
        )  # past the budget a step still gets 5 s
        try:
            result = step.run(dataclasses.replace(ctx, deadline=start + limit))
        except StepTimeout as exc:
            result = StepResult(step.name, "timeout", 0.0, reason=f"{exc} ({limit:.0f} s)")
        except (
            Exception
        ) as exc:  # every step runs even if an earlier one breaks: the report says why
            first = str(exc).splitlines()[0] if str(exc) else ""
            result = StepResult(
                step.name, "fail", 0.0, reason=f"{type(exc).__name__}: {first}"[:300]
            )
        results.append(dataclasses.replace(result, seconds=clock() - start))
        print(
            f"gpu_proof: {step.name}: {result.status} in {clock() - start:.0f} s"
            + (f" — {result.reason}" if result.reason else ""),
            file=sys.stderr,
            flush=True,
        )
    return tuple(results)


def git_commit(repo: Path) -> str | None:
    """Short commit of the checkout, ``+dirty`` when it has uncommitted changes."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        head = subprocess.run(
            [git, "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        dirty = subprocess.run(
            [git, "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def canonical_gpu(name: str | None, override: str | None) -> str | None:
    """gpuwise's name for the GPU (``--gpu`` wins); None when gpuwise does not know it."""
    from gpuwise.hardware import canonical_gpu_name, find_gpu

    if override:  # the user's own --gpu: an unknown name is their typo, an error with did-you-mean
        return find_gpu(override).name
    return canonical_gpu_name(name) if name else None


def torch_facts(ctx: Context) -> dict[str, Any]:
    child = steps.run_child(steps.worker_cmd("facts"), 90, env=ctx.env)
    found = steps.json_lines(child.stdout)
    return found[0] if found else {"torch": None, "torch_cuda": None, "error": child.last_error()}


def meta(
    facts: NvmlFacts, torch: dict[str, Any], gpu: str | None, commit: str | None, quick: bool
) -> dict[str, Any]:
    from gpuwise.base.version import __version__

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": facts.gpu_name,
        "gpu_model": gpu,
        "gpu_count": len(facts.gpus),
        "gpus": list(facts.gpus),
        "driver": facts.driver,
        "cuda_driver": facts.cuda_driver,
        "nvml": facts.nvml,
        "torch": torch.get("torch"),
        "torch_cuda": torch.get("torch_cuda"),
        "compute_capability": torch.get("compute_capability"),
        "gpuwise_version": __version__,
        "gpuwise_commit": commit,
        "python": sys.version.split()[0],
        "quick": quick,
    }


def write_report(run: ProofRun, out: Path) -> tuple[Path, Path]:
    stamp = str(run.meta.get("date") or "")[:19].replace(":", "").replace("-", "") or "undated"
    md, js = out / f"gpu_proof_{stamp}Z.md", out / f"gpu_proof_{stamp}Z.json"
    md.write_text(report.render_markdown(run))
    js.write_text(report.dumps(run))
    return md, js


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu_proof.py",
        description="Run every GPU-dependent check of gpuwise and write a dated report "
        "(markdown + JSON). Needs an NVIDIA GPU; exits 2 at once without one.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("gpu-proof"),
        help="folder for the report (default: ./gpu-proof)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer groups and configurations, smaller state: within 4 minutes",
    )
    parser.add_argument(
        "--gpu",
        default=None,
        help="gpuwise GPU model (see `gpuwise gpus`) when the device name is not recognised",
    )
    parser.add_argument(
        "--only", default="", help="comma-separated steps: " + ", ".join(s.name for s in STEPS)
    )
    parser.add_argument(
        "--scratch-dir",
        type=Path,
        default=None,
        help="where the storage and checkpoint steps write (default: OUT/scratch; removed afterwards)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, repo: Path | None = None) -> int:
    started = time.monotonic()
    args = parse_args(argv)
    facts = read_nvml()  # NVML only: no torch import before we know there is a GPU
    if isinstance(facts, str):
        print(
            f"error: gpu_proof needs an NVIDIA GPU: {facts} — To fix: run it on a machine with an NVIDIA GPU "
            "and driver (where `nvidia-smi` lists one)",
            file=sys.stderr,
        )
        return 2
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(wanted) - {s.name for s in STEPS})
    if unknown:
        print(
            f"error: unknown step {', '.join(unknown)} — To fix: choose from {', '.join(s.name for s in STEPS)}",
            file=sys.stderr,
        )
        return 2
    try:
        gpu = canonical_gpu(facts.gpu_name, args.gpu)
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    repo = repo or Path(__file__).resolve().parents[4]
    out = args.out.resolve()
    scratch = (args.scratch_dir or out / "scratch").resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    src = repo / "src"  # children import this checkout, the one whose commit the report names
    if (src / "gpuwise").is_dir():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH", "")) if p)
    ctx = Context(out=out, scratch=scratch, repo=repo, quick=args.quick, gpu=gpu, env=env)
    plan = [s for s in STEPS if not wanted or s.name in wanted]
    print(
        f"gpu_proof: {facts.gpu_name} × {len(facts.gpus)}, driver {facts.driver}; {len(plan)} steps, "
        f"at most {(QUICK_BUDGET_S if args.quick else BUDGET_S) / 60:.1f} min",
        file=sys.stderr,
        flush=True,
    )
    try:
        torch = torch_facts(ctx)
        budget = (QUICK_BUDGET_S if args.quick else BUDGET_S) - (time.monotonic() - started) - 5
        results = run_steps(ctx, plan, budget, args.quick)
    finally:
        if args.scratch_dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    run = ProofRun(meta(facts, torch, gpu, git_commit(repo), args.quick), results)
    md, js = write_report(run, out)
    print(f"gpu_proof: report {md}, data {js}", file=sys.stderr)
    return 3 if run.failed else 0
