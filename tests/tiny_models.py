"""Tiny random Gemma-family models (causal LMs, a multimodal Gemma3) and a T5Gemma MLP, and how close a kernelized
one must stay to eager."""

from __future__ import annotations

import torch

LOGITS_REL_TOL = 1e-5  # fp32 model: fused GeGLU against eager, over the whole model
VOCAB_SIZE = 128


#: The tiny text models' dimensions (every family).
_TEXT_CONFIG = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=32,
    intermediate_size=72,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    max_position_embeddings=64,
)


def tiny_model(family: str, activation: str = "gelu_pytorch_tanh"):
    """A two-layer ``<family>ForCausalLM`` (gemma, gemma2, gemma3, gemma3n) with random weights (seed 0).

    Gemma 3n's first layer is sparse (a Gaussian top-k of the gate before the GELU), its second dense.
    """
    import transformers

    if family == "gemma":
        config = transformers.GemmaConfig(hidden_act=activation, **_TEXT_CONFIG)
        cls = transformers.GemmaForCausalLM
    elif family == "gemma2":
        config = transformers.Gemma2Config(hidden_activation=activation, sliding_window=16, **_TEXT_CONFIG)
        cls = transformers.Gemma2ForCausalLM
    elif family == "gemma3":
        config = transformers.Gemma3TextConfig(hidden_activation=activation, sliding_window=16, **_TEXT_CONFIG)
        cls = transformers.Gemma3ForCausalLM
    else:
        config = transformers.Gemma3nTextConfig(
            hidden_activation=activation, sliding_window=16, activation_sparsity_pattern=[0.95, 0.0],
            layer_types=["sliding_attention", "full_attention"], num_kv_shared_layers=0,
            vocab_size_per_layer_input=VOCAB_SIZE, hidden_size_per_layer_input=8, laurel_rank=4, **_TEXT_CONFIG
        )
        cls = transformers.Gemma3nForCausalLM
    torch.manual_seed(0)
    return cls(config)


#: The tiny multimodal Gemma3's special tokens (within VOCAB_SIZE) and image: 28 x 28 pixels in 14 x 14 patches,
#: pooled into IMAGE_TOKENS soft tokens.
BOI_TOKEN, EOI_TOKEN, IMAGE_TOKEN = VOCAB_SIZE - 3, VOCAB_SIZE - 2, VOCAB_SIZE - 1
IMAGE_SIZE, IMAGE_TOKENS = 28, 4


def tiny_gemma3_multimodal():
    """A ``Gemma3ForConditionalGeneration`` (how Gemma 3's 4B, 12B and 27B checkpoints load): a two-layer text
    model as ``tiny_model("gemma3")`` builds it and a one-layer SigLIP vision tower, random weights (seed 0)."""
    import transformers

    text = dict(_TEXT_CONFIG, hidden_activation="gelu_pytorch_tanh", sliding_window=16)
    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=IMAGE_SIZE,
        patch_size=14,
    )
    config = transformers.Gemma3Config(
        text_config=text, vision_config=vision, mm_tokens_per_image=IMAGE_TOKENS, image_token_index=IMAGE_TOKEN,
        boi_token_index=BOI_TOKEN, eoi_token_index=EOI_TOKEN,
    )
    torch.manual_seed(0)
    return transformers.Gemma3ForConditionalGeneration(config)


def tiny_t5gemma_mlp():
    """A T5Gemma MLP (hidden 32, intermediate 64, tanh GELU) whose dropout (p 0.5) drops out the GeGLU output."""
    import types

    from transformers.models.t5gemma.modeling_t5gemma import T5GemmaMLP

    config = types.SimpleNamespace(
        hidden_size=32, intermediate_size=64, hidden_activation="gelu_pytorch_tanh", dropout_rate=0.5
    )
    torch.manual_seed(0)
    return T5GemmaMLP(config)
