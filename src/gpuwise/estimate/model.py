"""Model shapes: presets, Hugging Face ``config.json`` files, or a bare parameter count.

A :class:`ModelConfig` holds what the estimator needs about a network (hidden size, layers,
heads, KV heads, MLP width, vocabulary, MoE experts) and derives parameter counts from it.
Parameter counts are computed, never stored, and pinned by tests against the published totals
(gpt2 124,439,808; bert-base 109,482,240; llama-2-7b 6,738,415,616, ...).

Untrusted files are read by one function at the edge, :func:`~.hf_config.parse_hf_config`
(:mod:`.hf_config`), which names the file and the field that is wrong. Memory and time live in
:mod:`.memory` and :mod:`.throughput`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from gpuwise.errors import EstimateError, InputError, did_you_mean

Arch = Literal["decoder", "encoder", "encoder-decoder", "vision-transformer", "cnn", "params-only"]
ARCHS: tuple[Arch, ...] = (
    "decoder",
    "encoder",
    "encoder-decoder",
    "vision-transformer",
    "cnn",
    "params-only",
)


@dataclass(frozen=True)
class ModelConfig:
    """The shape of one network, enough to count parameters, FLOPs and activations."""

    name: str
    """Preset name, config path, or ``"<N> params"`` for a bare count."""
    arch: Arch
    """``decoder`` (GPT/Llama), ``encoder`` (BERT), ``encoder-decoder`` (T5),
    ``vision-transformer`` (ViT), ``cnn`` (opaque: params + FLOPs only) or ``params-only``."""
    hidden: int = 0
    """Model width d_model (HF ``hidden_size`` / ``n_embd`` / ``d_model``)."""
    layers: int = 0
    """Transformer blocks (for encoder-decoder: encoder blocks)."""
    heads: int = 0
    """Attention heads."""
    kv_heads: int = 0
    """Key/value heads (grouped-query attention); equals ``heads`` for multi-head attention."""
    head_dim: int = 0
    """Per-head width; ``hidden // heads`` unless the config says otherwise (T5 ``d_kv``)."""
    intermediate: int = 0
    """MLP inner width (per expert for MoE)."""
    vocab: int = 0
    """Vocabulary size (0 for vision models)."""
    max_positions: int = 0
    """Longest sequence the model was built for (``max_position_embeddings``)."""
    decoder_layers: int = 0
    """Decoder blocks of an encoder-decoder model (each has self- and cross-attention)."""
    tied_embeddings: bool = False
    """Output projection shares the input embedding matrix (GPT-2, BERT, T5)."""
    gated_mlp: bool = True
    """SwiGLU/GeGLU MLP with three matrices (Llama) instead of two (GPT-2)."""
    bias: bool = False
    """Linear layers and norms carry biases (GPT-2, BERT)."""
    qkv_bias: bool = False
    """Only the q/k/v projections carry biases (Qwen2)."""
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    """Normalisation kind: RMSNorm has a weight, LayerNorm a weight and a bias."""
    learned_positions: bool = False
    """Learned absolute position embeddings (GPT-2, BERT) rather than RoPE/relative."""
    type_vocab: int = 0
    """BERT token-type embeddings."""
    pooler: bool = False
    """BERT pooler (a hidden x hidden dense layer)."""
    relative_buckets: int = 0
    """T5 relative-attention buckets (a buckets x heads table per stack)."""
    experts: int = 0
    """MoE experts per layer (0 = dense)."""
    experts_per_token: int = 0
    """Experts each token is routed to (top-k)."""
    shared_intermediate: int = 0
    """MoE: width of the always-active shared expert MLP (DeepSeek ``n_shared_experts`` ×
    ``moe_intermediate_size``; Qwen2-MoE ``shared_expert_intermediate_size``); 0 = none."""
    dense_layers: int = 0
    """MoE: leading blocks with a dense MLP instead of experts (DeepSeek ``first_k_dense_replace``)."""
    dense_intermediate: int = 0
    """MoE: MLP width of those dense blocks (``intermediate_size``)."""
    kv_lora_rank: int = 0
    """Multi-head latent attention (DeepSeek-V2/V3): width of the compressed KV latent; 0 = ordinary attention."""
    q_lora_rank: int = 0
    """MLA: width of the compressed query (0 = full-rank query projection)."""
    rope_head_dim: int = 0
    """MLA: per-head rotary part of the key (``qk_rope_head_dim``), cached beside the latent."""
    v_head_dim: int = 0
    """MLA: per-head value width (0 = ``head_dim``)."""
    dropout: bool = False
    """Dropout layers are active in training (their masks are kept for backward)."""
    flash_attention: bool = True
    """Attention never materialises the score matrix (FlashAttention / SDPA); on for modern models."""
    image_size: int = 0
    """Vision models: input side in pixels."""
    patch_size: int = 0
    """ViT patch side in pixels."""
    num_channels: int = 3
    """Vision models: input channels."""
    num_labels: int = 0
    """Vision classifiers: output classes."""
    params: float = 0.0
    """Total parameters for ``cnn``/``params-only`` models (computed from the shape otherwise)."""
    forward_gmacs_per_sample: float = 0.0
    """``cnn`` only: forward multiply-adds per sample in billions (published figure)."""
    activation_mib_per_sample: float = 0.0
    """``cnn`` only: activation memory per training sample in MiB when known (0 = unknown)."""
    source: str = ""
    """Where the shape comes from (HF repository, file path)."""

    def __post_init__(self) -> None:
        if self.arch in ("cnn", "params-only"):
            if not (self.params > 0 and math.isfinite(self.params)):
                raise EstimateError(
                    f"model {self.name!r}: parameter count must be > 0",
                    hint="give params, e.g. 7e9 or '7B'",
                )
            return
        for field_name in ("hidden", "layers", "heads"):
            if getattr(self, field_name) <= 0:
                raise EstimateError(
                    f"model {self.name!r}: {field_name} must be > 0, got "
                    f"{getattr(self, field_name)}",
                    hint="check the model config",
                )
        if self.head_dim == 0 and self.hidden % self.heads:
            raise EstimateError(
                f"model {self.name!r}: {self.heads} attention heads do not divide hidden size {self.hidden}",
                hint="the hidden size must be a multiple of the head count (or give head_dim)",
            )
        if self.kv_heads and (self.kv_heads > self.heads or self.heads % self.kv_heads):
            raise EstimateError(
                f"model {self.name!r}: {self.kv_heads} KV heads do not divide "
                f"{self.heads} attention heads",
                hint="num_key_value_heads must divide num_attention_heads",
            )
        if self.experts and not 0 < self.experts_per_token <= self.experts:
            raise EstimateError(
                f"model {self.name!r}: experts_per_token must be in 1..{self.experts}",
                hint="set num_experts_per_tok",
            )

    # -- derived shape -------------------------------------------------------------------
    @property
    def is_transformer(self) -> bool:
        return self.arch in ("decoder", "encoder", "encoder-decoder", "vision-transformer")

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def n_kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def ffn(self) -> int:
        return self.intermediate or 4 * self.hidden

    @property
    def total_layers(self) -> int:
        """All blocks (encoder + decoder)."""
        return self.layers + self.decoder_layers

    @property
    def image_tokens(self) -> int:
        """ViT sequence: patches + the [CLS] token."""
        return (self.image_size // self.patch_size) ** 2 + 1 if self.patch_size else 0

    @property
    def has_lm_head(self) -> bool:
        return self.arch in ("decoder", "encoder-decoder", "encoder") and self.vocab > 0

    # -- parameter counts ---------------------------------------------------------------
    def attention_params(self) -> int:
        """One attention block: q, o (heads x d_head) and k, v (kv_heads x d_head) projections.

        Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1): query down/up
        projections (or one full-rank one), the KV down-projection to the latent plus the rotary key,
        the latent's up-projection to per-head keys and values, the output projection and the two
        latent norms."""
        if self.kv_lora_rank:
            h, a, qk, v = self.hidden, self.heads, self.d_head, self.v_head_dim or self.d_head
            q = (
                h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * a * qk
                if self.q_lora_rank
                else h * a * qk
            )
            kv = h * (self.kv_lora_rank + self.rope_head_dim) + self.kv_lora_rank
            kv += self.kv_lora_rank * a * (qk - self.rope_head_dim + v)
            return q + kv + a * v * h
        h, q, kv = self.hidden, self.heads * self.d_head, self.n_kv * self.d_head
        n = h * q + 2 * h * kv + q * h
        if self.bias:
            n += q + 2 * kv + h
        elif self.qkv_bias:
            n += q + 2 * kv
        return n

    def mlp_params(self) -> int:
        """One expert's MLP (gated: three matrices; plain: two)."""
        h, f = self.hidden, self.ffn
        n = (3 if self.gated_mlp else 2) * h * f
        if self.bias:
            n += f + h
        return n

    def norm_params(self) -> int:
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    def shared_mlp_params(self) -> int:
        """The MoE shared expert MLP of one block (0 when there is none)."""
        return (3 if self.gated_mlp else 2) * self.hidden * self.shared_intermediate

    def layer_params(self) -> int:
        """One decoder/encoder block: attention, MLP (all experts), router, shared expert, two norms."""
        mlp = self.mlp_params() * max(1, self.experts) + (
            self.hidden * self.experts if self.experts else 0
        )
        return self.attention_params() + mlp + self.shared_mlp_params() + 2 * self.norm_params()

    def dense_layer_params(self) -> int:
        """One of the leading dense blocks of an MoE model (DeepSeek ``first_k_dense_replace``)."""
        mlp = (3 if self.gated_mlp else 2) * self.hidden * (self.dense_intermediate or self.ffn)
        return self.attention_params() + mlp + 2 * self.norm_params()

    def cross_layer_params(self) -> int:
        """One encoder-decoder decoder block: self-attention, cross-attention, MLP, three norms."""
        return 2 * self.attention_params() + self.mlp_params() + 3 * self.norm_params()

    def embedding_params(self) -> int:
        """Input embeddings (token, position, type, patch), not counting an untied output head."""
        if self.arch == "vision-transformer":
            patch = self.num_channels * self.patch_size**2 * self.hidden + self.hidden
            return patch + self.image_tokens * self.hidden + self.hidden  # + position table + [CLS]
        n = self.vocab * self.hidden
        if self.learned_positions:
            n += self.max_positions * self.hidden
        n += self.type_vocab * self.hidden
        if self.arch == "encoder":
            n += self.norm_params()  # BERT's embedding LayerNorm
        return n

    def head_params(self) -> int:
        """Output head: untied LM head, BERT pooler, ViT classifier."""
        if self.arch == "vision-transformer":
            return self.hidden * self.num_labels + self.num_labels
        n = 0 if self.tied_embeddings else self.vocab * self.hidden
        if self.pooler:
            n += self.hidden * self.hidden + self.hidden
        return n

    @functools.cached_property
    def total_params(self) -> float:
        """All parameters (all experts)."""
        if self.params or not self.is_transformer:  # a count given by the user wins over the shape
            return self.params
        n = self.embedding_params() + self.layers * self.layer_params() + self.head_params()
        n += self.dense_layers * (self.dense_layer_params() - self.layer_params())
        n += self.decoder_layers * self.cross_layer_params()
        n += self.relative_buckets * self.heads * (2 if self.decoder_layers else 1)
        final_norms = 2 if self.decoder_layers else (0 if self.arch == "encoder" else 1)
        n += final_norms * self.norm_params()
        return float(n)

    @functools.cached_property
    def active_params(self) -> float:
        """Parameters each token passes through (MoE: only top-k experts)."""
        if not self.experts:
            return self.total_params
        idle = (
            (self.experts - self.experts_per_token)
            * self.mlp_params()
            * (self.layers - self.dense_layers)
        )
        return self.total_params - idle

    @functools.cached_property
    def matmul_params(self) -> float:
        """Active parameters that take part in matrix multiplies: the ``N`` of 6·N·D.

        Input embeddings are a lookup (no FLOPs), so they are left out; a tied output head
        still multiplies, so it is added back (Kaplan et al. 2020, Sec. 2.1 count non-embedding
        parameters; the output projection is a matmul either way).
        """
        if not self.is_transformer:
            return self.params
        n = self.active_params - self.embedding_params()
        if self.arch == "vision-transformer":
            n += (
                self.num_channels * self.patch_size**2 * self.hidden
            )  # the patch projection is a matmul
        elif self.tied_embeddings and self.has_lm_head:
            n += self.vocab * self.hidden
        return float(n)

    @functools.cached_property
    def linear_params(self) -> float:
        """Parameters in the blocks' linear layers (what QLoRA quantises to 4 bit)."""
        if not self.is_transformer:
            return self.params
        per = self.layer_params() - 2 * self.norm_params()
        n = self.layers * per + self.dense_layers * (
            self.dense_layer_params() - self.layer_params()
        )
        if self.decoder_layers:
            n += self.decoder_layers * (self.cross_layer_params() - 3 * self.norm_params())
        return float(n)

    def linear_shapes(self, targets: str) -> list[tuple[int, int, int]]:
        """(in, out, count) of every linear layer LoRA ``targets`` adapts across the model.

        ``qv``: query and value (PEFT's default for Llama and T5); ``attn``: q, k, v, o;
        ``all-linear``: also the MLP (QLoRA paper Sec. 4 adapts all linear layers).
        """
        if not self.is_transformer:
            raise EstimateError(
                f"LoRA needs a transformer model; {self.name!r} is {self.arch}",
                hint="use task='finetune' for this model",
            )
        h, q, kv, f = self.hidden, self.heads * self.d_head, self.n_kv * self.d_head, self.ffn
        n_attn = self.layers + 2 * self.decoder_layers
        shapes = [(h, q, n_attn), (h, kv, n_attn)]  # q, v
        if targets in ("attn", "all-linear"):
            shapes += [(h, kv, n_attn), (q, h, n_attn)]  # k, o
        if targets == "all-linear":
            mats = 3 if self.gated_mlp else 2
            n_mlp = (self.layers + self.decoder_layers) * max(1, self.experts)
            shapes += [(h, f, n_mlp * (mats - 1)), (f, h, n_mlp)]
        return shapes

    def lora_params(self, rank: int, targets: str) -> float:
        """Adapter parameters: r·(in + out) per adapted matrix (Hu et al. 2021, Sec. 4.1)."""
        return float(sum(rank * (i + o) * c for i, o, c in self.linear_shapes(targets)))


# --------------------------------------------------------------------------------------
# presets
_PRESET_KEYS = {f for f in ModelConfig.__dataclass_fields__} - {"name"}


@functools.lru_cache(maxsize=1)
def _presets() -> dict[str, ModelConfig]:
    import yaml

    text = resources.files("gpuwise.estimate").joinpath("data/presets.yaml").read_text("utf-8")
    raw = yaml.safe_load(text)
    out: dict[str, ModelConfig] = {}
    for name, fields in raw.items():
        unknown = set(fields) - _PRESET_KEYS
        if unknown:  # a bug in the bundled file, not a user error
            raise ValueError(f"presets.yaml: {name}: unknown keys {sorted(unknown)}")
        out[name] = ModelConfig(name=name, **fields)
    return out


def preset_names() -> list[str]:
    """Names accepted by ``--model``."""
    return list(_presets())


_ALIASES = {
    "llama2-7b": "llama-2-7b",
    "llama2-13b": "llama-2-13b",
    "llama2-70b": "llama-2-70b",
    "llama-3-8b": "llama-3.1-8b",
    "llama-3-70b": "llama-3.1-70b",
    "llama3.1-8b": "llama-3.1-8b",
    "llama3.1-70b": "llama-3.1-70b",
    "llama3.1-405b": "llama-3.1-405b",
    "mistral-7b-v0.1": "mistral-7b",
    "mixtral-8x7b-v0.1": "mixtral-8x7b",
    "gpt2-small": "gpt2",
    "bert-base-uncased": "bert-base",
    "bert-large-uncased": "bert-large",
    "vit-base-patch16-224": "vit-b-16",
    "resnet50": "resnet-50",
    "qwen2.5-7b-instruct": "qwen2.5-7b",
}


def get_preset(name: str) -> ModelConfig:
    """A bundled preset by name (case-insensitive, HF org prefix allowed), with did-you-mean."""
    presets = _presets()
    key = name.strip().lower().rsplit("/", 1)[-1]
    key = _ALIASES.get(key, key)
    if key in presets:
        return presets[key]
    shown = name if len(name) <= 80 else name[:60] + f"… ({len(name):,} characters)"
    raise InputError(
        f"unknown model preset {shown!r}",
        hint="give a preset (`gpuwise estimate --list-models`), a path to a config.json, or params",
        suggestions=did_you_mean(key, list(presets) + list(_ALIASES)),
    )


def _short(n: float) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.3g}"


def scaled_llama_like(params: float) -> ModelConfig:
    """A Llama-shaped decoder of about ``params`` parameters, for activation and KV estimates.

    Used when only ``--params`` is given. Shape rule (an assumption, said in the estimate's
    notes): hidden = 128·round(sqrt(params / (12·L)) / 128), with L chosen so hidden/L ≈ 128,
    the ratio of Llama 2 7B (4096/32); MLP width 8/3·hidden as in LLaMA (Touvron et al. 2023,
    Sec. 2.2); 32k vocabulary; MHA.
    """
    # params ≈ 12·L·h² (Kaplan et al. 2020, Sec. 2.1) with h = 128·L  ⇒  L = (params / 12 / 128²)^(1/3)
    layers = max(2, round((params / 12 / 128**2) ** (1 / 3)))
    hidden = max(128, 128 * round(math.sqrt(params / (12 * layers)) / 128))
    heads = max(1, hidden // 128)
    return ModelConfig(
        name=f"{_short(params)} params",
        arch="decoder",
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=heads,
        intermediate=int(8 * hidden / 3),
        vocab=32000,
        max_positions=4096,
        source="--params (Llama-like shape assumed)",
    )
