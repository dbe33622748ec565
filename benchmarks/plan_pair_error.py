"""How well does gpuwise's estimator tell two ways to run the same job apart?

``plan`` compares options with each other, not with a stopwatch: what matters is the error of the
*ratio* of two estimates. Part of the estimator's error is shared by both (the same model, the
same framework, the same stack), and cancels in the ratio; the rest does not. This script measures
the ratio's error on held-out data:

- every measured row of ``measured_throughput.csv`` gets its leave-one-source-out log residual
  (``benchmarks/estimate_accuracy.py``'s ``throughput_set``: the estimator fitted without the
  row's source);
- two rows are a *pair* when one source measured the same model, task and sequence length on two
  different GPU setups (what two plan options are);
- the pair's ratio error is ``|r_a - r_b|``; its 80th percentile is the half-width of the
  p10–p90 range of a ratio of two estimates (the same rule as ``estimate_residuals.csv``).

Printed per kind of pair (the same GPU model on other GPU counts; two GPU models), with the
single-row width beside it. ``--write`` writes ``src/gpuwise/planner/data/pair_error.csv``, which
``plan`` reads to say when two options cannot be told apart.

    PYTHONPATH=src python benchmarks/plan_pair_error.py [--write]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from estimate_accuracy import _q, throughput_set

OUT = Path(__file__).resolve().parents[1] / "src/gpuwise/planner/data/pair_error.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    args = parser.parse_args()
    rows, _ = throughput_set()
    groups: dict[tuple[object, ...], list[tuple[str, int, float]]] = collections.defaultdict(list)
    for run, residual, _ in rows:
        wl = run.workload
        groups[(run.source_id, wl.model.name, wl.task, wl.seq_len)].append(
            (run.gpu, run.gpus, residual)
        )
    kinds: dict[str, list[float]] = {"same-gpu": [], "other-gpu": []}
    for members in groups.values():
        for a, b in itertools.combinations(members, 2):
            if a[:2] == b[:2]:
                continue  # the same setup twice (another option of the stack): not two options
            kinds["same-gpu" if a[0] == b[0] else "other-gpu"].append(abs(a[2] - b[2]))
    single = [abs(r) for _, r, _ in rows]
    print(f"{'kind':<10} {'pairs':>6} {'p80 |log error|':>16} {'±':>6}")
    w1 = _q(single, 0.8)
    print(f"{'one row':<10} {len(single):>6} {w1:>16.4f} {math.exp(w1) - 1:>6.0%}")
    for kind, errs in kinds.items():
        w = _q(errs, 0.8)
        print(f"{kind:<10} {len(errs):>6} {w:>16.4f} {math.exp(w) - 1:>6.0%}")
    if args.write:
        lines = [
            "# Error of the ratio of two gpuwise time estimates, written by",
            "# `python benchmarks/plan_pair_error.py --write` (do not edit by hand). Pairs: two rows of",
            "# measured_throughput.csv from one source, same model, task and sequence length, two GPU",
            "# setups; each row's leave-one-source-out log residual r; w = 80th percentile of |r_a - r_b|",
            "# (the half-width of a p10-p90 range of the ratio, as estimate_residuals.csv does for one",
            "# estimate). same-gpu: one GPU model on two GPU counts; other-gpu: two GPU models.",
            "kind,pairs,log_width",
        ]
        lines += [f"{k},{len(v)},{_q(v, 0.8):.4f}" for k, v in kinds.items()]
        OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
