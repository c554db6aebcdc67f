"""The kernel's public functions: validated, differentiable entry points to the ops.

Under torch.compile they call the registered ops (opaque to Dynamo, with fake
and autograd registrations); in eager mode the same implementations directly
(see the eager path in ops.py).
"""

from __future__ import annotations

import torch

from . import ops
from .checks import check_concat, check_gate_up, check_no_overlap, check_out, concat_output_shape


def geglu(gate: torch.Tensor, up: torch.Tensor, *, approximate: str = "tanh") -> torch.Tensor:
    """``gelu(gate, approximate) * up`` in one kernel, differentiable.

    Args:
        gate, up: tensors of the same shape, dtype (float32, float16 or bfloat16)
            and device. Any leading shape; strided inputs whose last dimension is
            contiguous are read in place.
        approximate: ``"tanh"`` or ``"none"`` (exact erf GELU), as in
            ``torch.nn.functional.gelu``.

    Returns:
        A new contiguous tensor of the shape of ``gate``.
    """
    check_gate_up(gate, up, approximate)
    if torch.compiler.is_compiling():
        return ops.geglu(gate, up, approximate)
    if torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad):
        return ops.GeGLUFunction.apply(gate, up, approximate)
    return ops.geglu_impl(gate, up, approximate)


def geglu_concat(x: torch.Tensor, *, approximate: str = "tanh") -> torch.Tensor:
    """GeGLU of ``x = [gate | up]`` along the last dimension (a fused ``gate_up_proj``), differentiable.

    Both halves are read in place, with no copy. The result has the shape of
    ``x`` with its last dimension halved.
    """
    check_concat(x, approximate)
    if torch.compiler.is_compiling():
        return ops.geglu_concat(x, approximate)
    if torch.is_grad_enabled() and x.requires_grad:
        return ops.GeGLUConcatFunction.apply(x, approximate)
    return ops.geglu_concat_impl(x, approximate)


def _gelu_and_mul_into(out: torch.Tensor, x: torch.Tensor, approximate: str) -> torch.Tensor:
    check_concat(x, approximate)
    check_out(out, concat_output_shape(x), x)
    check_no_overlap(out, x)
    if torch.compiler.is_compiling():
        ops.geglu_concat_out(out, x, approximate)
    else:
        ops.geglu_concat_out_impl(out, x, approximate)
    return out


def gelu_and_mul(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Drop-in for ``kernels-community/activation``'s ``gelu_and_mul``: exact GELU.

    Writes ``gelu(x[..., :d]) * x[..., d:]`` into ``out`` (shape ``x.shape[:-1] + (d,)``)
    and returns it. Not differentiable through ``out``; use ``geglu_concat`` for autograd.
    """
    return _gelu_and_mul_into(out, x, "none")


def gelu_tanh_and_mul(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Drop-in for ``kernels-community/activation``'s ``gelu_tanh_and_mul``: tanh GELU, into ``out``."""
    return _gelu_and_mul_into(out, x, "tanh")
