"""How far apart two options' estimates can be by the estimator's error alone.

The error of the *ratio* of two time estimates, measured on held-out pairs of the same workload on
two GPU setups (``benchmarks/plan_pair_error.py`` writes ``data/pair_error.csv``): the shared part
of the estimator's error cancels on one GPU model and hardly at all across models. The ranking
(:mod:`~gpuwise.planner.rank`) and the explanation (:mod:`~gpuwise.planner.explain`) both read it.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def pair_widths() -> dict[str, float]:
    """kind (``same-gpu``, ``other-gpu``) → half-width (log) of the p10–p90 range of the ratio of
    two time estimates, from ``data/pair_error.csv`` (``benchmarks/plan_pair_error.py``)."""
    from importlib import resources

    from gpuwise.base.datafiles import commented_csv

    text = resources.files("gpuwise.planner").joinpath("data/pair_error.csv").read_text("utf-8")
    return {r["kind"]: float(r["log_width"]) for r in commented_csv(text)}


def pair_width(gpu_a: str, gpus_a: int, gpu_b: str, gpus_b: int) -> float:
    """Half-width (log) of the p10–p90 range of the cost ratio of two options: 0 on the same GPUs
    (one estimate, the price alone differs), else the held-out error between two estimates."""
    if gpu_a == gpu_b and gpus_a == gpus_b:
        return 0.0
    return pair_widths()["same-gpu" if gpu_a == gpu_b else "other-gpu"]
