"""Tiny random Gemma-family causal LMs and a T5Gemma MLP, and how close a kernelized one must stay to eager."""

from __future__ import annotations

import torch

LOGITS_REL_TOL = 1e-5  # fp32 model: fused GeGLU against eager, over the whole model
VOCAB_SIZE = 128


def tiny_model(family: str, activation: str = "gelu_pytorch_tanh"):
    """A two-layer ``<family>ForCausalLM`` (gemma, gemma2, gemma3, gemma3n) with random weights (seed 0).

    Gemma 3n's first layer is sparse (a Gaussian top-k of the gate before the GELU), its second dense.
    """
    import transformers

    common = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        intermediate_size=72,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=64,
    )
    if family == "gemma":
        config = transformers.GemmaConfig(hidden_act=activation, **common)
        cls = transformers.GemmaForCausalLM
    elif family == "gemma2":
        config = transformers.Gemma2Config(hidden_activation=activation, sliding_window=16, **common)
        cls = transformers.Gemma2ForCausalLM
    elif family == "gemma3":
        config = transformers.Gemma3TextConfig(hidden_activation=activation, sliding_window=16, **common)
        cls = transformers.Gemma3ForCausalLM
    else:
        config = transformers.Gemma3nTextConfig(
            hidden_activation=activation, sliding_window=16, activation_sparsity_pattern=[0.95, 0.0],
            layer_types=["sliding_attention", "full_attention"], num_kv_shared_layers=0,
            vocab_size_per_layer_input=VOCAB_SIZE, hidden_size_per_layer_input=8, laurel_rank=4, **common
        )
        cls = transformers.Gemma3nForCausalLM
    torch.manual_seed(0)
    return cls(config)


def tiny_t5gemma_mlp():
    """A T5Gemma MLP (hidden 32, intermediate 64, tanh GELU) whose dropout (p 0.5) drops out the GeGLU output."""
    import types

    from transformers.models.t5gemma.modeling_t5gemma import T5GemmaMLP

    config = types.SimpleNamespace(
        hidden_size=32, intermediate_size=64, hidden_activation="gelu_pytorch_tanh", dropout_rate=0.5
    )
    torch.manual_seed(0)
    return T5GemmaMLP(config)
