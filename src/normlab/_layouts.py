"""Where each Hugging Face model family keeps its parts: one :class:`ModelLayout` per family.

The table is data: probes (:mod:`normlab.probes.hooks`), folding
(:mod:`normlab.surgery.fold_gains`) and checkpoint I/O (:mod:`normlab.models.hf_auto`) all
read it, so adding a family is one record here (or one :func:`register_layout` call from
user code) plus a test row. It lives at the base of the package because probes and surgery,
which must not import each other, both read it.

Norm *roles* name what a norm does in its block, because that decides what can be done to
it:

- ``block_norms``: the norms that read the residual stream before a sublayer (pre-LN,
  GPT-2 / Llama) or that normalize the stream after the residual add (post-LN, BERT);
- ``post_norms``: norms of a sublayer's *output* before it is added to the stream (Gemma-2/3,
  OLMo-2): their output is summed into the stream, no linear layer reads it, so their gain
  cannot be folded;
- ``qk_norms``: norms of the queries and keys (Qwen3, OLMo-2, Gemma-3): their output feeds
  the rotary embedding and the attention scores, not a linear layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "LAYOUTS",
    "ROLE_REASONS",
    "ModelLayout",
    "base_model_type",
    "layout_for",
    "norm_roles",
    "register_layout",
]


@dataclass(frozen=True)
class ModelLayout:
    """Where one family keeps its parts; paths are relative to the backbone root.

    Attributes:
        roots: backbone prefixes tried in order, e.g. ``("transformer.", "")``.
        blocks: the block list, relative to the root.
        attention: inside a block, the module whose output holds the probabilities.
        block_norms: inside a block, the norms of the residual stream (see the module doc).
        position: "pre" or "post" (the block norms' position).
        final: the final norm before the head, relative to the root (``None``: none).
        embed: the embedding norm, relative to the root (BERT).
        head: the output head, relative to the model; ``None`` when the probed output is a
            hidden state.
        head_norm: a norm inside the head, relative to the model (reported as "final").
        post_norms: inside a block, norms of a sublayer's output before the residual add.
        qk_norms: inside a block, norms of queries and keys.
        position_flag: a boolean config attribute that chooses the position: true means
            "pre", false "post" (OPT's ``do_layer_norm_before``).
        probs_index: index of the attention probabilities in the attention module's output.
        logit_scale: config attribute the logits are multiplied by (Cohere).
        logit_softcap: config attribute ``c``: logits become ``c * tanh(logits / c)``.
        call: the submodule the probes run ("" the model; "encoder" for T5, whose probes
            read the encoder stack).
        causal: attention is causal.
        count: config attribute the model slices its block list by, set while a probe
            runs a subset of blocks.
        architectures: the model classes saved and reloaded through the Auto classes.
    """

    roots: tuple[str, ...]
    blocks: str
    attention: str
    block_norms: tuple[str, ...]
    position: str
    final: str | None
    embed: str | None = None
    head: str | None = "lm_head"
    head_norm: str | None = None
    post_norms: tuple[str, ...] = ()
    qk_norms: tuple[str, ...] = ()
    position_flag: str | None = None
    probs_index: int = 1
    logit_scale: str | None = None
    logit_softcap: str | None = None
    call: str = ""
    causal: bool = True
    count: str | None = "num_hidden_layers"
    architectures: tuple[str, ...] = ()

    def norm_position(self, config: Any) -> str:
        """The block norms' position for a model with ``config``."""
        if self.position_flag is None:
            return self.position
        return "pre" if getattr(config, self.position_flag, True) else "post"


def _llama(arch: str, **kw: Any) -> ModelLayout:
    """A Llama-style decoder: ``model.layers``, pre-norms before attention and MLP."""
    norms = kw.pop("block_norms", ("input_layernorm", "post_attention_layernorm"))
    return ModelLayout(
        ("model.", ""), "layers", "self_attn", norms, "pre", "norm",
        architectures=(arch,), **kw,
    )  # fmt: skip


_QK = ("self_attn.q_norm", "self_attn.k_norm")
_GEMMA_POST = ("post_attention_layernorm", "post_feedforward_layernorm")
_GEMMA_PRE = ("input_layernorm", "pre_feedforward_layernorm")

#: The families normlab knows, by Hugging Face ``model_type``.
LAYOUTS: dict[str, ModelLayout] = {
    "gpt2": ModelLayout(
        ("transformer.", ""), "h", "attn", ("ln_1", "ln_2"), "pre", "ln_f",
        architectures=("GPT2LMHeadModel",),
    ),
    "bert": ModelLayout(
        ("bert.", ""), "encoder.layer", "attention.self",
        ("attention.output.LayerNorm", "output.LayerNorm"), "post", None,
        embed="embeddings.LayerNorm", head="cls", head_norm="cls.predictions.transform.LayerNorm",
        causal=False, count=None, architectures=("BertForMaskedLM", "BertModel"),
    ),
    "llama": _llama("LlamaForCausalLM"),
    "mistral": _llama("MistralForCausalLM"),
    "qwen2": _llama("Qwen2ForCausalLM"),
    "qwen3": _llama("Qwen3ForCausalLM", qk_norms=_QK),
    "qwen3_moe": _llama("Qwen3MoeForCausalLM", qk_norms=_QK),
    "mixtral": _llama("MixtralForCausalLM"),
    "gemma": _llama("GemmaForCausalLM"),
    "gemma2": _llama(
        "Gemma2ForCausalLM", block_norms=_GEMMA_PRE, post_norms=_GEMMA_POST,
        logit_softcap="final_logit_softcapping",
    ),
    "gemma3_text": _llama(
        "Gemma3ForCausalLM", block_norms=_GEMMA_PRE, post_norms=_GEMMA_POST, qk_norms=_QK,
        logit_softcap="final_logit_softcapping",
    ),
    "phi3": _llama("Phi3ForCausalLM"),
    # OLMo-2 has no pre-norms: its two block norms act on the sublayer outputs.
    "olmo2": _llama("Olmo2ForCausalLM", block_norms=(), post_norms=_GEMMA_POST, qk_norms=_QK),
    "stablelm": _llama("StableLmForCausalLM", qk_norms=_QK),
    "cohere": _llama(
        "CohereForCausalLM", block_norms=("input_layernorm",), qk_norms=_QK,
        logit_scale="logit_scale",
    ),
    "gpt_neox": ModelLayout(
        ("gpt_neox.", ""), "layers", "attention", ("input_layernorm", "post_attention_layernorm"),
        "pre", "final_layer_norm", architectures=("GPTNeoXForCausalLM",),
    ),
    "opt": ModelLayout(
        ("model.decoder.", "decoder.", ""), "layers", "self_attn",
        ("self_attn_layer_norm", "final_layer_norm"), "pre", "final_layer_norm",
        position_flag="do_layer_norm_before", architectures=("OPTForCausalLM",),
    ),
    # Falcon: "input_layernorm" (parallel, or sequential with "post_attention_layernorm"),
    # or "ln_attn" and "ln_mlp" (new decoder architecture); absent ones are skipped.
    "falcon": ModelLayout(
        ("transformer.", ""), "h", "self_attention",
        ("input_layernorm", "post_attention_layernorm", "ln_attn", "ln_mlp"), "pre", "ln_f",
        architectures=("FalconForCausalLM",),
    ),
    "t5": ModelLayout(
        ("encoder.",), "block", "layer.0.SelfAttention",
        ("layer.0.layer_norm", "layer.1.layer_norm"), "pre", "final_layer_norm", head=None,
        probs_index=2, call="encoder", causal=False, count=None,
        architectures=("T5ForConditionalGeneration",),
    ),
}  # fmt: skip

#: Why a norm of each role keeps its gain when folding.
ROLE_REASONS = {
    "post_norm": "post-sublayer norm: its output is added to the residual stream, not read by "
    "a linear layer, so its gain has nowhere to go",
    "qk_norm": "QK-norm: its output feeds the rotary embedding and the attention scores, not "
    "a linear layer; it must stay",
}


def register_layout(model_type: str, layout: ModelLayout, *, replace: bool = False) -> None:
    """Teach normlab a Hugging Face family: probes, folding and checkpoints read ``layout``.

    Args:
        model_type: the family's ``config.model_type``.
        layout: where its parts are.
        replace: allow replacing a known family's layout.

    Raises:
        ValueError: when ``model_type`` is known and ``replace`` is false.
    """
    if model_type in LAYOUTS and not replace:
        raise ValueError(f"{model_type!r} already has a layout; pass replace=True to change it.")
    if not isinstance(layout, ModelLayout):
        raise TypeError(f"layout must be a ModelLayout, got {type(layout).__name__}.")
    LAYOUTS[model_type] = layout


def base_model_type(model: Any) -> str | None:
    """The Hugging Face ``model_type`` of ``model``'s architecture; for a model normlab
    transformed (``normlab_gpt2``, ...) the base type recorded in its config."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    record = getattr(config, "normlab", None)
    if isinstance(record, dict) and record.get("base_model_type"):
        return str(record["base_model_type"])
    if isinstance(kind, str) and kind.startswith("normlab_"):
        return kind.removeprefix("normlab_")
    return kind


def layout_for(model: Any) -> ModelLayout | None:
    """The layout of ``model``'s family, or ``None`` for a family normlab does not know."""
    kind = base_model_type(model)
    return LAYOUTS.get(kind) if isinstance(kind, str) else None


def norm_roles(model: Any) -> dict[str, str]:
    """Qualified norm name -> role ("post_norm" or "qk_norm") for ``model``'s family."""
    layout = layout_for(model)
    if layout is None:
        return {}
    out = {}
    for name, _ in model.named_modules():
        for root in layout.roots:
            prefix = root + layout.blocks + "."
            if not name.startswith(prefix):
                continue
            index, _, inner = name[len(prefix) :].partition(".")
            roles = (("post_norm", layout.post_norms), ("qk_norm", layout.qk_norms))
            for role, names in roles if index.isdigit() else ():
                if inner in names:
                    out[name] = role
            break
    return out
