"""The kernel's torch ops, registered in the kernel's own namespace.

Each op is a ``torch.library.custom_op`` named through ``add_op_namespace_prefix``
(so two builds of this kernel never collide), with a fake implementation for
``torch.compile`` / meta tensors and, for the differentiable ones, an autograd
formula that calls the backward op. The implementations pick their engine per
device:

- CUDA, ROCm and XPU tensors: the Triton kernels (for ``geglu_linear``, the
  fused GEMM where it pays off, else two GEMMs and the activation kernel);
- CPU tensors under ``TRITON_INTERPRET=1``: the same Triton kernels, interpreted;
- other CPU tensors (or no triton installed): the PyTorch fallback;
- a kernel that Triton cannot compile or launch for the device
  (``KernelUnavailable``): ``geglu_linear`` runs two GEMMs and the activation
  kernel, the activation the PyTorch fallback, with one warning per process.

Ops (inputs are validated by the public functions in ``functional.py``, which
call them under torch.compile and their implementations directly in eager mode):
  geglu(gate, up, approximate) -> out
  geglu_backward(grad_out, gate, up, approximate) -> (grad_gate, grad_up)
  geglu_concat(x, approximate) -> out                  x = [gate | up]
  geglu_concat_backward(grad_out, x, approximate) -> grad_x
  geglu_concat_out(out, x, approximate) -> None        writes into out
  geglu_linear(x, gate_weight, up_weight, gate_bias, up_bias, approximate) -> h
                                                       inference only, no autograd
  geglu_mlp(x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias, approximate) -> y
                                                       y = down_proj(geglu_linear(...)); inference only,
                                                       no autograd; at decode the down projection is
                                                       the GEMM kernel's plain form, not cuBLAS
  geglu_down_proj(gate, up, down_weight, down_bias, approximate) -> y
                                                       y = down_proj(geglu(gate, up)); saves gate
                                                       and up, not the GeGLU output h
  geglu_backward_with_output(grad_out, gate, up, approximate) -> (grad_gate, grad_up, out)
                                                       the backward, writing out = geglu(gate, up)
                                                       again in the same pass (for down_proj's
                                                       weight gradient)
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Optional

import torch
import torch.nn.functional as F

from . import torch_fallback
from ._ops import add_op_namespace_prefix
from .checks import (
    UnsupportedTransform,
    batched_backward,
    concat_output_shape,
    linear_output_shape,
)

try:
    from . import triton_gemm_kernels, triton_kernels
    from .triton_launcher import RUNS_INTERPRETED, KernelUnavailable
except ImportError:  # triton is optional: the torch-cpu variant must import without it
    triton_gemm_kernels = triton_kernels = None
    RUNS_INTERPRETED = False
    KernelUnavailable = RuntimeError  # never raised: nothing is launched


def _runs_on_triton(tensor: torch.Tensor) -> bool:
    return triton_kernels is not None and (RUNS_INTERPRETED or not tensor.is_cpu)


_warned_of_fallback = False


def _warn_of_fallback(error: Exception) -> None:
    """Once per process: a kernel does not run on this device, so its calls take the unfused path."""
    global _warned_of_fallback
    if not _warned_of_fallback:
        _warned_of_fallback = True
        warnings.warn(
            f"fused-geglu: {error}. Calls that need it run unfused instead (two GEMMs and the activation "
            "kernel, or PyTorch): correct, but slower. This warning is shown once per process.",
            RuntimeWarning,
            stacklevel=3,
        )


def _row_view(tensor: torch.Tensor) -> Optional[torch.Tensor]:
    """A [rows, cols] view of ``tensor`` with unit column stride, or None where none exists."""
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
    if tensor.stride(-1) != 1 and tensor.shape[-1] != 1:
        if tensor.numel() == 0:  # no element to address, so any strides describe it (an expanded empty gradient)
            return tensor.as_strided((math.prod(tensor.shape[:-1]), tensor.shape[-1]), (tensor.shape[-1], 1))
        return None
    if tensor.dim() == 2:  # already one: a view would only cost a dispatcher round trip
        return tensor
    try:  # the row count explicit: view(-1, 0) cannot infer it for an empty last dimension
        return tensor.view(math.prod(tensor.shape[:-1]), tensor.shape[-1])
    except RuntimeError:  # leading dimensions that no single row stride describes
        return None


def _rows(tensor: torch.Tensor) -> torch.Tensor:
    """The [rows, cols] view, through a contiguous copy only where no view exists (reads only)."""
    view = _row_view(tensor)
    return view if view is not None else _row_view(tensor.contiguous())


def _kernel_operands(*tensors: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], int, int, tuple[int, ...]]:
    """What the elementwise kernels run on: the tensors, their [n_rows, n_cols] shape, each one's row stride.

    All contiguous: the tensors as they are, read as one row of numel
    elements, so that tiles ignore row ends and every access is a 16-byte
    vector where numel is a multiple of 16. Otherwise their [rows, cols]
    views, one row per row.
    """
    if all([t.is_contiguous() for t in tensors]):
        numel = tensors[0].numel()
        return tensors, 1, numel, (numel,) * len(tensors)
    views = tuple([_rows(t) for t in tensors])
    n_rows, n_cols = views[0].shape
    return views, n_rows, n_cols, tuple([v.stride(0) for v in views])


def _forward_into(gate: torch.Tensor, up: torch.Tensor, out: torch.Tensor, approximate: str) -> None:
    """out = gelu(gate) * up; ``out`` must have a row view (see _row_view), as fresh tensors do."""
    if out.numel() == 0:
        return
    if _runs_on_triton(gate):
        try:
            return triton_kernels.launch_forward(*_kernel_operands(gate, up, out), approximate)
        except KernelUnavailable as error:
            _warn_of_fallback(error)
    torch_fallback.forward_into(gate, up, out, approximate)


def _backward_into(grad_out, gate, up, grad_gate, grad_up, approximate: str, out=None) -> None:
    """Both gradients; with ``out``, the forward's result written again in the same pass."""
    if gate.numel() == 0:
        return
    if _runs_on_triton(gate):
        tensors = (grad_out, gate, up, grad_gate, grad_up) + (() if out is None else (out,))
        try:
            return triton_kernels.launch_backward(*_kernel_operands(*tensors), approximate)
        except KernelUnavailable as error:
            _warn_of_fallback(error)
    torch_fallback.backward_into(grad_out, gate, up, grad_gate, grad_up, approximate, out)


