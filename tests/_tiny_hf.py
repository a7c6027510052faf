"""Tiny Hugging Face models built from configs (no downloads), one per supported family.

Each builder returns an eval-mode model with randomised norm affines (init is 1/0, which
would make folding and probing trivial) and a few hundred parameters per layer.
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB = 61
FAMILIES = ("gpt2", "gpt_neox", "stablelm", "llama", "bert")


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


def build(family: str, *, seed: int = 0, layers: int = 2, **overrides) -> nn.Module:
    """A tiny randomised model of ``family`` with an LM head (BERT: masked-LM head)."""
    import transformers as tf

    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    if family == "gpt2":
        config = tf.GPT2Config(n_embd=32, n_layer=layers, n_head=4, n_positions=64, **common)
        cls = tf.GPT2LMHeadModel
    elif family == "gpt_neox":
        config = tf.GPTNeoXConfig(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
            use_parallel_residual=True,
            **common,
        )
        cls = tf.GPTNeoXForCausalLM
    elif family == "stablelm":
        config = tf.StableLmConfig(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
            **common,
        )
        cls = tf.StableLmForCausalLM
    elif family == "llama":
        config = tf.LlamaConfig(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
            **common,
        )
        cls = tf.LlamaForCausalLM
    elif family == "bert":
        config = tf.BertConfig(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
            vocab_size=VOCAB,
            pad_token_id=0,
        )
        cls = tf.BertForMaskedLM
    else:
        raise ValueError(family)
    for key, value in overrides.items():
        setattr(config, key, value)
    return randomise(cls(config).eval(), seed)


def tokens(batch: int = 2, length: int = 12, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, length), generator=g)
