"""fused-geglu: GeGLU, ``gelu(gate) * up``, as one Triton kernel, forward and backward.

Functions:
    geglu(gate, up, *, approximate="tanh")     separate gate and up tensors
    geglu_concat(x, *, approximate="tanh")     x = [gate | up] (a fused gate_up_proj)
    geglu_linear(x, gate_weight, up_weight, gate_bias=None, up_bias=None, *, approximate="tanh")
                                               gelu(x W_gate^T + b) * (x W_up^T + b), one GEMM for inference
    geglu_linear_concat(x, gate_up_weight, gate_up_bias=None, *, approximate="tanh")
                                               the same with a fused gate_up_proj weight
    geglu_mlp(x, gate_weight, up_weight, down_weight, gate_bias=None, up_bias=None, down_bias=None, *, approximate="tanh")
                                               the whole MLP: down_proj(geglu_linear(...)), the down
                                               projection through the same GEMM at decode
    geglu_down_proj(gate, up, down_weight, down_bias=None, *, approximate="tanh")
                                               F.linear(gelu(gate) * up, W_down, b_down), for training:
                                               saves gate and up, not the GeGLU output
    gelu_and_mul(out, x)                       kernels-community/activation drop-ins
    gelu_tanh_and_mul(out, x)
Layers (for ``kernels.kernelize``): layers.GeGLUMLP, layers.GeluAndMul, layers.GeluTanhAndMul.
"""

from . import layers
from .functional import (
    geglu,
    geglu_concat,
    geglu_down_proj,
    geglu_linear,
    geglu_linear_concat,
    geglu_mlp,
    gelu_and_mul,
    gelu_tanh_and_mul,
)

__all__ = [
    "geglu",
    "geglu_concat",
    "geglu_down_proj",
    "geglu_linear",
    "geglu_linear_concat",
    "geglu_mlp",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "layers",
]
