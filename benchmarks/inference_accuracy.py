"""How far gpuwise's serving estimates are from measured inference runs, through the CLI.

Data: ``src/gpuwise/estimate/data/measured_inference.csv`` (static-batch throughput and first-token
latency, each row with GPU, TP, batch, input/output lengths and precision, and its source). Each row
is written as ``gpuwise estimate --task inference ...`` arguments and parsed by the command's own
parser (``cli.estimate.estimate_inputs``). Prefill runs at the achievable matmul fraction ÷ the
transformer framework factor (fitted to the *training* rows) or reads the weights, whichever is
longer; a decode step reads weights and KV cache at the achievable bandwidth (80% of the datasheet,
an assumption). One figure is fitted to serving rows: a per-layer overhead per forward pass
(``measured.fit_layer_overhead``). LOSO: it is fitted on the other source's rows (TensorRT-LLM ↔
LMDeploy), then the held-out source is predicted; "no fit" sets it to 0.

Baseline: a naive roofline — prefill 2·N FLOPs per token at the dense datasheet peak, a decode step
reads the weights once at the datasheet bandwidth; throughput = batch × output ÷ (prefill + output ×
step). Error = predicted ÷ measured − 1.

Run: ``PYTHONPATH=src python benchmarks/inference_accuracy.py``.
"""

from __future__ import annotations

import collections
import statistics
from dataclasses import replace
from importlib import resources

from gpuwise.base.datafiles import commented_csv
from gpuwise.cli.estimate import estimate_inputs
from gpuwise.estimate import estimate_workload
from gpuwise.estimate.measured import default_efficiency, fit_layer_overhead, load_inference_runs
from gpuwise.hardware import find_gpu


def rows() -> list[dict[str, str]]:
    text = (
        resources.files("gpuwise.estimate")
        .joinpath("data/measured_inference.csv")
        .read_text("utf-8")
    )
    return list(commented_csv(text))


def argv(r: dict[str, str]) -> list[str]:
    return [
        "--model", r["model"], "--task", "inference", "--precision", r["precision"],
        "--micro-batch", r["batch"], "--prompt-len", r["input_len"], "--output-len",
        r["output_len"], "--tensor-parallel", r["tp"], "--gpu", r["gpu"], "--gpus", r["tp"],
        "--no-calibration",
    ]  # fmt: skip


def predict(r: dict[str, str], overhead_s: float) -> float:
    inputs = estimate_inputs(argv(r))
    eff = replace(default_efficiency(), layer_overhead_s=overhead_s)
    est = estimate_workload(
        inputs.workload, inputs.setup.gpu, inputs.gpus, calibration=None, suggest=False,
        efficiency=eff, **inputs.setup.kwargs(),
    )  # fmt: skip
    assert est.inference is not None
    if r["metric"] == "ttft_ms":
        return est.inference.time_to_first_token_s * 1000
    return est.samples_per_second * int(r["output_len"])


def roofline(r: dict[str, str]) -> float:
    inputs = estimate_inputs(argv(r))
    m, gpu = inputs.workload.model, find_gpu(r["gpu"])
    tp, b, p, o = int(r["tp"]), int(r["batch"]), int(r["input_len"]), int(r["output_len"])
    peak = (gpu.peak_tflops(r["precision"]) or 0.0) * 1e12
    wbytes = 1.0 if r["precision"] == "fp8" else 2.0
    prefill = 2 * m.total_params * b * p / (tp * peak)
    step = m.total_params * wbytes / tp / ((gpu.memory_bandwidth_tb_s or 0.0) * 1e12)
    if r["metric"] == "ttft_ms":
        return prefill * 1000
    return b * o / (prefill + o * step)


def main() -> None:
    data = rows()
    runs = load_inference_runs()
    assert [r.workload for r in runs] == [estimate_inputs(argv(r)).workload for r in data]
    out = []
    for r in data:
        v = float(r["value"])
        held = fit_layer_overhead(
            [x for x in runs if x.source_id != r["source_id"]], default_efficiency()
        )
        out.append((r, predict(r, held) / v - 1, predict(r, 0.0) / v - 1, roofline(r) / v - 1))
    print(
        f"INFERENCE SET: {len(out)} measured rows, {len({r['source_id'] for r in data})} source(s), "
        "through `gpuwise estimate --task inference` arguments (the CLI builds the library "
        "loader's workload for every row)\n"
    )
    print(f"  {'GPU':10s} {'model':11s} {'tp':>2s} {'prec':4s} {'batch':>5s} {'in':>5s} {'out':>5s} "
          f"{'metric':9s} {'measured':>9s} {'by GPU':>8s} {'LOSO':>8s} {'roofline':>8s}")  # fmt: skip
    for r, g, z, b in out:
        print(
            f"  {r['gpu']:10s} {r['model']:11s} {r['tp']:>2s} {r['precision']:4s} {r['batch']:>5s} "
            f"{r['input_len']:>5s} {r['output_len']:>5s} {r['metric']:9s} {float(r['value']):9,.0f} "
            f"{g:+8.1%} {z:+8.1%} {b:+8.1%}"
        )
    groups: dict[str, list[tuple[float, float, float]]] = collections.defaultdict(list)
    for r, g, z, b in out:
        keys = ("all", f"source {r['source_id']}", f"metric {r['metric']}", f"GPU {r['gpu']}")
        for key in (*keys, f"model {r['model']}"):
            groups[key].append((g, z, b))
    print(
        f"\n  {'group':22s} {'rows':>4s}  {'LOSO':>15s}  {'no fit':>13s}  "
        f"{'roofline':>9s}   median |error|"
    )
    for name, vals in groups.items():
        print(
            f"  {name:22s} {len(vals):4d}  {statistics.median(abs(g) for g, _, _ in vals):15.1%}  "
            f"{statistics.median(abs(z) for _, z, _ in vals):13.1%}  "
            f"{statistics.median(abs(b) for _, _, b in vals):9.1%}"
        )
    print(
        f"\n  per-layer overhead fitted to all rows: {default_efficiency().layer_overhead_s * 1e6:.0f} µs "
        "per layer per forward pass (the library default)"
    )


if __name__ == "__main__":
    main()
