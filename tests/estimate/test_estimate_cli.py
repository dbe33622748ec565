"""``gpuwise estimate``: the issue's "done when" commands, JSON fields, rendering and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

_FIELDS_MEMORY = ("per_gpu_gib", "capacity_gib", "fits", "breakdown")
_FIELDS_TOP = (
    "flops_total",
    "mfu",
    "mfu_basis",
    "tokens_per_second",
    "wall_hours",
    "gpu_hours",
    "suggestions",
)


def _check_fields(doc: Any) -> None:
    for key in _FIELDS_MEMORY:
        assert key in doc["memory"], key
    for key in _FIELDS_TOP:
        assert key in doc, key
    for s in doc["suggestions"]:
        assert "fix" in s and "per_gpu_gib" in s


@pytest.mark.parametrize(
    ("args", "check"),
    [
        # the four commands of issue 3's "Done when"
        (
            ("--model", "llama-2-7b", "--task", "finetune", "--gpu", "A100-80GB"),
            lambda d: not d["memory"]["fits"] and d["suggestions"],
        ),  # full FT of 7B needs ~16 B/param: no fit
        (
            ("--params", "7e9", "--tokens", "2e12", "--gpu", "A100-80GB", "--task", "pretrain"),
            lambda d: d["gpu_hours"] is None and d["flops_total"] > 8e22 and d["suggestions"],
        ),  # Llama 2 7B pretraining does not fit one GPU: no hours as if it ran, fixes instead
        (
            (
                "--params",
                "7e9",
                "--tokens",
                "2e12",
                "--gpu",
                "A100-80GB",
                "--gpus",
                "64",
                "--zero",
                "3",
            ),
            lambda d: d["memory"]["fits"] and d["gpu_hours"] > 1e5,
        ),  # on 64 GPUs with ZeRO-3 it fits: Llama 2 7B took 184,320 GPU-hours
        (
            ("--model", "llama-2-70b", "--task", "qlora", "--gpu", "A100-80GB"),
            lambda d: d["memory"]["fits"] and d["memory"]["per_gpu_gib"] < 80,
        ),  # QLoRA: 70B on one GPU
        (
            ("--model", "llama-3.1-8b", "--task", "inference", "--gpu", "L4", "--micro-batch", "4"),
            lambda d: (
                d["inference"]["latency_per_output_token_ms"] > 0
                and d["memory"]["breakdown"]["kv_cache"] > 0
            ),
        ),
    ],
)
def test_done_when_commands(cli: Any, args: tuple[str, ...], check: Any) -> None:
    r = cli("estimate", *args, "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    _check_fields(doc)
    assert check(doc)


def test_human_output_says_by_how_much_and_ranks_fixes(cli: Any) -> None:
    r = cli("estimate", "--model", "llama-2-7b", "--task", "finetune", "--gpu", "A100-80GB")
    assert r.code == 0, r.stderr
    assert "Does not fit" in r.stdout and "short by" in r.stdout
    assert "Fixes that fit" in r.stdout and "MFU basis" in r.stdout


def test_human_output_for_inference_and_multi_node(cli: Any) -> None:
    r = cli(
        "estimate",
        "--model",
        "mixtral-8x7b",
        "--task",
        "inference",
        "--gpu",
        "H100",
        "--gpus",
        "2",
        "--tensor-parallel",
        "2",
    )
    assert r.code == 0, r.stderr
    assert "latency per output token" in r.stdout
    r = cli(
        "estimate",
        "--model",
        "llama-2-70b",
        "--tokens",
        "1e11",
        "--gpu",
        "H100",
        "--gpus",
        "64",
        "--zero",
        "3",
        "--grad-ckpt",
        "full",
        "--inter-node-gbps",
        "3200",
    )
    assert r.code == 0, r.stderr
    assert "8 nodes" in r.stdout


def test_list_models(cli: Any) -> None:
    r = cli("estimate", "--list-models", "--json")
    assert r.code == 0
    names = {row["name"] for row in r.json()}
    assert {
        "gpt2",
        "bert-base",
        "t5-3b",
        "llama-2-70b",
        "llama-3.1-405b",
        "mixtral-8x7b",
        "qwen2.5-7b",
        "resnet-50",
        "vit-b-16",
    } <= names


@pytest.mark.parametrize(
    "args",
    [
        ("--model", "llama-2-7b", "--seq-len", "-5"),  # negative
        ("--model", "llama-2-7b", "--tokens", "-1e9"),  # negative
        ("--model", "llama-2-7b", "--micro-batch", "1e12"),  # absurd
        ("--params", "1e30"),  # absurd
        (
            "--params",
            "1",
        ),  # below the assumed shape's embedding: FLOPs/s and hours came out negative
        ("--params", "1M"),  # same (hidden 256: the 32k-token embedding alone has 8.2M parameters)
        ("--params", "nan"),  # not a number
        ("--model", "llama-2-7b", "--gpus", "0"),  # no GPUs
        ("--model", "lama-2-7b"),  # unknown preset (did-you-mean)
        ("--model", "llama-2-7b", "--precision", "fp8", "--gpu", "A100-80GB"),  # no fp8 on Ampere
        ("--model", "llama-2-7b", "--precision", "fp4"),  # unknown precision
        ("--model", "llama-2-7b", "--task", "train"),  # unknown task
        ("--model", "llama-2-7b", "--zero", "4"),  # no ZeRO-4
        ("--model", "llama-2-7b", "--gpu", "Z100"),  # unknown GPU
        ("--model", "gpt2", "--seq-len", "4096"),  # beyond GPT-2's learned positions
        (
            "--model",
            "llama-2-7b",
            "--tensor-parallel",
            "3",
            "--gpus",
            "3",
        ),  # TP does not divide heads
        ("--model", "llama-2-7b", "--gpus", "8", "--tensor-parallel", "16"),  # TP > GPUs
        ("--model", "llama-2-7b", "--inter-node-gbps", "-1"),  # negative bandwidth
        (),  # no model at all
        (
            "--model",
            "llama-2-7b",
            "--samples",
            "10k",
            "--tokens",
            "1e9",
        ),  # both sizes: --samples was ignored
    ],
)
def test_bad_input_exits_2_with_a_fix(cli: Any, args: tuple[str, ...]) -> None:
    r = cli("estimate", *args, "--json")
    assert r.code == 2, (r.code, r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and "To fix" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_unknown_preset_says_did_you_mean(cli: Any) -> None:
    r = cli("estimate", "--model", "lama-2-7b")
    assert "did you mean 'llama-2-7b'" in r.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{oops", "not valid JSON"),  # malformed
        ('{"name": "squad", "split": "train"}', "does not look like a transformer"),  # unrelated
        (
            '{"model_type": "llama", "hidden_size": 4000, "num_hidden_layers": 2, "num_attention_heads": 3,'
            ' "vocab_size": 10}',
            "do not divide",
        ),  # heads do not divide hidden
    ],
)
def test_bad_config_json_exits_2(cli: Any, tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    r = cli("estimate", "--model", path, "--json")
    assert r.code == 2 and message in r.stderr and str(path) in r.stderr


def test_config_json_model_runs(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "mistral",
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "vocab_size": 32000,
                "max_position_embeddings": 32768,
            }
        )
    )
    r = cli("estimate", "--model", path, "--task", "lora", "--gpu", "L40S", "--json")
    assert r.code == 0, r.stderr
    assert r.json()["params_total"] == 7_241_732_096


def test_calibration_flag_and_bad_calibration(cli: Any, tmp_path: Path) -> None:
    good = tmp_path / "cal.json"
    good.write_text(json.dumps({"version": 1, "gpus": {"A100-80GB": {"mfu": 0.3}}}))
    r = cli("estimate", "--model", "gpt2", "--calibration", good, "--json")
    assert r.code == 0 and r.json()["mfu_compute"] == pytest.approx(0.3)
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "gpus": {"A100-80GB": {"mfu": 3}}}')
    r = cli("estimate", "--model", "gpt2", "--calibration", bad, "--json")
    assert r.code == 2 and "mfu" in r.stderr
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xf6\xff\x00")
    r = cli(
        "estimate", "--model", "gpt2", "--calibration", binary, "--json"
    )  # was "check the file's permissions"
    assert r.code == 2 and "not UTF-8 text" in r.stderr and "permissions" not in r.stderr
    # both flags: the file used to be ignored without a word
    r = cli("estimate", "--model", "gpt2", "--calibration", good, "--no-calibration", "--json")
    assert r.code == 2 and "contradict" in r.stderr and r.stdout == ""


@pytest.mark.parametrize("entry", [{"mfu": 0}, {"mfu": 1.2}, {"matmul_tflops": {"bf16": 1500.0}}])
def test_implausible_default_calibration_is_refused_in_one_line(
    cli: Any, entry: dict[str, Any]
) -> None:
    """The user's own calibration.json (read without a flag) with an implausible figure: exit 2, one line, the fix."""
    from gpuwise.base.paths import config_dir

    path = config_dir() / "calibration.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "gpus": {"H100": entry}}))
    r = cli("estimate", "--model", "gpt2", "--gpu", "H100", "--json")
    assert r.code == 2 and r.stdout == ""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "To fix:" in lines[0]
    assert "calibration.json" in lines[0] and "Traceback" not in r.stderr


