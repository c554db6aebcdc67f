"""fused-geglu: GeGLU, ``gelu(gate) * up``, as one Triton kernel, forward and backward.

Functions:
    geglu(gate, up, *, approximate="tanh")     separate gate and up tensors
    geglu_concat(x, *, approximate="tanh")     x = [gate | up] (a fused gate_up_proj)
    gelu_and_mul(out, x)                       kernels-community/activation drop-ins
    gelu_tanh_and_mul(out, x)
Layers (for ``kernels.kernelize``): layers.GeGLUMLP, layers.GeluAndMul, layers.GeluTanhAndMul.
"""

from . import layers
from .functional import geglu, geglu_concat, gelu_and_mul, gelu_tanh_and_mul

__all__ = ["geglu", "geglu_concat", "gelu_and_mul", "gelu_tanh_and_mul", "layers"]
