"""Issue 31's jobs on the bundled catalog: does the default plan pick the cheapest option, and does
it leave memory free?

For each job (the README LoRA, 8B and 70B fine-tunes, QLoRA 70B, 1.5B pretraining, 8B and 70B
inference, filters; ``tests/planner/test_jobs.py`` holds the list and asserts the goals) prints the
winner, its expected cost, the cheapest option's, the rule that chose (the plan's first line) and
the largest share of usable memory any of the top five options needs. Goals: winner within 2% of the
cheapest; no top-5 option above 92% of usable memory.

    PYTHONPATH=src python benchmarks/plan_jobs.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from tests.planner.test_jobs import JOBS, plan_json

    from gpuwise.estimate.capacity import gpu_memory
    from gpuwise.hardware import find_gpu

    print(f"{'job':15} {'winner':46} {'cost':>9} {'cheapest':>9} {'+%':>5} {'top-5 mem':>9}  rule")
    for name, args in JOBS.items():
        doc = plan_json(args)
        options = doc["options"]
        w = options[0]
        cheapest = min(o["cost_usd"] for o in options)
        top = 0.0
        for o in options[:5]:
            mem = gpu_memory(find_gpu(o["gpu"]))
            top = max(top, (o["per_gpu_memory_gib"] - mem.context_gib) / mem.usable_gib)
        label = (
            f"{w['gpu_count'] * w['nodes']}x{w['gpu']} {w['cloud']} {w['instance_type']}"
            f" x{w['nodes']} {w['billing']}"
        )
        rule = doc["ranking_note"].split(":")[0]
        print(
            f"{name:15} {label[:46]:46} {w['cost_usd']:9.2f} {cheapest:9.2f} "
            f"{(w['cost_usd'] / cheapest - 1) * 100:5.1f} {top:9.1%}  {rule}"
        )


if __name__ == "__main__":
    main()
