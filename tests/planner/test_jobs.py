"""The issue-31 jobs on the bundled catalog: the default winner is the cheapest option meeting the
constraints (or within 2 % of it), and neither it nor the next four use more than 92 % of their
GPU's usable memory."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from gpuwise.estimate.capacity import gpu_memory
from gpuwise.hardware import find_gpu

JOBS = {
    # the README job
    "readme-lora-8b": "--model llama-3.1-8b --task lora --tokens 2B --deadline 24h",
    "finetune-8b": "--model llama-3.1-8b --task finetune --tokens 1B --deadline 48h",
    "finetune-70b": "--model llama-3.1-70b --task finetune --tokens 500M --deadline 72h",
    "qlora-70b": "--model llama-3.1-70b --task qlora --tokens 500M --deadline 48h",
    "pretrain-1.5b": "--model gpt2-xl --task pretrain --tokens 30B --deadline 72h",
    "infer-8b": "--model llama-3.1-8b --task inference --requests 1M --deadline 24h",
    "infer-70b": "--model llama-3.1-70b --task inference --requests 1M --deadline 48h",
    # filters: one cloud, on-demand, two GPU models
    "filters": "--model llama-3.1-8b --task lora --tokens 2B --deadline 24h --cloud aws "
    "--billing on-demand --gpu H100,A100",
}


def plan_json(args: str) -> dict:  # type: ignore[type-arg]
    from gpuwise.cli.main import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["plan", *args.split(), "--json", "--limit", "0"])
    assert code == 0
    return json.loads(buf.getvalue())  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.parametrize("job", sorted(JOBS))
def test_the_default_winner_is_the_cheapest_with_room_in_memory(job: str) -> None:
    doc = plan_json(JOBS[job])
    options = doc["options"]
    cheapest = min(o["cost_usd"] for o in options)
    top = options[0]
    assert top["cost_usd"] <= cheapest * 1.02 + 1e-9, doc["ranking_note"]
    assert doc["ranking_note"].startswith("Chosen by lowest expected cost")
    for o in options[:5]:
        mem = gpu_memory(find_gpu(o["gpu"]))
        used = (o["per_gpu_memory_gib"] - mem.context_gib) / mem.usable_gib
        assert used <= 0.92 + 1e-9, (o["instance_type"], used)
