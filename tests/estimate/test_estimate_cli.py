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
            lambda d: d["gpu_hours"] > 1e5 and d["flops_total"] > 8e22,
        ),  # Llama 2 7B: 184,320 GPU-hours
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
    assert "Tight: 83.1 GiB per GPU" in text and "79.2 GiB without" in text
    assert "Does not fit" not in text
    doc = cli(*args, "--json").json()
    assert doc["memory"]["verdict"] == "tight" and doc["memory"]["fits"] is False