def test_a_configuration_over_only_by_the_fragmentation_allowance_is_tight(cli: Any) -> None:
    """torchtitan ran Llama 2 13B, FSDP on 64 A100-80GB, local batch 2, no recompute: the named
    terms fit, the assumed 5% fragmentation does not. gpuwise says "tight", not "does not fit"."""
    args = (
        "estimate",
        "--model",
        "llama-2-13b",
        "--task",
        "pretrain",
        "--gpu",
        "A100-80GB",
        "--gpus",
        "64",
        "--seq-len",
        "4096",
        "--micro-batch",
        "2",
        "--zero",
        "3",
        "--grad-ckpt",
        "none",
        "--tokens",
        "1e9",
        "--no-calibration",
    )
    r = cli(*args)
    assert r.code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "Tight: 83.6 GiB per GPU" in text and "79.7 GiB without" in text
    assert "Does not fit" not in text
    doc = cli(*args, "--json").json()
    assert doc["memory"]["verdict"] == "tight" and doc["memory"]["fits"] is False


@pytest.mark.slow
def test_every_measured_row_is_a_command_line_that_builds_the_same_workload(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The accuracy benchmark measures through `gpuwise estimate`'s own parser: each measured row's
    options, typed as flags (a config.json for models that are not presets), build exactly the
    workload the library's loader builds — no hidden input the CLI cannot set."""
    import json
    from dataclasses import replace

    from gpuwise.cli.estimate import estimate_inputs
    from gpuwise.estimate.measured import load_measured_runs, measured_model_config
    from gpuwise.estimate.options import OPTIONS

    runs = load_measured_runs()
    for run in runs:
        opts = dict(run.options)
        seq = int(opts.get("seq_len") or opts.get("prompt_len") or 2048)
        cfg = measured_model_config(run.model, seq)
        model = run.workload.model.name
        if cfg is not None:
            path = tmp_path / f"{run.model}-{seq}.json"
            path.write_text(json.dumps(cfg))
            model = str(path)
        argv = ["--model", model, "--gpu", run.gpu, "--gpus", str(run.gpus), "--no-calibration"]
        for name, value in run.options:
            if OPTIONS[name].kind == "switch":  # a bare flag (--shard-within-node)
                argv += [OPTIONS[name].flag] if value == "on" else []
            else:
                argv += [OPTIONS[name].flag, value]
        got = estimate_inputs(argv)
        wl = got.workload
        wl = replace(wl, model=replace(wl.model, name=model, source=model))
        want = replace(run.workload, model=replace(run.workload.model, name=model, source=model))
        assert wl == want, run.label
        assert got.gpus == run.gpus and got.setup.gpu == run.gpu
    assert {r.workload.virtual_pipeline for r in runs} > {1}  # NeMo's interleaved rows


@pytest.mark.slow  # every measured serving row through the CLI parser: 4-16 s
def test_measured_serving_rows_are_command_lines_and_decode_pays_bandwidth() -> None:
    """Each measured serving row is `gpuwise estimate --task inference` arguments building the
    loader's workload; a decode step reads the weights at the achievable bandwidth (not the
    datasheet), prefill at least reads them once, and the fitted per-layer overhead is >= 0."""
    from gpuwise.cli.estimate import estimate_inputs
    from gpuwise.estimate import estimate_workload
    from gpuwise.estimate.measured import (
        default_efficiency,
        fit_layer_overhead,
        load_inference_runs,
    )
    from gpuwise.estimate.options import OPTIONS
    from gpuwise.hardware import find_gpu

    runs = load_inference_runs()
    assert len(runs) >= 20 and {r.metric for r in runs} == {"out_tok_s", "ttft_ms"}
    for run in runs:
        argv = ["--gpu", run.gpu, "--gpus", str(run.gpus), "--no-calibration"]
        for name, value in run.options:
            argv += [OPTIONS[name].flag, value]
        assert estimate_inputs(argv).workload == run.workload
    c = default_efficiency().layer_overhead_s
    assert c == fit_layer_overhead(runs, default_efficiency()) and 0 < c < 1e-3
    run = next(r for r in runs if r.metric == "ttft_ms" and r.workload.prompt_len == 128)
    est = estimate_workload(run.workload, run.gpu, run.gpus, calibration=None)
    weights = run.workload.model.total_params * (1 if run.workload.precision == "fp8" else 2)
    spec = find_gpu(run.gpu)
    assert est.inference is not None
    assert est.inference.time_to_first_token_s >= weights / (spec.memory_bandwidth_tb_s * 1e12)


def test_the_usual_network_of_a_gpu_is_the_network_tables_row() -> None:
    """One network per place: the bare default follows the GPU's usual instance, with the very
    figure the planner's table gives that instance (estimate used to assume 400 Gbit/s for all)."""
    from gpuwise.estimate.throughput import TYPICAL_INSTANCE, default_inter_node
    from gpuwise.hardware import find_gpu
    from gpuwise.planner import instance_network

    for gpu, (cloud, itype, gbit) in TYPICAL_INSTANCE.items():
        assert instance_network(cloud, itype).inter_node_gbit_s == gbit, itype
        got, basis = default_inter_node(find_gpu(gpu))
        assert got == gbit and itype in basis
    assert default_inter_node(find_gpu("H100"))[0] != default_inter_node(find_gpu("A100"))[0]


def test_instance_type_sets_gpu_and_network(cli) -> None:  # type: ignore[no-untyped-def]
    base = ("estimate", "--model", "llama-3.1-8b", "--gpus", "16", "--zero", "3", "--json")
    r = cli(*base, "--instance-type", "p4d.24xlarge")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["gpu"] == "A100" and doc["gpus_per_node"] == 8  # type: ignore[index]
    assert "400 Gbit/s" in doc["interconnect"]  # type: ignore[index]
    r = cli(*base, "--gpu", "H100")
    assert "3200 Gbit/s" in r.json()["interconnect"]  # type: ignore[index]
    assert any("p5.48xlarge" in n for n in r.json()["notes"])  # type: ignore[index]
    r = cli(*base, "--instance-type", "p4d.24xlarg")
    assert r.code == 2 and "p4d.24xlarge" in r.stderr


def test_docs_list_every_option() -> None:
    from pathlib import Path

    from gpuwise.estimate.options import OPTIONS

    text = (Path(__file__).parents[2] / "docs" / "estimate.md").read_text("utf-8")
    missing = [o.flag for o in OPTIONS.values() if f"`{o.flag}" not in text]
    assert missing == []


def test_a_large_pipeline_bubble_is_named_with_the_schedule_that_shrinks_it(cli: Any) -> None:
    """Meta's Llama 3.1 405B layout (PP16, 16 micro-batches per step): without interleaving the
    bubble is 15/16 of the compute; the note offers the interleaved schedule, every value it names
    is accepted, and the estimate with it is faster. With fewer micro-batches than stages
    interleaving cannot help, and the note does not offer it."""

    def bubble(doc: dict[str, Any]) -> str:
        [note] = [n for n in doc["notes"] if n.startswith("pipeline bubble")]
        return str(note)

    base = ["--model", "llama-3.1-405b", "--gpu", "H100", "--gpus", "16384"]
    base += ["--tensor-parallel", "8", "--pipeline-parallel", "16", "--seq-len", "8192"]
    base += ["--global-batch", "2048", "--zero", "1", "--grad-ckpt", "full", "--json"]
    plain = cli("estimate", *base)
    assert plain.code == 0, plain.stderr
    note = bubble(plain.json())
    assert "(16-1)/(16·1) = 94%" in note
    assert "47% with --virtual-pipeline 2, 12% with 8 (about one layer per chunk)" in note
    steps = {}
    for v in ("2", "4", "8"):
        r = cli("estimate", *base, "--virtual-pipeline", v)
        assert r.code == 0, r.stderr
        steps[v] = r.json()["step_time_s"]
        if v == "4":
            assert "(16-1)/(16·4) = 23%" in bubble(r.json())
            assert "12% with --virtual-pipeline 8" in bubble(r.json())
    assert plain.json()["step_time_s"] > steps["2"] > steps["4"] > steps["8"]
    small = ["--model", "llama-3.1-8b", "--gpu", "H100", "--gpus", "16", "--json"]
    many = cli("estimate", *small, "--pipeline-parallel", "2", "--global-batch", "512")
    assert not [n for n in many.json()["notes"] if n.startswith("pipeline bubble")]  # 1/64
    one = cli("estimate", *small, "--pipeline-parallel", "2", "--global-batch", "8")
    note = bubble(one.json())
    assert "(2-1)/(1·1) = 100%" in note and "needs at least 2 micro-batches" in note
    assert "--virtual-pipeline" not in note
    forced = cli(
        "estimate",
        *small,
        "--pipeline-parallel",
        "2",
        "--global-batch",
        "8",
        "--virtual-pipeline",
        "4",
    )
    assert forced.json()["step_time_s"] == one.json()["step_time_s"]  # 1 micro-batch: no gain


def test_estimate_argv_is_what_the_command_estimates_without_calibration() -> None:
    from gpuwise.cli.estimate import estimate_argv
    from gpuwise.estimate import estimate_workload, workload_from_options

    argv = ["--model", "llama-2-7b", "--zero", "3", "--gpu", "H100", "--gpus", "16"]
    ours = estimate_argv([*argv, "--inter-node-gbps", "400"])
    wl = workload_from_options(model="llama-2-7b", zero=3)
    lib = estimate_workload(wl, "H100", 16, inter_node_gbit_s=400, calibration=None, suggest=False)
    assert ours.gpus == 16 and ours.tokens_per_second == pytest.approx(lib.tokens_per_second)
    assert ours.memory.per_gpu_gib == pytest.approx(lib.memory.per_gpu_gib)
    # the network flag reaches the estimate: a slower network is slower
    slow = estimate_argv([*argv, "--inter-node-gbps", "50"])
    assert slow.tokens_per_second < ours.tokens_per_second
