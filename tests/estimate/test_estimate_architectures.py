"""config.json architectures: MoE with shared experts, multi-head latent attention, unknown model_types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwise.errors import DataFileError
from gpuwise.estimate.hf_config import config_from_dict
from gpuwise.estimate.memory import kv_cache_bytes
from gpuwise.estimate.workload import Workload

# deepseek-ai/DeepSeek-V2-Lite config.json (model card: 15.7B parameters in total)
DEEPSEEK_V2_LITE: dict[str, Any] = dict(
    model_type="deepseek_v2",
    hidden_size=2048,
    num_attention_heads=16,
    num_key_value_heads=16,
    num_hidden_layers=27,
    vocab_size=102400,
    intermediate_size=10944,
    moe_intermediate_size=1408,
    n_routed_experts=64,
    n_shared_experts=2,
    num_experts_per_tok=6,
    first_k_dense_replace=1,
    kv_lora_rank=512,
    q_lora_rank=None,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    max_position_embeddings=163840,
    tie_word_embeddings=False,
    hidden_act="silu",
)
# Qwen/Qwen1.5-MoE-A2.7B config.json (model card: 14.3B in total, 2.7B activated)
QWEN_MOE: dict[str, Any] = dict(
    model_type="qwen2_moe",
    hidden_size=2048,
    num_attention_heads=16,
    num_key_value_heads=16,
    num_hidden_layers=24,
    vocab_size=151936,
    intermediate_size=5632,
    moe_intermediate_size=1408,
    num_experts=60,
    num_experts_per_tok=4,
    shared_expert_intermediate_size=5632,
    tie_word_embeddings=False,
    hidden_act="silu",
)


def test_moe_with_shared_experts_and_dense_layers_matches_the_published_totals() -> None:
    ds = config_from_dict(DEEPSEEK_V2_LITE, "ds")
    assert ds.total_params == pytest.approx(15.7e9, rel=0.01)
    qw = config_from_dict(QWEN_MOE, "qw")
    assert qw.total_params == pytest.approx(14.3e9, rel=0.01)
    assert qw.active_params == pytest.approx(2.7e9, rel=0.02)
    no_shared = config_from_dict({**QWEN_MOE, "shared_expert_intermediate_size": 0}, "qw")
    assert qw.active_params - no_shared.active_params == pytest.approx(24 * 3 * 2048 * 5632)


def test_latent_attention_caches_the_latent_not_per_head_keys_and_values() -> None:
    ds = config_from_dict(DEEPSEEK_V2_LITE, "ds")
    wl = Workload(model=ds, task="inference", precision="bf16", prompt_len=1000, output_len=24)
    # (kv_lora_rank + rope dim) values per token and layer, 2 bytes: 27 × 576 × 2 × 1024 tokens
    assert kv_cache_bytes(wl) == 27 * (512 + 64) * 2 * 1024
    as_mha = (
        2 * 27 * 16 * (128 + 64) * 2 * 1024
    )  # what reading it as Llama-shaped attention would cache
    assert as_mha / kv_cache_bytes(wl) > 10


@pytest.mark.parametrize("model_type", ["mamba", "rwkv", "falcon", ""])
def test_unknown_model_type_is_refused_not_read_as_llama(model_type: str) -> None:
    cfg = dict(
        model_type=model_type,
        hidden_size=1024,
        num_attention_heads=16,
        num_hidden_layers=24,
        vocab_size=50000,
    )
    with pytest.raises(DataFileError, match="not supported") as info:
        config_from_dict(cfg, "config.json")
    assert "--params" in info.value.hint


def test_cli_names_the_model_type_and_exits_2(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            dict(
                model_type="jamba",
                hidden_size=4096,
                num_attention_heads=32,
                num_hidden_layers=32,
                vocab_size=65536,
            )
        )
    )
    r = cli("estimate", "--model", str(path), "--json")
    assert r.code == 2 and r.stdout == ""
    assert "'jamba'" in r.stderr and "To fix:" in r.stderr and "Traceback" not in r.stderr
