"""Model shapes: preset parameter counts against published totals, HF config.json reading, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.errors import DataFileError, EstimateError, InputError
from gpuwise.estimate.hf_config import parse_hf_config, resolve_model
from gpuwise.estimate.model import ModelConfig, get_preset, preset_names


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("gpt2", 124_439_808),  # HF model card / `sum(p.numel())` of GPT2LMHeadModel (tied head)
        ("gpt2-medium", 354_823_168),  # ditto
        ("gpt2-large", 774_030_080),  # ditto
        ("gpt2-xl", 1_557_611_200),  # ditto
        ("bert-base", 109_482_240),  # BertModel incl. pooler (bert-base-uncased)
        ("bert-large", 335_141_888),  # BertModel incl. pooler (bert-large-uncased)
        ("t5-3b", 2_851_598_336),  # T5ForConditionalGeneration (shared embeddings, relative biases)
        ("llama-2-7b", 6_738_415_616),  # meta-llama/Llama-2-7b-hf safetensors total
        ("llama-2-13b", 13_015_864_320),  # ditto 13b
        ("llama-2-70b", 68_976_648_192),  # ditto 70b (GQA 8 KV heads)
        ("llama-3.1-8b", 8_030_261_248),  # meta-llama/Llama-3.1-8B (128k vocab, untied)
        ("llama-3.1-70b", 70_553_706_496),  # meta-llama/Llama-3.1-70B
        ("llama-3.1-405b", 405_853_388_800),  # meta-llama/Llama-3.1-405B
        ("mistral-7b", 7_241_732_096),  # mistralai/Mistral-7B-v0.1
        ("mixtral-8x7b", 46_702_792_704),  # mistralai/Mixtral-8x7B-v0.1 (all 8 experts)
        ("qwen2.5-7b", 7_615_616_512),  # Qwen/Qwen2.5-7B (q/k/v biases, untied)
        ("vit-b-16", 86_567_656),  # google/vit-base-patch16-224 ViTForImageClassification
        ("resnet-50", 25_557_032),  # torchvision resnet50 model card
    ],
)
def test_preset_param_counts_match_published_totals(name: str, params: int) -> None:
    assert get_preset(name).total_params == params


def test_mixtral_active_params_are_two_of_eight_experts() -> None:
    m = get_preset("mixtral-8x7b")
    # 12.88B active (Mistral AI: "uses only 12.9B parameters per token")
    assert m.active_params == pytest.approx(12.88e9, rel=0.01)


def test_every_preset_names_its_source() -> None:
    for name in preset_names():
        assert get_preset(name).source, name


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Llama-2-7B", "llama-2-7b"),  # case-insensitive
        ("meta-llama/Llama-2-7b", "llama-2-7b"),  # HF org prefix dropped
        ("bert-base-uncased", "bert-base"),  # HF repo name alias
    ],
)
def test_preset_lookup_is_forgiving(query: str, expected: str) -> None:
    assert get_preset(query).name == expected


def test_unknown_preset_suggests_close_names() -> None:
    with pytest.raises(InputError) as info:
        get_preset("lama-2-7b")
    assert "llama-2-7b" in info.value.suggestions


# Real key names of Hugging Face config.json files (trimmed to the fields gpuwise reads).
_LLAMA2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}
_MIXTRAL = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
}
_QWEN25 = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}
_GPT2 = {
    "model_type": "gpt2",
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_positions": 1024,
    "n_ctx": 1024,
    "vocab_size": 50257,
    "n_inner": None,
    "activation_function": "gelu_new",
}
_BERT = {
    "model_type": "bert",
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
}
_T5_3B = {
    "model_type": "t5",
    "d_model": 1024,
    "d_kv": 128,
    "d_ff": 16384,
    "num_heads": 32,
    "num_layers": 24,
    "vocab_size": 32128,
    "relative_attention_num_buckets": 32,
    "feed_forward_proj": "relu",
}


@pytest.mark.parametrize(
    ("cfg", "preset"),
    [
        (_LLAMA2_7B, "llama-2-7b"),  # llama keys
        (_MIXTRAL, "mixtral-8x7b"),  # MoE keys num_local_experts / num_experts_per_tok
        (_QWEN25, "qwen2.5-7b"),  # qwen2: q/k/v biases
        (_GPT2, "gpt2"),  # GPT-2 keys n_embd / n_layer / n_head, tied
        (_BERT, "bert-base"),  # BERT: token types, pooler
        (_T5_3B, "t5-3b"),  # T5: d_model / d_kv / d_ff, decoder layers default to num_layers
    ],
)
def test_hf_config_gives_the_presets_param_count(
    tmp_path: Path, cfg: dict[str, object], preset: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = parse_hf_config(path)
    assert m.total_params == get_preset(preset).total_params
    assert resolve_model(str(path), None).total_params == m.total_params
    assert (
        resolve_model(str(tmp_path), None).total_params == m.total_params
    )  # a model folder works too


def test_a_config_json_saved_with_a_bom_reads_like_one_without(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_LLAMA2_7B), encoding="utf-8-sig")  # Windows editors add one
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    assert parse_hf_config(path).total_params == get_preset("llama-2-7b").total_params


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),  # malformed
        ("[1, 2]", "expected a JSON object"),  # JSON but not an object
        (
            '{"name": "my dataset", "rows": 10}',
            "does not look like a transformer",
        ),  # unrelated file
        (
            '{"hidden_size": 4096, "num_hidden_layers": 32}',
            "missing field 'num_attention_heads'",
        ),  # incomplete
        (
            '{"hidden_size": -4096, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 1}',
            "non-negative integer",
        ),  # negative
        (
            '{"hidden_size": "big", "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 1}',
            "non-negative integer",
        ),  # wrong type
        (
            '{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 30,'
            ' "vocab_size": 1}',
            "do not divide hidden size",
        ),  # heads do not divide hidden
        (
            '{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,'
            ' "num_key_value_heads": 5, "vocab_size": 1}',
            "KV heads",
        ),  # kv heads do not divide heads
        (
            '{"hidden_size": 1e12, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 1}',
            "absurdly large",
        ),  # absurd
    ],
)
def test_bad_config_files_name_the_problem(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(DataFileError) as info:
        parse_hf_config(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_heads_must_divide_hidden_size() -> None:
    with pytest.raises(EstimateError, match="do not divide hidden size"):
        ModelConfig(name="x", arch="decoder", hidden=1000, layers=2, heads=3)


def test_params_alone_gives_a_llama_like_shape_with_that_count() -> None:
    m = resolve_model(None, 7e9)
    assert m.total_params == 7e9
    assert m.arch == "decoder" and 3500 < m.hidden < 5000  # Llama 2 7B is 4096 wide


def test_params_that_contradict_the_model_are_refused() -> None:
    with pytest.raises(InputError, match="disagrees"):
        resolve_model("llama-2-7b", 70e9)


@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        # r·(in + out) per adapted matrix, 32 layers of Llama 2 7B (h = 4096, MHA, ffn 11008), r = 8
        ("qv", 32 * 8 * (2 * (4096 + 4096))),  # q and v: 4.19M (PEFT's default for Llama)
        ("attn", 32 * 8 * (4 * (4096 + 4096))),  # q, k, v, o
        ("all-linear", 32 * 8 * (4 * 8192 + 3 * (4096 + 11008))),  # + gate, up, down
    ],
)
def test_lora_adapter_params(targets: str, expected: int) -> None:
    assert get_preset("llama-2-7b").lora_params(8, targets) == expected


@pytest.mark.parametrize(
    "params",
    [
        3e7,  # about the smallest the Llama-like shape can hold (its embedding is ~25M)
        1e8,  # a small model
        7e9,  # the usual
    ],
)
def test_params_only_shapes_give_positive_flops(params: float) -> None:
    from gpuwise.estimate.hf_config import resolve_model

    cfg = resolve_model(None, params)
    assert cfg.total_params == params
    assert 0 < cfg.matmul_params < params


@pytest.mark.parametrize(
    ("content", "error", "message"),
    [
        # thousands of nested brackets raised RecursionError: an internal error, exit 1
        ("[" * 100_000 + "]" * 100_000, DataFileError, "nested too deeply"),
        ('{"a":' * 100_000 + "1" + "}" * 100_000, DataFileError, "nested too deeply"),
        # a text model with no vocabulary was estimated as if it had no embeddings
        (
            json.dumps(
                {
                    "model_type": "llama",
                    "hidden_size": 4096,
                    "num_attention_heads": 32,
                    "num_hidden_layers": 32,
                    "intermediate_size": 11008,
                    "vocab_size": 0,
                }
            ),
            DataFileError,
            "'vocab_size' must be > 0",
        ),
    ],
)
def test_hostile_config_files_are_refused(
    tmp_path: Path, content: str, error: type[Exception], message: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(error, match=message):
        resolve_model(str(path), None)


@pytest.mark.parametrize("name", ["x" * 100_000, "x" * 4_000, "a\0b"])
def test_model_names_the_os_refuses_as_paths_are_input_errors(name: str) -> None:
    # 100,000 characters or a 4,000-character name: "OSError: File name too long" (exit 1)
    with pytest.raises(InputError) as info:
        resolve_model(name, None)
    assert len(info.value.one_line()) < 400
