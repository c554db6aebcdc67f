"""The kernel's public functions: validated, differentiable entry points to the ops.

Under torch.compile, and for tensors without data of their own (meta tensors,
FakeTensorMode's fake tensors, other tensor subclasses), they call the
registered ops, whose fake and autograd registrations handle them; for plain
tensors in eager mode, the same implementations directly (see the eager path
in ops.py).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from . import ops
from .checks import (
    PLAIN_TENSOR_TYPES,
    check_concat,
    check_down_proj,
    check_gate_up,
    check_linear,
    check_linear_concat,
    check_mlp,
    check_no_unsupported_transform,
    check_out,
    concat_output_shape,
    mlp_is_well_formed,
    unsupported_transform_active,
)


def _needs_registered_op(*tensors: Optional[torch.Tensor]) -> bool:
    """Whether a call goes through the registered op rather than straight to the implementation.

    Under torch.compile it must (Dynamo traces the op, opaque). So must meta
    tensors and tensor subclasses (FakeTensor, DTensor): only the op's
    dispatch gives them their fake implementation or their own handling. And
    so must a tensor with the lazy negation bit (``is_neg()``: a real view such
    as ``z.conj().imag``), whose memory holds the values' negatives: the
    dispatcher resolves the bit before the implementation reads that memory.
    Raises NotImplementedError under forward-mode AD, a torch.func transform
    or torch.jit.trace, which neither path supports
    (``check_no_unsupported_transform``).
    """
    if torch.compiler.is_compiling():
        return True
    check_no_unsupported_transform()
    for tensor in tensors:
        if tensor is not None and (type(tensor) not in PLAIN_TENSOR_TYPES or tensor.is_meta or tensor.is_neg()):
            return True
    return False


def _device_type(x: torch.Tensor) -> str:
    """x's device type, as autocast keys its state (ROCm tensors are "cuda" too), without a torch.device object
    for GPU tensors."""
    return "cuda" if x.is_cuda else x.device.type


def _is_plain_inference_mlp(x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias, approximate) -> bool:
    """Whether a ``geglu_mlp`` call is the common inference call, which goes straight to the implementation: no
    biases, well-formed operands (``check_mlp``), plain tensors (no subclass, meta tensor or lazily negated view),
    no gradient to record in grad mode, outside torch.compile, autocast and the transforms the kernels refuse.

    The answer of ``_autocast``, ``check_mlp``, ``_needs_registered_op`` and ``needs_gradient`` for that call,
    read in one pass: inside a whole model's decode each of those functions costs the host several times its
    loop time, the first touch of its code and data (PERFORMANCE v39-v40). Anything else, bad input included,
    is False, and ``geglu_mlp`` then takes the general path, which names a problem.
    """
    if (
        gate_bias is not None
        or up_bias is not None
        or down_bias is not None
        or torch.compiler.is_compiling()
        or not mlp_is_well_formed(x, gate_weight, up_weight, down_weight, approximate)
    ):
        return False
    plain = PLAIN_TENSOR_TYPES
    if not (type(x) in plain and type(gate_weight) in plain and type(up_weight) in plain and type(down_weight) in plain):
        return False
    # One device for all four (mlp_is_well_formed): x's tells autocast's state and a meta call.
    return not (
        x.is_meta
        or torch.is_autocast_enabled(_device_type(x))
        or unsupported_transform_active()
        or x.is_neg()
        or gate_weight.is_neg()
        or up_weight.is_neg()
        or down_weight.is_neg()
        or (
            torch.is_grad_enabled()
            and (x.requires_grad or gate_weight.requires_grad or up_weight.requires_grad or down_weight.requires_grad)
        )
    )


def needs_gradient(*tensors: Optional[torch.Tensor]) -> bool:
    """Whether autograd records a call on these tensors (None skipped): grad mode on, one of them requiring it,
    and outside inference mode, where ``enable_grad`` turns grad mode on and autograd still records nothing
    (Dynamo cannot trace that flag; under torch.compile the registered ops' autograd decides).
    """
    return (
        torch.is_grad_enabled()
        and any(t is not None and t.requires_grad for t in tensors)
        and (torch.compiler.is_compiling() or not torch.is_inference_mode_enabled())
    )


def _autocast(operands: tuple) -> tuple:
    """The operands of a function with projections (x first) as ``nn.Linear`` sees them under ``torch.autocast``.

    In an autocast region eager's projections cast their input, weight and
    bias to the autocast dtype (floating tensors, float64 aside). The kernels
    take tensors as they are given, so the functions with projections cast
    them first the same way: differentiably, so that fp32 weights get fp32
    gradients, and ahead of the dtype checks. Outside autocast (whose state
    is read for x's device), or for an x that is not a tensor (the checks
    then name it) or is on the meta device (autocast has none): as given.
    """
    x = operands[0]
    if not isinstance(x, torch.Tensor) or x.is_meta:
        return operands
    device_type = _device_type(x)
    if not torch.is_autocast_enabled(device_type):
        return operands
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(
        t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype not in (dtype, torch.float64) else t
        for t in operands
    )


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
    if _needs_registered_op(gate, up):
        return ops.geglu(gate, up, approximate)
    if needs_gradient(gate, up):
        return ops.GeGLUFunction.apply(gate, up, approximate)
    return ops.geglu_impl(gate, up, approximate)


def geglu_concat(x: torch.Tensor, *, approximate: str = "tanh") -> torch.Tensor:
    """GeGLU of ``x = [gate | up]`` along the last dimension (a fused ``gate_up_proj``), differentiable.

    Both halves are read in place, with no copy. The result has the shape of
    ``x`` with its last dimension halved.
    """
    check_concat(x, approximate)
    if _needs_registered_op(x):
        return ops.geglu_concat(x, approximate)
    if needs_gradient(x):
        return ops.GeGLUConcatFunction.apply(x, approximate)
    return ops.geglu_concat_impl(x, approximate)


def geglu_linear(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    gate_bias: Optional[torch.Tensor] = None,
    up_bias: Optional[torch.Tensor] = None,
    *,
    approximate: str = "tanh",
) -> torch.Tensor:
    """``gelu(x @ gate_weight.T + gate_bias) * (x @ up_weight.T + up_bias)``: a GeGLU MLP before its down projection.

    Args:
        x: ``[..., hidden]``, float32, float16 or bfloat16.
        gate_weight, up_weight: ``[intermediate, hidden]``, as ``nn.Linear`` holds
            its weight; x's dtype and device.
        gate_bias, up_bias: ``[intermediate]`` or None.
        approximate: ``"tanh"`` or ``"none"``, as in ``torch.nn.functional.gelu``.

    Without a gradient to compute (inference) on a GPU, in bf16/fp16, both
    projections and the GeGLU run as one Triton GEMM that never writes the
    projections to memory, where the launch table says it is faster;
    otherwise (training, fp32, large token counts) two GEMMs and the fused
    activation kernel, differentiable. Under ``torch.autocast`` the tensors
    are cast to the autocast dtype first, as ``nn.Linear`` casts them.

    Returns:
        ``[..., intermediate]``.
    """
    operands = x, gate_weight, up_weight, gate_bias, up_bias = _autocast((x, gate_weight, up_weight, gate_bias, up_bias))
    check_linear(*operands, approximate)
    if needs_gradient(*operands):
        return geglu(F.linear(x, gate_weight, gate_bias), F.linear(x, up_weight, up_bias), approximate=approximate)
    if _needs_registered_op(*operands):
        return ops.geglu_linear(*operands, approximate)
    return ops.geglu_linear_impl(*operands, approximate)


def geglu_linear_concat(
    x: torch.Tensor,
    gate_up_weight: torch.Tensor,
    gate_up_bias: Optional[torch.Tensor] = None,
    *,
    approximate: str = "tanh",
) -> torch.Tensor:
    """``geglu_linear`` with a fused ``gate_up_proj``: weight ``[2 * intermediate, hidden]`` = [gate rows | up rows].

    The two halves of the weight (and bias) are read in place, with no copy.
    """
    x, gate_up_weight, gate_up_bias = _autocast((x, gate_up_weight, gate_up_bias))
    check_linear_concat(x, gate_up_weight, gate_up_bias, approximate)
    half = gate_up_weight.shape[0] // 2
    gate_bias, up_bias = (None, None) if gate_up_bias is None else (gate_up_bias[:half], gate_up_bias[half:])
    return geglu_linear(x, gate_up_weight[:half], gate_up_weight[half:], gate_bias, up_bias, approximate=approximate)


def geglu_down_proj(
    gate: torch.Tensor,
    up: torch.Tensor,
    down_weight: torch.Tensor,
    down_bias: Optional[torch.Tensor] = None,
    *,
    approximate: str = "tanh",
) -> torch.Tensor:
    """``F.linear(gelu(gate, approximate) * up, down_weight, down_bias)``: a GeGLU MLP after its projections.

    For training: autograd keeps ``gate`` and ``up`` (and the weight), not the
    GeGLU output ``h`` that ``down_proj``'s weight gradient needs; the backward
    kernel recomputes ``h`` (bit for bit the forward's) in the same pass that
    computes the gradients of gate and up. Eager keeps gate, gelu(gate), up
    and h; this keeps two of the four.

    Args:
        gate, up: ``[..., intermediate]``, as in ``geglu``.
        down_weight: ``[hidden, intermediate]``, as ``nn.Linear`` holds it; gate's dtype and device.
        down_bias: ``[hidden]`` or None.

    Under ``torch.autocast`` the tensors are cast to the autocast dtype first,
    as ``nn.Linear`` casts its operands: the GeGLU too runs in that dtype.

    Returns:
        ``[..., hidden]``.
    """
    operands = gate, up, down_weight, down_bias = _autocast((gate, up, down_weight, down_bias))
    check_down_proj(*operands, approximate)
    if _needs_registered_op(*operands):
        return ops.geglu_down_proj(*operands, approximate)
    if needs_gradient(*operands):
        return ops.GeGLUDownProjFunction.apply(*operands, approximate)
    return ops.geglu_down_proj_impl(*operands, approximate)


def geglu_mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    gate_bias: Optional[torch.Tensor] = None,
    up_bias: Optional[torch.Tensor] = None,
    down_bias: Optional[torch.Tensor] = None,
    *,
    approximate: str = "tanh",
) -> torch.Tensor:
    """A whole GeGLU MLP from its weights: ``F.linear(geglu_linear(x, ...), down_weight, down_bias)``.

    Args:
        x, gate_weight, up_weight, gate_bias, up_bias, approximate: as in ``geglu_linear``.
        down_weight: ``[hidden, intermediate]``, as ``nn.Linear`` holds it; x's dtype and device.
        down_bias: ``[hidden]`` or None.

    Without a gradient to compute (inference): ``geglu_linear``'s path for the
    first half, and at decode on a GPU, in bf16/fp16, the down projection
    through the same Triton GEMM (plain), whose launch costs the host less
    than cuBLAS's; otherwise cuBLAS. With a gradient: one autograd step for
    the whole MLP that keeps x, gate and up, not the GeGLU output (recomputed
    by the backward kernel), and sums the projections' input gradients inside
    their GEMMs (``ops.GeGLUMLPFunction``); under torch.compile the projections'
    GEMMs and ``geglu_down_proj``'s registered op, which keep the same tensors.
    Under ``torch.autocast`` the tensors are cast to the autocast dtype first,
    as ``nn.Linear`` casts them.

    Returns:
        ``[..., hidden]``.
    """
    if _is_plain_inference_mlp(x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias, approximate):
        return ops.geglu_mlp_impl(x, gate_weight, up_weight, down_weight, None, None, None, approximate)
    operands = _autocast((x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias))
    x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias = operands
    check_mlp(*operands, approximate)
    registered_op = _needs_registered_op(*operands)
    if needs_gradient(*operands):
        if registered_op:
            gate, up = F.linear(x, gate_weight, gate_bias), F.linear(x, up_weight, up_bias)
            return geglu_down_proj(gate, up, down_weight, down_bias, approximate=approximate)
        return ops.GeGLUMLPFunction.apply(*operands, approximate)
    if registered_op:
        return ops.geglu_mlp(*operands, approximate)
    return ops.geglu_mlp_impl(*operands, approximate)


def _gelu_and_mul_into(name: str, out: torch.Tensor, x: torch.Tensor, approximate: str) -> torch.Tensor:
    check_concat(x, approximate)
    check_out(out, concat_output_shape(x), x)
    registered_op = _needs_registered_op(out, x)  # first: under torch.func.grad, x requires grad
    if needs_gradient(out, x):  # as eager's out= functions refuse: a gradient would be silently lost
        raise ValueError(
            f"{name} writes into out and records no gradient, but out or x requires grad: use geglu_concat "
            "(differentiable), or call it under torch.no_grad()"
        )
    # A lazily negated view (see _needs_registered_op) is written by copy_, as eager's out= functions write it.
    # (Dynamo does not trace is_neg; a compiled call writes through the op.)
    if not torch.compiler.is_compiling() and out.is_neg():
        return out.copy_(geglu_concat(x, approximate=approximate))
    if registered_op:  # whose dispatch refuses an inference tensor out of inference mode itself
        ops.geglu_concat_out(out, x, approximate)
    else:
        if out.is_inference() and not torch.is_inference_mode_enabled():
            raise ValueError(
                "out is an inference tensor (made under torch.inference_mode): as in eager, it can be written in "
                "place only inside inference mode"
            )
        ops.geglu_concat_out_impl(out, x, approximate)
        # The dispatcher counts an op's writes; a kernel's are counted here, so that autograd refuses, as after
        # eager's out= functions, a backward that would read out's old values.
        torch.autograd.graph.increment_version(out)
    return out


def gelu_and_mul(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Drop-in for ``kernels-community/activation``'s ``gelu_and_mul``: exact GELU.

    Writes ``gelu(x[..., :d]) * x[..., d:]`` into ``out`` (shape ``x.shape[:-1] + (d,)``)
    and returns it; ``out`` may be a view of ``x``'s memory. Not differentiable: with grad mode
    on, neither may require grad (``geglu_concat`` is the differentiable form).
    """
    return _gelu_and_mul_into("gelu_and_mul", out, x, "none")


def gelu_tanh_and_mul(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Drop-in for ``kernels-community/activation``'s ``gelu_tanh_and_mul``: tanh GELU, into ``out``."""
    return _gelu_and_mul_into("gelu_tanh_and_mul", out, x, "tanh")
