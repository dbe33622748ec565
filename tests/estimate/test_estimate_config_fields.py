"""Hostile values in a config.json, through ``gpuwise estimate``: exit 2 naming the file and field.

Both used to slip through: a 5,000-digit integer (past Python's int-string limit) was an internal
error (exit 1), and ``"tie_word_embeddings": "false"`` (a string, so truthy) was read as tied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwise.errors import DataFileError
from gpuwise.estimate import parse_hf_config

# Llama-2-7B's shape (huggingface.co/meta-llama/Llama-2-7b-hf config.json), the fields we vary
_LLAMA = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}


def _write(tmp_path: Path, text: str, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        # 5,000 digits: json.loads raises ValueError past sys.get_int_max_str_digits() (4,300)
        ('{"hidden_size": ' + "9" * 5000 + "}", "a number too long to read"),
        # a string where JSON has a boolean: "false" is truthy in Python
        (
            json.dumps({**_LLAMA, "tie_word_embeddings": "false"}),
            "field 'tie_word_embeddings' must be true or false, got 'false'",
        ),
        (json.dumps({**_LLAMA, "tie_word_embeddings": 0}), "got 0"),  # 0/1 are not booleans either
        (json.dumps({**_LLAMA, "attention_bias": "yes"}), "field 'attention_bias'"),
        (json.dumps({**_LLAMA, "mlp_bias": "True"}), "field 'mlp_bias'"),
    ],
)
def test_estimate_refuses_the_value_with_exit_2(
    cli: Any, tmp_path: Path, text: str, needle: str
) -> None:
    path = _write(tmp_path, text)
    r = cli("estimate", "--model", path, "--gpu", "H100", "--json")
    assert r.code == 2, r.stderr
    assert str(path) in r.stderr and needle in r.stderr
    assert r.stderr.count("\n") == 1 and "To fix:" in r.stderr


def test_the_hint_gives_the_boolean_the_string_meant(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps({**_LLAMA, "tie_word_embeddings": "false"}))
    with pytest.raises(DataFileError) as err:
        parse_hf_config(path)
    assert err.value.hint == 'write "tie_word_embeddings": false (a JSON boolean, without quotes)'


@pytest.mark.parametrize("tied", [True, False])
def test_real_booleans_still_read(tmp_path: Path, tied: bool) -> None:
    path = _write(tmp_path, json.dumps({**_LLAMA, "tie_word_embeddings": tied}))
    default = parse_hf_config(_write(tmp_path, json.dumps(_LLAMA), "default.json"))  # llama: untied
    m = parse_hf_config(path)
    assert m.tied_embeddings is tied
    # an untied model has a separate output matrix: vocab × hidden more parameters
    assert m.total_params == default.total_params - (32000 * 4096 if tied else 0)