def _new_output(like: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor of ``like``'s shape, dtype and device."""
    return torch.empty_like(like, memory_format=torch.contiguous_format)


def _halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of [gate | up]: x's last dimension is even (checks.check_concat), so the two chunks are equal."""
    return x.chunk(2, dim=-1)


# --- implementations, shared by the registered ops and the eager Functions ---


def geglu_impl(gate: torch.Tensor, up: torch.Tensor, approximate: str) -> torch.Tensor:
    out = _new_output(gate)
    _forward_into(gate, up, out, approximate)
    return out


def geglu_backward_impl(grad_out, gate, up, approximate: str) -> tuple[torch.Tensor, torch.Tensor]:
    grad_gate, grad_up = _new_output(gate), _new_output(up)
    _backward_into(grad_out, gate, up, grad_gate, grad_up, approximate)
    return grad_gate, grad_up


def geglu_backward_with_output_impl(grad_out, gate, up, approximate: str) -> tuple[torch.Tensor, ...]:
    grad_gate, grad_up, out = _new_output(gate), _new_output(up), _new_output(gate)
    _backward_into(grad_out, gate, up, grad_gate, grad_up, approximate, out)
    return grad_gate, grad_up, out


def geglu_concat_impl(x: torch.Tensor, approximate: str) -> torch.Tensor:
    gate, up = _halves(x)
    out = _new_output(gate)
    _forward_into(gate, up, out, approximate)
    return out


def geglu_concat_backward_impl(grad_out, x, approximate: str) -> torch.Tensor:
    grad_x = _new_output(x)
    _backward_into(grad_out, *_halves(x), *_halves(grad_x), approximate)
    return grad_x


def _table_launch(x, weight, up_weight, bias, up_bias, approximate: str):
    """The GEMM kernel's launch for x through ``weight`` (gated with ``up_weight``, plain where it is None), or
    None where the kernel does not run: off Triton, for a call that the device's table gives no class (see
    ``triton_gemm_kernels.table_launch``), through weights whose rows are not contiguous, or for an x without a
    row view. A non-contiguous x is read from its own pointer with its row view's stride.

    This is the decode path: each operand is read once, and the token cap goes first, where it rejects prefill
    cheapest. Contiguous operands (a decode call's: nn.Linear's weights, a fresh x) take one test each, and the
    launch is then looked up on x's shape.
    """
    if not _runs_on_triton(x):
        return None
    gemm, gated = triton_gemm_kernels, up_weight is not None
    n_in, n_elements = x.shape[-1], x.numel()
    if not 0 < n_elements <= (gemm.FUSED_MAX_TOKENS if gated else gemm.DOWN_PROJ_MAX_TOKENS) * n_in:
        return None
    strides = None
    if not (x.is_contiguous() and weight.is_contiguous() and (not gated or up_weight.is_contiguous())):
        rows, up = _row_view(x), up_weight if gated else weight  # plain: the up pointer is the weight's, unread
        if rows is None or weight.stride(-1) != 1 or up.stride(-1) != 1:
            return None
        strides = (rows.stride(0), weight.stride(0), up.stride(0))
    has_biases = (bias is not None, up_bias is not None)
    return gemm.table_launch(x.shape, weight.shape[0], strides, x.dtype, x.get_device(), gated, approximate, *has_biases)


def geglu_linear_impl(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    gate_bias: Optional[torch.Tensor],
    up_bias: Optional[torch.Tensor],
    approximate: str,
) -> torch.Tensor:
    """gelu(x W_gate^T + b_gate) * (x W_up^T + b_up).

    One fused GEMM where it runs: on Triton devices, bf16/fp16, weights with
    contiguous rows (as nn.Linear's are), x with a row view, and where the
    device's launch table says it beats two GEMMs and the activation kernel
    for this many tokens and weights of this size.
    Otherwise (or where Triton cannot compile it for the device) two GEMMs
    and the activation kernel (or its PyTorch fallback).
    """
    launch = _table_launch(x, gate_weight, up_weight, gate_bias, up_bias, approximate)
    if launch is not None:
        out = x.new_empty(launch.out_shape)
        try:
            triton_gemm_kernels.launch_gemm(launch, x, gate_weight, up_weight, gate_bias, up_bias, out)
            return out
        except KernelUnavailable as error:
            _warn_of_fallback(error)
    gate = F.linear(x, gate_weight, gate_bias)
    # The GeGLU written over gate where it has x's dtype (not so under autocast) and is contiguous (as GEMMs
    # write it; a strided one would be written through a copy, and lost): each element is read before it is
    # written, by the same thread, and one [tokens, intermediate] allocation is saved.
    in_place = gate.dtype == x.dtype and gate.is_contiguous()
    out = gate if in_place else torch.empty_like(gate, dtype=x.dtype, memory_format=torch.contiguous_format)
    _forward_into(gate, F.linear(x, up_weight, up_bias), out, approximate)
    return out


def linear_impl(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``F.linear(x, weight, bias)``: the GEMM kernel's plain form where the down projection's table has a
    configuration for this many tokens and this weight (one token, a weight of Gemma3 4B's size or less),
    in bf16/fp16, for a weight with contiguous rows; otherwise (or where Triton cannot compile it for the
    device) cuBLAS through ``F.linear``. Where it runs it takes about cuBLAS's GEMV's GPU time (0.83-1.03x) and less
    host time (docs/PERFORMANCE.md, v14 and v28's corrections).
    """
    launch = _table_launch(x, weight, None, bias, None, "none")
    if launch is not None:
        out = x.new_empty(launch.out_shape)
        try:
            triton_gemm_kernels.launch_gemm(launch, x, weight, weight, bias, None, out)
            return out
        except KernelUnavailable as error:
            _warn_of_fallback(error)
    return F.linear(x, weight, bias)


def geglu_mlp_impl(x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias, approximate: str):
    """down_proj(gelu(x W_gate^T + b_gate) * (x W_up^T + b_up)): ``geglu_linear_impl``, then ``linear_impl``."""
    return linear_impl(geglu_linear_impl(x, gate_weight, up_weight, gate_bias, up_bias, approximate), down_weight, down_bias)


def geglu_down_proj_impl(gate, up, down_weight, down_bias, approximate: str) -> torch.Tensor:
    """down_proj(geglu(gate, up)); the GeGLU output is freed as soon as the GEMM has read it."""
    return F.linear(geglu_impl(gate, up, approximate), down_weight, down_bias)


def geglu_down_proj_grads(
    grad_y, gate, up, down_weight, needs_grad, approximate: str, forward, backward, backward_with_output
):
    """Gradients of (gate, up, down_weight, down_bias) of y = geglu(gate, up) @ down_weight^T + down_bias.

    grad_h = grad_y @ down_weight, as down_proj's autograd computes it; then one
    pass of the backward kernel gives grad_gate and grad_up and, when the weight
    gradient is wanted, h (recomputed from gate and up, bit for bit the
    forward's), for grad_down_weight = grad_y^T h. The weight gradient alone
    needs h only, from the forward kernel. ``forward``, ``backward`` and
    ``backward_with_output`` are the ops or their implementations. What is
    not needed may be None (``saved_for_down_proj``).
    """
    needs_gate_up, needs_weight, needs_bias = needs_grad[0] or needs_grad[1], needs_grad[2], needs_grad[3]
    grad_gate = grad_up = grad_weight = grad_bias = None
    if needs_gate_up:
        grad_h = grad_y.matmul(down_weight)
        if needs_weight:
            grad_gate, grad_up, h = backward_with_output(grad_h, gate, up, approximate)
        else:
            grad_gate, grad_up = backward(grad_h, gate, up, approximate)
        del grad_h  # one [tokens, intermediate] tensor less while the weight gradient is computed
    elif needs_weight:
        h = forward(gate, up, approximate)
    if needs_weight:
        grad_weight = _rows(grad_y).t().matmul(_rows(h))
    if needs_bias:
        grad_bias = _rows(grad_y).sum(0)
    return grad_gate, grad_up, grad_weight, grad_bias


def saved_for_down_proj(gate, up, down_weight, needs_gate_up: bool, needs_down_weight: bool) -> tuple:
    """What ``geglu_down_proj_grads`` needs of (gate, up, down_weight), the rest None: gate and up for any gradient
    but the bias's (h is recomputed from them), the weight for gate's and up's. As eager's ``linear`` saves its
    weight only for its input's gradient: a frozen weight updated in place before the backward (an EMA, a
    re-quantization) or made under ``torch.inference_mode`` is not saved where no gradient needs it."""
    keeps_gate_up = needs_gate_up or needs_down_weight
    return (
        _saveable(gate) if keeps_gate_up else None,
        _saveable(up) if keeps_gate_up else None,
        down_weight if needs_gate_up else None,
    )


def _byte_span(tensor: torch.Tensor) -> tuple[int, int]:
    """[first, last + 1) byte addresses the tensor's elements occupy."""
    last_offset = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr(), tensor.data_ptr() + (last_offset + 1) * tensor.element_size()


def _may_share_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the byte spans of two non-empty tensors meet (interleaved views meet without sharing an element)."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    a_start, a_end = _byte_span(a)
    b_start, b_end = _byte_span(b)
    return a_start < b_end and b_start < a_end


def geglu_concat_out_impl(out: torch.Tensor, x: torch.Tensor, approximate: str) -> None:
    # Written in place only where out has a row view and cannot alias x (out over some of x's elements would
    # overwrite them before they are read); otherwise computed apart, then copied in.
    if _row_view(out) is not None and not _may_share_memory(out, x):
        _forward_into(*_halves(x), out, approximate)
    else:
        out.copy_(geglu_concat_impl(x, approximate))


# --- registered ops: what torch.compile, export and opcheck see -------------


@torch.library.custom_op(add_op_namespace_prefix("geglu"), mutates_args=())
def geglu(gate: torch.Tensor, up: torch.Tensor, approximate: str) -> torch.Tensor:
    return geglu_impl(gate, up, approximate)


@geglu.register_fake
def _(gate, up, approximate):
    return gate.new_empty(gate.shape)


@torch.library.custom_op(add_op_namespace_prefix("geglu_backward"), mutates_args=())
def geglu_backward(
    grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, approximate: str
) -> tuple[torch.Tensor, torch.Tensor]:
    return geglu_backward_impl(grad_out, gate, up, approximate)


@geglu_backward.register_fake
def _(grad_out, gate, up, approximate):
    return gate.new_empty(gate.shape), up.new_empty(up.shape)


def _saveable(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, or a copy where it is an inference tensor (made under torch.inference_mode), which autograd does
    not save: eager's GeGLU saves what it computed (gelu(gate), h), so there such an input trains the other's."""
    return tensor.clone() if tensor.is_inference() else tensor


def _geglu_setup_context(ctx, inputs, output):
    gate, up, approximate = inputs
    ctx.save_for_backward(_saveable(gate), _saveable(up))
    ctx.approximate = approximate


def _geglu_autograd(ctx, grad_out):
    gate, up = ctx.saved_tensors
    grad_gate, grad_up = geglu_backward(grad_out, gate, up, ctx.approximate)
    return grad_gate, grad_up, None


geglu.register_autograd(_geglu_autograd, setup_context=_geglu_setup_context)


@torch.library.custom_op(add_op_namespace_prefix("geglu_concat"), mutates_args=())
def geglu_concat(x: torch.Tensor, approximate: str) -> torch.Tensor:
    return geglu_concat_impl(x, approximate)


@geglu_concat.register_fake
def _(x, approximate):
    return x.new_empty(concat_output_shape(x))


@torch.library.custom_op(add_op_namespace_prefix("geglu_concat_backward"), mutates_args=())
def geglu_concat_backward(grad_out: torch.Tensor, x: torch.Tensor, approximate: str) -> torch.Tensor:
    return geglu_concat_backward_impl(grad_out, x, approximate)


@geglu_concat_backward.register_fake
def _(grad_out, x, approximate):
    return x.new_empty(x.shape)


def _geglu_concat_setup_context(ctx, inputs, output):
    x, approximate = inputs
    ctx.save_for_backward(x)
    ctx.approximate = approximate


def _geglu_concat_autograd(ctx, grad_out):
    (x,) = ctx.saved_tensors
    return geglu_concat_backward(grad_out, x, ctx.approximate), None


geglu_concat.register_autograd(_geglu_concat_autograd, setup_context=_geglu_concat_setup_context)


@torch.library.custom_op(add_op_namespace_prefix("geglu_concat_out"), mutates_args=("out",))
def geglu_concat_out(out: torch.Tensor, x: torch.Tensor, approximate: str) -> None:
    geglu_concat_out_impl(out, x, approximate)


@geglu_concat_out.register_fake
def _(out, x, approximate):
    return None


@torch.library.custom_op(add_op_namespace_prefix("geglu_linear"), mutates_args=())
def geglu_linear(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    gate_bias: Optional[torch.Tensor],
    up_bias: Optional[torch.Tensor],
    approximate: str,
) -> torch.Tensor:
    """Inference only: no autograd formula (functional.geglu_linear takes another path when a gradient is needed)."""
    return geglu_linear_impl(x, gate_weight, up_weight, gate_bias, up_bias, approximate)


@geglu_linear.register_fake
def _(x, gate_weight, up_weight, gate_bias, up_bias, approximate):
    return x.new_empty(linear_output_shape(x, gate_weight))


@torch.library.custom_op(add_op_namespace_prefix("geglu_mlp"), mutates_args=())
def geglu_mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    gate_bias: Optional[torch.Tensor],
    up_bias: Optional[torch.Tensor],
    down_bias: Optional[torch.Tensor],
    approximate: str,
) -> torch.Tensor:
    """Inference only: no autograd formula (functional.geglu_mlp takes another path when a gradient is needed)."""
    return geglu_mlp_impl(x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias, approximate)


@geglu_mlp.register_fake
def _(x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias, approximate):
    return x.new_empty(linear_output_shape(x, down_weight))


@torch.library.custom_op(add_op_namespace_prefix("geglu_backward_with_output"), mutates_args=())
def geglu_backward_with_output(
    grad_out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, approximate: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return geglu_backward_with_output_impl(grad_out, gate, up, approximate)


@geglu_backward_with_output.register_fake
def _(grad_out, gate, up, approximate):
    return gate.new_empty(gate.shape), up.new_empty(up.shape), gate.new_empty(gate.shape)


SECOND_DERIVATIVES_REFUSED = (
    "fused-geglu computes first derivatives only: backward with create_graph=True (a gradient penalty, a Hessian "
    "product) needs the module's own forward or eager PyTorch"
)


def _refuse_second_derivatives(ctx, *grads):
    raise RuntimeError(SECOND_DERIVATIVES_REFUSED)


# The backward ops, differentiated again (create_graph=True through the registered ops' route): the eager
# Functions' message (_first_derivative_only), in place of torch's "no autograd formula was registered".
for _backward_op in (geglu_backward, geglu_concat_backward, geglu_backward_with_output):
    _backward_op.register_autograd(_refuse_second_derivatives, setup_context=lambda ctx, inputs, output: None)


@torch.library.custom_op(add_op_namespace_prefix("geglu_down_proj"), mutates_args=())
def geglu_down_proj(
    gate: torch.Tensor, up: torch.Tensor, down_weight: torch.Tensor, down_bias: Optional[torch.Tensor], approximate: str
) -> torch.Tensor:
    return geglu_down_proj_impl(gate, up, down_weight, down_bias, approximate)


@geglu_down_proj.register_fake
def _(gate, up, down_weight, down_bias, approximate):
    return gate.new_empty(linear_output_shape(gate, down_weight))


def _geglu_down_proj_setup_context(ctx, inputs, output):
    gate, up, down_weight, _, approximate = inputs
    needs = ctx.needs_input_grad
    ctx.save_for_backward(*saved_for_down_proj(gate, up, down_weight, needs[0] or needs[1], needs[2]))
    ctx.approximate = approximate


def _geglu_down_proj_autograd(ctx, grad_y):
    gate, up, down_weight = ctx.saved_tensors
    grads = geglu_down_proj_grads(
        grad_y, gate, up, down_weight, ctx.needs_input_grad, ctx.approximate, geglu, geglu_backward,
        geglu_backward_with_output,
    )
    return (*grads, None)


geglu_down_proj.register_autograd(_geglu_down_proj_autograd, setup_context=_geglu_down_proj_setup_context)


# --- the eager path ------------------------------------------------------------
# A registered op costs tens of microseconds of Python per call in eager mode
# (dispatcher round trips, its autograd wrapper, Dynamo's disable guard): more
# than the kernel itself at decode sizes (benchmarks/host_overhead.py). Outside
# torch.compile the public functions therefore call the implementations
# directly, through these Functions when a gradient is needed. Their backwards
# run Triton kernels that autograd cannot differentiate again.


def _first_derivative_only(backward):
    """A Function's backward: first derivatives, in the dtypes the forward saved, on plain tensors.

    It refuses ``create_graph=True`` (autograd runs backward in grad mode only
    then): torch's ``once_differentiable`` raises only when a gradient flowing
    in requires grad; for ``torch.autograd.grad(y.sum(), x, create_graph=True)``
    it returned gradients that autograd saw as constants, so a gradient
    penalty built on them silently contributed nothing. It refuses batched
    gradients too (``is_grads_batched=True``, ``jacobian(vectorize=True)``: the
    backward under vmap, whose batched tensors have no memory for the kernels
    to read), by name. And it runs with autocast off: a backward called inside
    an autocast region whose forward ran outside it computes in the saved
    dtypes, not in a mix of them and autocast's (eager's runs its GEMMs in
    autocast's dtype there; ours is as close to the exact gradients or closer).
    """

    @functools.wraps(backward)
    def first_derivative(ctx, *grad_outputs):
        if torch.is_grad_enabled():
            raise RuntimeError(SECOND_DERIVATIVES_REFUSED)
        if batched_backward(grad_outputs):
            raise UnsupportedTransform(
                "fused-geglu's backward does not support batched gradients (is_grads_batched=True, "
                "jacobian(vectorize=True)) or other torch.func transforms: use the module's own forward or eager PyTorch"
            )
        with torch.autocast(grad_outputs[0].device.type, enabled=False):
            return backward(ctx, *grad_outputs)

    return first_derivative


class GeGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up, approximate):
        _geglu_setup_context(ctx, (gate, up, approximate), None)  # what the registered op keeps
        return geglu_impl(gate, up, approximate)

    @staticmethod
    @_first_derivative_only
    def backward(ctx, grad_out):
        gate, up = ctx.saved_tensors
        return (*geglu_backward_impl(grad_out, gate, up, ctx.approximate), None)


class GeGLUConcatFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, approximate):
        ctx.save_for_backward(x)
        ctx.approximate = approximate
        return geglu_concat_impl(x, approximate)

    @staticmethod
    @_first_derivative_only
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return geglu_concat_backward_impl(grad_out, x, ctx.approximate), None


class GeGLUDownProjFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up, down_weight, down_bias, approximate):
        _geglu_down_proj_setup_context(ctx, (gate, up, down_weight, down_bias, approximate), None)
        return geglu_down_proj_impl(gate, up, down_weight, down_bias, approximate)

    @staticmethod
    @_first_derivative_only
    def backward(ctx, grad_y):
        gate, up, down_weight = ctx.saved_tensors
        grads = geglu_down_proj_grads(
            grad_y,
            gate,
            up,
            down_weight,
            ctx.needs_input_grad,
            ctx.approximate,
            geglu_impl,
            geglu_backward_impl,
            geglu_backward_with_output_impl,
        )
        return (*grads, None)


class GeGLUMLPFunction(torch.autograd.Function):
    """y = down_proj(geglu(gate_proj(x), up_proj(x))) with three plain projections, as one autograd step.

    Saves what the gradients asked for need, as eager's projections save it:
    gate and up for any but the down bias's, not the GeGLU output h
    (``geglu_down_proj_grads`` recomputes it); x where a projection's weight
    needs its gradient; the gate and up weights where x needs its own; the
    down weight where gate's and up's are needed. The backward sums the two
    projections' input gradients inside their second GEMM: grad_x = grad_gate
    W_gate, then grad_x += grad_up W_up as cuBLAS's beta = 1 epilogue, where
    autograd would write both products and add them in a kernel of its own
    (three [tokens, hidden] passes; 12.9 us a layer for Gemma3 1B's MLP at 8 x
    1024 tokens on the H200, PERFORMANCE v17). The sum is rounded to the dtype
    twice (the first product, then the sum), where autograd rounds three times
    (each product, then their sum).
    """

    @staticmethod
    def forward(ctx, x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias, approximate):
        gate, up = F.linear(x, gate_weight, gate_bias), F.linear(x, up_weight, up_bias)
        needs_x, needs_gate_weight, needs_up_weight, needs_down_weight, needs_gate_bias, needs_up_bias, _ = (
            ctx.needs_input_grad[:7]
        )
        needs_gate_up = needs_x or needs_gate_weight or needs_up_weight or needs_gate_bias or needs_up_bias
        ctx.save_for_backward(
            x if needs_gate_weight or needs_up_weight else None,
            *saved_for_down_proj(gate, up, down_weight, needs_gate_up, needs_down_weight),
            gate_weight if needs_x else None,
            up_weight if needs_x else None,
        )
        ctx.approximate = approximate
        return geglu_down_proj_impl(gate, up, down_weight, down_bias, approximate)

    @staticmethod
    @_first_derivative_only
    def backward(ctx, grad_y):
        x, gate, up, down_weight, gate_weight, up_weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        needs_x, needs_gate_weight, needs_up_weight, needs_down_weight, needs_gate_bias, needs_up_bias = needs[:6]
        needs_down_bias = needs[6]
        needs_gate_up = needs_x or needs_gate_weight or needs_up_weight or needs_gate_bias or needs_up_bias
        grad_gate, grad_up, grad_down_weight, grad_down_bias = geglu_down_proj_grads(
            grad_y,
            gate,
            up,
            down_weight,
            (needs_gate_up, needs_gate_up, needs_down_weight, needs_down_bias),
            ctx.approximate,
            geglu_impl,
            geglu_backward_impl,
            geglu_backward_with_output_impl,
        )
        grad_x = grad_gate_weight = grad_up_weight = grad_gate_bias = grad_up_bias = None
        if needs_x:
            grad_x = grad_gate.matmul(gate_weight)
            _rows(grad_x).addmm_(_rows(grad_up), up_weight)  # grad_x is contiguous: its rows are a view
        if needs_gate_weight:
            grad_gate_weight = _rows(grad_gate).t().matmul(_rows(x))
        if needs_up_weight:
            grad_up_weight = _rows(grad_up).t().matmul(_rows(x))
        if needs_gate_bias:
            grad_gate_bias = _rows(grad_gate).sum(0)
        if needs_up_bias:
            grad_up_bias = _rows(grad_up).sum(0)
        return (
            grad_x,
            grad_gate_weight,
            grad_up_weight,
            grad_down_weight,
            grad_gate_bias,
            grad_up_bias,
            grad_down_bias,
            None,
        )
