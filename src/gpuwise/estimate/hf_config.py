"""Model shapes from a user's files: Hugging Face ``config.json``, and the ``--model`` argument.

:func:`parse_hf_config` is the one function that reads an untrusted ``config.json``; it names the
file and the field that is wrong. :func:`config_from_dict` turns a loaded config into a
:class:`~gpuwise.estimate.model.ModelConfig` for the model families gpuwise knows (Llama-style
decoders, GPT-2/NeoX/BigCode, BERT/RoBERTa, T5, ViT, MPT, and the MoE/MLA types: Mixtral,
Qwen-MoE, Qwen3-MoE, DeepSeek V2/V3, gpt-oss). :func:`resolve_model` decides whether
``--model`` names a preset or a file, and checks it against ``--params``.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuwise.errors import DataFileError, EstimateError, InputError
from gpuwise.estimate.model import ModelConfig, get_preset, scaled_llama_like

# --------------------------------------------------------------------------------------
# Hugging Face config.json


def _get(
    cfg: dict[str, Any],
    keys: tuple[str, ...],
    where: str,
    *,
    required: bool = True,
    default: int = 0,
) -> int:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not math.isfinite(v)
                or v < 0
                or int(v) != v
            ):
                raise DataFileError(
                    f"{where}: field {k!r} must be a non-negative integer, got {v!r}",
                    hint="fix the value in the config file",
                )
            if v > 10**8:
                raise DataFileError(
                    f"{where}: field {k!r} = {v} is absurdly large",
                    hint="fix the value in the config file",
                )
            return int(v)
    if required:
        raise DataFileError(
            f"{where}: missing field {keys[0]!r}",
            hint=f"a transformer config.json names {' or '.join(repr(k) for k in keys)}",
        )
    return default


def _flag(cfg: dict[str, Any], key: str, where: str, default: bool) -> bool:
    """A JSON ``true``/``false`` field; the string ``"false"`` would be truthy, so it is refused."""
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        meant = v.strip().lower() if isinstance(v, str) else ""
        value = meant if meant in ("true", "false") else "true or false"
        raise DataFileError(
            f"{where}: field {key!r} must be true or false, got {v!r}",
            hint=f'write "{key}": {value} (a JSON boolean, without quotes)',
        )
    return v


def parse_hf_config(path: str | Path) -> ModelConfig:
    """Read a Hugging Face ``config.json`` (llama, mistral, mixtral, qwen2, gpt2, bert, t5, vit keys)."""
    p = Path(path)
    where = str(p)
    try:
        text = p.read_text("utf-8-sig")  # a BOM (Windows editors) is not an error
    except FileNotFoundError:
        raise InputError(
            f"{where}: no such file", hint="give a preset name or the path to a config.json"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFileError(
            f"{where}: cannot read ({exc})", hint="give a readable UTF-8 config.json"
        ) from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError(
            f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})",
            hint="give the config.json of a Hugging Face model",
        ) from None
    except RecursionError:  # thousands of nested brackets: no config.json looks like that
        raise DataFileError(
            f"{where}: JSON nested too deeply to read",
            hint="give the config.json of a Hugging Face model",
        ) from None
    except ValueError as exc:  # an integer past Python's int-string limit (4,300 digits)
        raise DataFileError(
            f"{where}: a number too long to read ({str(exc).split(':')[0]})",
            hint="fix the value in the config file; no model size needs that many digits",
        ) from None
    if not isinstance(cfg, dict):
        raise DataFileError(
            f"{where}: expected a JSON object", hint="give the config.json of a Hugging Face model"
        )
    return config_from_dict(cfg, where)


# config.json model_types read as Llama-style decoders (RMSNorm, rotary, gated or plain MLP, optional
# MoE with shared experts, optional multi-head latent attention); any other model_type is refused.
LLAMA_STYLE = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gpt_oss",
        "gemma",
        "gemma2",
        "phi3",
        "olmo",
        "olmo2",
        "deepseek_v2",
        "deepseek_v3",
    }
)
_OTHER_TYPES = ("gpt2", "gpt_neo", "gpt_bigcode", "bert", "roberta", "t5", "mt5", "vit", "mpt")


def config_from_dict(cfg: dict[str, Any], where: str = "config") -> ModelConfig:
    """Build a ModelConfig from a parsed HF config dict; errors name ``where`` and the field."""
    model_type = str(cfg.get("model_type", "")).lower()
    hidden_keys = ("hidden_size", "n_embd", "d_model", "dim")
    if model_type == "mpt":  # MosaicML MPT: FFN width is expansion_ratio × d_model
        cfg = {**cfg, "n_inner": int(cfg.get("expansion_ratio", 4) * cfg.get("d_model", 0) or 0)}
    if not any(k in cfg for k in hidden_keys):
        raise DataFileError(
            f"{where}: does not look like a transformer config.json (no hidden_size/n_embd/d_model)",
            hint="give the config.json of a Hugging Face transformer model",
        )
    hidden = _get(cfg, hidden_keys, where)
    heads = _get(cfg, ("num_attention_heads", "n_head", "num_heads", "n_heads"), where)
    layers = _get(cfg, ("num_hidden_layers", "n_layer", "num_layers", "n_layers"), where)
    kv = _get(
        cfg,
        ("num_key_value_heads", "num_kv_heads", "multi_query_group_num"),
        where,
        required=False,
        default=heads,
    )
    head_dim = _get(cfg, ("head_dim", "d_kv"), where, required=False)
    vocab = _get(cfg, ("vocab_size",), where, required=model_type not in ("vit",))
    inter = _get(cfg, ("intermediate_size", "n_inner", "d_ff", "ffn_dim"), where, required=False)
    maxpos = _get(
        cfg,
        ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len"),
        where,
        required=False,
        default=2048,
    )
    experts = _get(
        cfg, ("num_local_experts", "num_experts", "n_routed_experts"), where, required=False
    )
    topk = _get(
        cfg,
        ("num_experts_per_tok", "moe_top_k", "experts_per_token"),
        where,
        required=False,
        default=2 if experts else 0,
    )
    if cfg.get("moe_intermediate_size"):
        inter = _get(cfg, ("moe_intermediate_size",), where)
    if hidden == 0 or heads == 0 or layers == 0:
        raise DataFileError(
            f"{where}: hidden size, heads and layers must be > 0", hint="fix the config file"
        )
    for key in ("head_dim", "d_kv"):  # 0 means "hidden / heads" inside gpuwise; in a file, a typo
        if key in cfg and cfg[key] is not None and head_dim == 0:
            raise DataFileError(
                f"{where}: field {key!r} must be > 0, got {cfg[key]!r}",
                hint="fix the value in the config file, or remove it (then hidden / heads is used)",
            )
    if vocab == 0 and model_type != "vit":  # a text model embeds tokens from a vocabulary
        raise DataFileError(
            f"{where}: field 'vocab_size' must be > 0", hint="fix the value in the config file"
        )
    tied = _flag(
        cfg, "tie_word_embeddings", where, model_type in ("gpt2", "bert", "t5", "roberta", "opt")
    )
    common: dict[str, Any] = dict(
        name=where,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        intermediate=inter,
        vocab=vocab,
        max_positions=maxpos,
        tied_embeddings=tied,
        experts=experts,
        experts_per_token=topk,
        source=where,
    )
    spec = _family_spec(cfg, model_type, where, common, layers, inter, experts)
    try:
        return ModelConfig(**common, **spec)
    except EstimateError as exc:
        raise DataFileError(f"{where}: {exc.message}", hint=exc.hint) from None


def _family_spec(
    cfg: dict[str, Any],
    model_type: str,
    where: str,
    common: dict[str, Any],
    layers: int,
    inter: int,
    experts: int,
) -> dict[str, Any]:
    """The fields one model family sets (architecture, MLP, norms, biases); may add MoE/MLA fields
    to ``common``. Refuses a model_type gpuwise cannot read completely."""
    act = str(
        cfg.get("hidden_act")
        or cfg.get("activation_function")
        or cfg.get("feed_forward_proj")
        or ""
    )
    if model_type in ("gpt2", "gpt_neo", "gpt_bigcode"):
        spec = dict(
            arch="decoder",
            gated_mlp=False,
            bias=True,
            norm="layernorm",
            learned_positions=True,
            dropout=bool(cfg.get("resid_pdrop", 0.1)),
            flash_attention=False,
        )
    elif model_type in ("bert", "roberta"):
        spec = dict(
            arch="encoder",
            gated_mlp=False,
            bias=True,
            norm="layernorm",
            learned_positions=True,
            type_vocab=_get(cfg, ("type_vocab_size",), where, required=False, default=2),
            pooler=True,
            dropout=bool(cfg.get("hidden_dropout_prob", 0.1)),
            flash_attention=False,
        )
    elif model_type in ("t5", "mt5"):
        spec = dict(
            arch="encoder-decoder",
            decoder_layers=_get(
                cfg, ("num_decoder_layers",), where, required=False, default=layers
            ),
            gated_mlp="gated" in act,
            bias=False,
            norm="rmsnorm",
            relative_buckets=_get(cfg, ("relative_attention_num_buckets",), where, required=False),
            dropout=bool(cfg.get("dropout_rate", 0.1)),
            flash_attention=False,
        )
    elif model_type == "mpt":  # llm-foundry MPT: ALiBi or learned positions, no biases, LayerNorm
        spec = dict(
            arch="decoder",
            gated_mlp=False,
            bias=not cfg.get("no_bias", True),
            norm="layernorm",
            learned_positions=bool(cfg.get("learned_pos_emb", True)),
            dropout=bool(cfg.get("resid_pdrop", 0.0)),
            flash_attention=True,
        )
        common["tied_embeddings"] = bool(cfg.get("tie_word_embeddings", True))
    elif model_type == "vit":
        spec = dict(
            arch="vision-transformer",
            gated_mlp=False,
            bias=True,
            norm="layernorm",
            image_size=_get(cfg, ("image_size",), where),
            patch_size=_get(cfg, ("patch_size",), where),
            num_channels=_get(cfg, ("num_channels",), where, required=False, default=3),
            num_labels=len(cfg.get("id2label") or {}) or 1000,
            dropout=False,
            flash_attention=True,
        )
    else:  # Llama-style decoders whose shape gpuwise reads completely (LLAMA_STYLE)
        if model_type not in LLAMA_STYLE:
            shown = model_type or "(none)"
            raise DataFileError(
                f"{where}: model_type {shown!r} is not supported: gpuwise would have to guess its shape",
                hint=f"use --params N for a Llama-shaped estimate, or a config of a supported model_type "
                f"({', '.join(sorted(LLAMA_STYLE | set(_OTHER_TYPES)))})",
            )
        if model_type in ("deepseek_v2", "deepseek_v3"):
            common["kv_lora_rank"] = _get(cfg, ("kv_lora_rank",), where)
            common["q_lora_rank"] = (
                _get(cfg, ("q_lora_rank",), where, required=False, default=0) or 0
            )
            common["rope_head_dim"] = _get(cfg, ("qk_rope_head_dim",), where)
            common["head_dim"] = _get(cfg, ("qk_nope_head_dim",), where) + common["rope_head_dim"]
            common["v_head_dim"] = _get(cfg, ("v_head_dim",), where)
            common["kv_heads"] = common["heads"]
            if experts:
                common["shared_intermediate"] = inter * (
                    _get(cfg, ("n_shared_experts",), where, required=False, default=0) or 0
                )
                common["dense_layers"] = _get(
                    cfg, ("first_k_dense_replace",), where, required=False, default=0
                )
                common["dense_intermediate"] = _get(cfg, ("intermediate_size",), where)
        elif experts and cfg.get("shared_expert_intermediate_size"):  # qwen2_moe
            common["shared_intermediate"] = _get(cfg, ("shared_expert_intermediate_size",), where)
        spec = dict(
            arch="decoder",
            gated_mlp=("gelu_new" not in act and act != "gelu") or model_type == "gemma",
            # gpt-oss: biases on q/k/v/o and on the experts (gpt-oss model card, Sec. 2)
            bias=_flag(cfg, "mlp_bias", where, False) or model_type == "gpt_oss",
            qkv_bias=model_type.startswith("qwen2") or _flag(cfg, "attention_bias", where, False),
            norm="rmsnorm",
            dropout=False,
            flash_attention=True,
        )
    return spec


_MAX_MODEL_ARG = 4096  # PATH_MAX on Linux


def resolve_model(model: str | None, params: float | None) -> ModelConfig:
    """``--model`` (preset or config.json path) and/or ``--params`` → ModelConfig.

    With both, the config gives the shape and ``--params`` must agree with it within 25%.
    """
    if model is None:
        if params is None:
            raise InputError(
                "no model given",
                hint="give model (a preset name or a config.json path) or params, e.g. params='7B'",
            )
        shape = scaled_llama_like(params)
        embedding = shape.embedding_params()
        if params <= embedding:  # no weights left for the layers: FLOPs and times came out negative
            raise InputError(
                f"params={params:.3g} is too small for the assumed Llama-like shape, whose "
                f"{shape.vocab:,}-token embedding alone has {embedding:.3g} parameters",
                hint="give model= the model's config.json (small models need their real shape)",
            )
        return replace(shape, params=params)
    if len(model) > _MAX_MODEL_ARG:  # a path the OS refuses; no preset is near
        raise InputError(
            f"model name or path is {len(model):,} characters long",
            hint="give a preset name (`gpuwise estimate --list-models`) or the path to a config.json",
        )
    try:
        is_dir = Path(model).is_dir()
        looks_like_path = (
            model.endswith(".json")
            or ("/" in model and Path(model).exists())
            or Path(model).is_file()
        )
    except (
        OSError,
        ValueError,
    ):  # a name the OS refuses as a path (too long, NUL byte): a preset name
        is_dir, looks_like_path = False, model.endswith(".json")
    cfg = (
        parse_hf_config(Path(model) if not is_dir else Path(model) / "config.json")
        if looks_like_path or is_dir
        else get_preset(model)
    )
    if (
        params is not None
        and cfg.is_transformer
        and abs(cfg.total_params - params) > 0.25 * cfg.total_params
    ):
        raise InputError(
            f"params={params:.3g} disagrees with {cfg.name} ({cfg.total_params:.3g} parameters)",
            hint="drop params when model is given",
        )
    if params is not None and not cfg.is_transformer:
        cfg = replace(cfg, params=params)
    return cfg
