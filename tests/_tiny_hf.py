"""Tiny Hugging Face models built from configs (no downloads), one per supported family.

Each builder returns an eval-mode model with randomised norm affines (init is 1/0, which
would make folding and probing trivial) and a few hundred parameters per layer.
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB = 61
FAMILIES = ("gpt2", "gpt_neox", "stablelm", "llama", "bert")

#: Llama-style sizes shared by most decoder families below.
_LLAMA = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)
_HEADS = dict(_LLAMA, head_dim=8)
_ENCODER = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
)

#: One row per Hugging Face family of issue 38: ``(config class, model class, config
#: kwargs)``. Adding a family is one row here and one layout in ``normlab._layouts``.
ROWS: dict[str, tuple[str, str, dict]] = {
    "gpt2": (
        "GPT2Config",
        "GPT2LMHeadModel",
        dict(n_embd=32, n_layer=2, n_head=4, n_positions=64),
    ),
    "bert": ("BertConfig", "BertForMaskedLM", _ENCODER),
    "llama": ("LlamaConfig", "LlamaForCausalLM", _LLAMA),
    "mistral": ("MistralConfig", "MistralForCausalLM", _LLAMA),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(_LLAMA, tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", _HEADS),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(_HEADS, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2),
    ),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", _HEADS),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", _HEADS),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", _HEADS),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", _LLAMA),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", _LLAMA),
    "gpt_neox": (
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        dict(_ENCODER, use_parallel_residual=True),
    ),
    "cohere": ("CohereConfig", "CohereForCausalLM", _LLAMA),
    "opt": (
        "OPTConfig",
        "OPTForCausalLM",
        dict(_ENCODER, ffn_dim=64, word_embed_proj_dim=32, intermediate_size=None),
    ),
    "falcon": (
        "FalconConfig",
        "FalconForCausalLM",
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4),
    ),
    "t5": (
        "T5Config",
        "T5ForConditionalGeneration",
        dict(d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4, decoder_start_token_id=0),
    ),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(_LLAMA, num_key_value_heads=4)),
}
#: The 17 families of issue 38 (stablelm is an extra row used by older tests).
ISSUE_FAMILIES = tuple(f for f in ROWS if f != "stablelm")


@torch.no_grad()
def randomise(model: nn.Module, seed: int = 0, *, scale: float = 0.5) -> nn.Module:
    """Non-trivial norm gains/biases and O(1) embeddings."""
    g = torch.Generator().manual_seed(seed)
    for module in model.modules():
        kind = type(module).__name__
        weight = getattr(module, "weight", None)
        if kind.endswith(("LayerNorm", "RMSNorm")) and isinstance(weight, torch.Tensor):
            weight.copy_(1 + scale * torch.randn(weight.shape, generator=g))
            bias = getattr(module, "bias", None)
            if isinstance(bias, torch.Tensor):
                bias.copy_(scale * torch.randn(bias.shape, generator=g))
        elif isinstance(module, nn.Embedding):
            weight.copy_(torch.randn(weight.shape, generator=g))
        elif isinstance(getattr(module, "bias", None), torch.Tensor) and "Norm" not in kind:
            module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=g))
    return model


def build(
    family: str, *, seed: int = 0, layers: int = 2, attn: str | None = None, **overrides
) -> nn.Module:
    """A tiny randomised model of ``family`` (a key of :data:`ROWS`) with an LM head (BERT:
    masked-LM head; T5: encoder-decoder with its LM head); ``attn="eager"`` for probes that
    read attention probabilities."""
    import transformers as tf

    torch.manual_seed(seed)
    config_cls, model_cls, kwargs = ROWS[family]
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if layers != 2:
        key = "n_layer" if family == "gpt2" else "num_layers" if family == "t5" else None
        kwargs[key or "num_hidden_layers"] = layers
    common = dict(vocab_size=VOCAB, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    config = getattr(tf, config_cls)(**common, **kwargs)
    cls = getattr(tf, model_cls)
    for key, value in overrides.items():
        setattr(config, key, value)
    if attn is not None:
        config._attn_implementation = attn
    return randomise(cls(config).eval(), seed)


def tokens(batch: int = 2, length: int = 12, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, length), generator=g)


def example(model: nn.Module, ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Keyword inputs for ``model``: ``input_ids``, and decoder inputs for an encoder-decoder."""
    ids = tokens() if ids is None else ids
    out = {"input_ids": ids}
    if getattr(model.config, "is_encoder_decoder", False):
        out["decoder_input_ids"] = ids.flip(-1)
    return out


# --- real tokenizer files, built from tiny vocabularies with the `tokenizers` library ---

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def bert_tokenizer():
    """A WordPiece BERT tokenizer over letters (57 ids, within :data:`VOCAB`):
    ``[PAD] [UNK] [CLS] [SEP] [MASK]``, ``a..z`` and ``##a..##z``; adds ``[CLS] ... [SEP]``."""
    import transformers as tf
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *_LETTERS]
    vocab = {t: i for i, t in enumerate(pieces + ["##" + c for c in _LETTERS])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=200))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    tok.decoder = decoders.WordPiece()
    return tf.BertTokenizerFast(tokenizer_object=tok)


def _byte_bpe(extra: list[str], template: str | None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(extra)}
    for c in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[c] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if template is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=template, special_tokens=[(extra[1], vocab[extra[1]])]
        )
    return tok, len(vocab)


def gpt2_tokenizer():
    """A byte-level BPE GPT-2 tokenizer (257 ids: ``<|endoftext|>`` then the 256 bytes), no
    pad token, no special tokens added (like GPT-2's)."""
    import transformers as tf

    tok, _ = _byte_bpe(["<|endoftext|>"], None)
    end = "<|endoftext|>"
    return tf.GPT2TokenizerFast(tokenizer_object=tok, bos_token=end, eos_token=end, unk_token=end)


def llama_tokenizer():
    """A Llama-style byte-level BPE tokenizer (259 ids) that adds ``<s>`` and has no pad
    token."""
    import transformers as tf

    tok, _ = _byte_bpe(["<unk>", "<s>", "</s>"], "<s> $A")
    return tf.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


TOKENIZERS = {"bert": bert_tokenizer, "gpt2": gpt2_tokenizer, "llama": llama_tokenizer}


def save_with_tokenizer(family: str, folder, *, seed: int = 0, layers: int = 2) -> nn.Module:
    """Build a tiny ``family`` model whose vocabulary fits its real tokenizer, and save both
    to ``folder`` with ``save_pretrained`` (no hub); returns the model."""
    tokenizer = TOKENIZERS[family]()
    vocab = max(VOCAB, len(tokenizer))
    model = build(family, seed=seed, layers=layers, vocab_size=vocab)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


# --- tokenizers trained on a tiny corpus with the `tokenizers` library (issue 38) ---

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "normalization layers keep activations in a useful range",
    "folding a layer norm into the next linear layer is exact",
    "attention sinks collect probability mass on the first token",
    "a tiny corpus is enough to train a tiny tokenizer",
] * 4


def trained_tokenizer(kind: str, vocab_size: int = 120):
    """A fast tokenizer trained on :data:`CORPUS`: "bpe" (byte-level, GPT-2 style),
    "wordpiece" (BERT), "unigram" (SentencePiece-style Metaspace, T5)."""
    import transformers as tf
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size + 256,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train_from_iterator(CORPUS, trainer)
        end = "<|endoftext|>"
        return tf.GPT2TokenizerFast(
            tokenizer_object=tok, bos_token=end, eos_token=end, unk_token=end
        )
    if kind == "wordpiece":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        tok.train_from_iterator(
            CORPUS, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials)
        )
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
        )
        return tf.BertTokenizerFast(tokenizer_object=tok)
    if kind == "unigram":
        specials = ["<pad>", "</s>", "<unk>"]
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        tok.train_from_iterator(
            CORPUS,
            trainers.UnigramTrainer(
                vocab_size=vocab_size, special_tokens=specials, unk_token="<unk>"
            ),
        )
        eos = tok.token_to_id("</s>")
        tok.post_processor = processors.TemplateProcessing(
            single="$A </s>", special_tokens=[("</s>", eos)]
        )
        return tf.PreTrainedTokenizerFast(
            tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
        )
    raise ValueError(kind)
