"""Triton kernels for GeGLU, ``out = gelu(gate) * up``, and their launchers.

Both kernels are elementwise over a 2-D view ``[n_rows, n_cols]`` of their
tensors. Every tensor has its own row stride and a unit column stride, so the
two halves of a fused ``gate_up`` projection (``x[..., :n]`` and ``x[..., n:]``,
row stride ``2n``) are read in place. When every tensor is contiguous the
launcher passes a single row of ``numel`` elements instead: the tile then
never straddles a row end, and where ``numel`` is a multiple of 16 (Triton
specializes integer arguments on that) every access is a 16-byte vector,
whatever the width of the last dimension ([16, 4231], say).

Math happens in fp32 registers; loads and stores are in the tensors' dtype.

GELU and its derivative
-----------------------
exact ("none"):  gelu(x)  = x * Phi(x),   Phi(x) = (1 + erf(x / sqrt(2))) / 2
                 gelu'(x) = Phi(x) + x * phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)

tanh:            gelu(x)  = x * (1 + tanh(z)) / 2,   z = sqrt(2 / pi) * (x + 0.044715 x^3)
                 gelu'(x) = (1 + tanh(z)) / 2 + (x / 2) (1 - tanh(z)^2) dz/dx,
                 dz/dx = sqrt(2 / pi) * (1 + 3 * 0.044715 x^2).
                 tanh(z) = 2 sigmoid(2 z) - 1 needs only ``exp`` (``libdevice.tanh``
                 does not run under TRITON_INTERPRET=1). Both directions evaluate
                 these expressions as eager PyTorch's kernels do, term by term.

Rounding points
---------------
Eager PyTorch evaluates ``F.gelu(gate) * up`` as two kernels: the GELU result is
rounded to the input dtype, then the product is rounded again. The forward
kernel rounds at the same two points, so bf16/fp16 results match eager bit for
bit except where the fp32 GELU itself differs in its last bit (rare, and then
by one ulp).

The backward rounds where eager autograd rounds. Autograd of that expression
runs MulBackward (two multiplies in the dtype) then GeluBackward (one
``gelu_backward`` kernel, fp32 inside, rounded once):

    grad_up   = rnd(grad_out * rnd(gelu(gate)))    the GELU as the forward saved it
    grad_act  = rnd(grad_out * up)                 MulBackward's other product
    grad_gate = rnd(grad_act * gelu'(gate))        GeluBackward

so bf16/fp16 gradients track eager's as closely as the forward does (fp32:
every ``rnd`` is exact, and the gradients are fp32 math throughout). The
backward kernel can also write the forward's result ``rnd(rnd(gelu(gate)) * up)``
again, from the rounded GELU it already holds: the MLP's training path keeps
gate and up but not that product, and gets it back in the same pass for
``down_proj``'s weight gradient, bit for bit what the forward produced.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .device_tables import describe_device, elementwise_config
from .triton_launcher import RUNS_INTERPRETED, Launcher, LaunchOptions

# GELU constants, as constexpr globals so that compiled kernels may read them.
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)  # sqrt(2 / pi)
TANH_CUBIC_COEFF = tl.constexpr(0.044715)
# 3 x 0.044715 as ATen's gelu_backward computes it: a product of two fp32 values, rounded to fp32
# (0.13414499...). Folded here in double, 3.0 * TANH_CUBIC_COEFF would round to 0.134145, one fp32 ulp
# away, which moves gelu' by an ulp in about a fifth of the elements.
TANH_CUBIC_COEFF_TIMES_3 = tl.constexpr(0.13414499163627625)
INV_SQRT_2 = tl.constexpr(0.7071067811865476)  # 1 / sqrt(2)
INV_SQRT_2PI = tl.constexpr(0.3989422804014327)  # 1 / sqrt(2 pi)

# Offsets past this need 64-bit arithmetic (int32 index math would wrap).
INT32_OFFSET_LIMIT = 2**31

# Kernels take RUNS_INTERPRETED (triton_launcher) as their INTERPRETED constexpr
# and work around the interpreter's two bf16 gaps with it, so that interpreted
# and compiled kernels compute the same numbers: it truncates fp32 -> bf16 casts
# where compiled code rounds to nearest even (round_to rounds by hand), and
# its tl.dot misreads bf16 operands (the GEMM kernel widens them to fp32
# first, which changes nothing: a product of two bf16 values is exact in fp32).

@triton.jit
def _gelu(x, APPROXIMATE_TANH: tl.constexpr):
    """gelu(x) in fp32, exact (erf) or tanh-approximated, evaluated as eager PyTorch evaluates it.

    The forward's result must round like eager's, so it follows eager's
    expression, 0.5 x (1 + tanh(z)), with tanh(z) = 2 sigmoid(2 z) - 1 rounded
    to fp32 like tanhf: in the far negative tail 1 + tanh(z) then vanishes in
    fp32 exactly where eager's does.
    """
    if APPROXIMATE_TANH:
        z = SQRT_2_OVER_PI * (x + TANH_CUBIC_COEFF * (x * x * x))
        tanh_z = 2.0 * tl.sigmoid(2.0 * z) - 1.0
        return 0.5 * x * (1.0 + tanh_z)
    else:
        return 0.5 * x * (1.0 + tl.math.erf(x * INV_SQRT_2))


@triton.jit
def _gelu_and_derivative(x, APPROXIMATE_TANH: tl.constexpr):
    """(gelu(x), gelu'(x)) in fp32, sharing the tanh / erf between the two.

    Both follow eager's expressions term by term (gelu as ``_gelu`` does, gelu'
    as ATen's ``gelu_backward``), so that the backward rounds to eager's values
    wherever the fp32 tanh / erf agree, and otherwise differs by an ulp.
    """
    if APPROXIMATE_TANH:
        x_sq = x * x
        z = SQRT_2_OVER_PI * (x + TANH_CUBIC_COEFF * (x_sq * x))
        tanh_z = 2.0 * tl.sigmoid(2.0 * z) - 1.0
        left = 0.5 * x
        one_plus_tanh = 1.0 + tanh_z
        dz_dx = SQRT_2_OVER_PI * (1.0 + TANH_CUBIC_COEFF_TIMES_3 * x_sq)
        return left * one_plus_tanh, 0.5 * one_plus_tanh + left * (1.0 - tanh_z * tanh_z) * dz_dx
    else:
        one_plus_erf = 1.0 + tl.math.erf(x * INV_SQRT_2)
        pdf = INV_SQRT_2PI * tl.exp(-0.5 * x * x)
        return 0.5 * x * one_plus_erf, 0.5 * one_plus_erf + x * pdf


@triton.jit
def round_to(x, dtype: tl.constexpr, INTERPRETED: tl.constexpr):
    """x (fp32) rounded to nearest even in ``dtype``.

    Interpreted, bf16 is rounded by hand: add half a bf16 ulp (minus one, plus the kept lowest bit, so ties
    go to even) to the fp32 bits and drop the low 16 bits; NaNs pass unchanged.
    """
    if INTERPRETED and dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
        x = tl.where(x != x, x, bits.to(tl.float32, bitcast=True))
    return x.to(dtype)


@triton.jit
def geglu_rounded_like_eager(
    gate, up, dtype: tl.constexpr, APPROXIMATE_TANH: tl.constexpr, INTERPRETED: tl.constexpr
):
    """gelu(gate) * up in ``dtype``, from fp32 ``gate`` and ``up`` that already hold ``dtype`` values.

    Eager's ``F.gelu(gate) * up`` is two kernels, so it rounds twice: the
    GELU result to ``dtype`` (first rounding point), then the product
    (second). Rounding at the same two points gives eager's numbers.
    """
    activated = round_to(_gelu(gate, APPROXIMATE_TANH), dtype, INTERPRETED).to(tl.float32)
    return round_to(activated * up, dtype, INTERPRETED)


@triton.jit
def _tile(n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INT64_OFFSETS: tl.constexpr):
    """Row indices [BLOCK_M, 1], column indices [1, BLOCK_N] and bounds mask of this program's tile.

    The grid is one-dimensional (it has no 65,535 limit, unlike axes 1 and 2),
    with the column tiles of a row band adjacent, so neighbouring programs
    touch neighbouring memory.
    """
    pid = tl.program_id(0)
    if INT64_OFFSETS:
        pid = pid.to(tl.int64)
    col_tiles = tl.cdiv(n_cols, BLOCK_N)
    rows = (pid // col_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % col_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    return rows[:, None], cols[None, :], mask


@triton.jit
def geglu_forward_kernel(
    gate_ptr,
    up_ptr,
    out_ptr,
    n_rows,
    n_cols,
    gate_row_stride,
    up_row_stride,
    out_row_stride,
    APPROXIMATE_TANH: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    INT64_OFFSETS: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """out = gelu(gate) * up over one [BLOCK_M, BLOCK_N] tile."""
    rows, cols, mask = _tile(n_rows, n_cols, BLOCK_M, BLOCK_N, INT64_OFFSETS)
    gate = tl.load(gate_ptr + rows * gate_row_stride + cols, mask=mask).to(tl.float32)
    up = tl.load(up_ptr + rows * up_row_stride + cols, mask=mask).to(tl.float32)

    product = geglu_rounded_like_eager(gate, up, out_ptr.dtype.element_ty, APPROXIMATE_TANH, INTERPRETED)
    tl.store(out_ptr + rows * out_row_stride + cols, product, mask=mask)


@triton.jit
def geglu_backward_kernel(
    grad_out_ptr,
    gate_ptr,
    up_ptr,
    grad_gate_ptr,
    grad_up_ptr,
    out_ptr,
    n_rows,
    n_cols,
    grad_out_row_stride,
    gate_row_stride,
    up_row_stride,
    grad_gate_row_stride,
    grad_up_row_stride,
    out_row_stride,
    APPROXIMATE_TANH: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    INT64_OFFSETS: tl.constexpr,
    INTERPRETED: tl.constexpr,
    STORE_OUTPUT: tl.constexpr,
):
    """Both gradients of out = gelu(gate) * up in one pass over one tile, and with STORE_OUTPUT out itself.

    grad_up   = grad_out * gelu(gate)
    grad_gate = (grad_out * up) * gelu'(gate)
    rounded at eager autograd's points (module docstring, "Rounding points").
    """
    rows, cols, mask = _tile(n_rows, n_cols, BLOCK_M, BLOCK_N, INT64_OFFSETS)
    grad_out = tl.load(grad_out_ptr + rows * grad_out_row_stride + cols, mask=mask).to(tl.float32)
    gate = tl.load(gate_ptr + rows * gate_row_stride + cols, mask=mask).to(tl.float32)
    up = tl.load(up_ptr + rows * up_row_stride + cols, mask=mask).to(tl.float32)
    dtype = grad_gate_ptr.dtype.element_ty

    # The GELU as the forward rounded it (eager saves that tensor for MulBackward).
    activated, slope = _gelu_and_derivative(gate, APPROXIMATE_TANH)
    activated = round_to(activated, dtype, INTERPRETED).to(tl.float32)
    # MulBackward: two products, each rounded to the dtype.
    grad_up = round_to(grad_out * activated, dtype, INTERPRETED)
    grad_activated = round_to(grad_out * up, dtype, INTERPRETED).to(tl.float32)
    # GeluBackward: the rounded incoming gradient times gelu', rounded once.
    grad_gate = round_to(grad_activated * slope, dtype, INTERPRETED)
    tl.store(grad_up_ptr + rows * grad_up_row_stride + cols, grad_up, mask=mask)
    tl.store(grad_gate_ptr + rows * grad_gate_row_stride + cols, grad_gate, mask=mask)
    if STORE_OUTPUT:  # the forward's product again, rounded as geglu_rounded_like_eager rounds it
        out = round_to(activated * up, dtype, INTERPRETED)
        tl.store(out_ptr + rows * out_row_stride + cols, out, mask=mask)


def needs_int64_offsets(*matrices: tuple[int, int, int]) -> bool:
    """Whether an offset into these (n_rows, n_cols, row stride) matrices (one past the last) reaches 2^31."""
    return any((n_rows - 1) * row_stride + n_cols >= INT32_OFFSET_LIMIT for n_rows, n_cols, row_stride in matrices)


@functools.lru_cache(maxsize=4096)
def launch_plan(
    n_rows: int, n_cols: int, max_row_stride: int, element_size: int, approximate: str, warp_size: int
) -> tuple[tuple[int, int, int], LaunchOptions]:
    """Grid and constexprs of either kernel on [n_rows, n_cols] matrices (cached: one lookup per call)."""
    config = elementwise_config(n_rows, n_cols, element_size, warp_size)
    grid = (triton.cdiv(n_rows, config.block_m) * triton.cdiv(n_cols, config.block_n), 1, 1)
    options = LaunchOptions(
        constexprs=(
            ("APPROXIMATE_TANH", approximate == "tanh"),
            ("BLOCK_M", config.block_m),
            ("BLOCK_N", config.block_n),
            ("INT64_OFFSETS", needs_int64_offsets((n_rows, n_cols, max_row_stride))),
            ("INTERPRETED", RUNS_INTERPRETED),
        ),
        num_warps=config.num_warps,
    )
    return grid, options


_launch_forward_kernel = Launcher(geglu_forward_kernel)
_launch_backward_kernel = Launcher(geglu_backward_kernel)


def launch_forward(
    tensors: tuple[torch.Tensor, ...], n_rows: int, n_cols: int, row_strides: tuple[int, ...], approximate: str
) -> None:
    """The forward kernel on (gate, up, out), read as [n_rows, n_cols] with these row strides and unit column stride."""
    warp_size = describe_device(tensors[0].get_device()).warp_size
    grid, options = launch_plan(n_rows, n_cols, max(row_strides), tensors[0].element_size(), approximate, warp_size)
    _launch_forward_kernel(grid, tensors, (n_rows, n_cols, *row_strides), options)


@functools.lru_cache(maxsize=4096)
def _backward_plan(
    n_rows: int,
    n_cols: int,
    max_row_stride: int,
    element_size: int,
    approximate: str,
    warp_size: int,
    store_output: bool,
) -> tuple[tuple[int, int, int], LaunchOptions]:
    """``launch_plan`` with the backward kernel's last constexpr, STORE_OUTPUT (cached: one lookup per call)."""
    grid, options = launch_plan(n_rows, n_cols, max_row_stride, element_size, approximate, warp_size)
    constexprs = (*options.constexprs, ("STORE_OUTPUT", store_output))
    return grid, LaunchOptions(constexprs=constexprs, num_warps=options.num_warps, num_stages=options.num_stages)


def launch_backward(
    tensors: tuple[torch.Tensor, ...], n_rows: int, n_cols: int, row_strides: tuple[int, ...], approximate: str
) -> None:
    """The backward kernel on (grad_out, gate, up, grad_gate, grad_up[, out]), read as in ``launch_forward``.

    With a sixth tensor the kernel also writes the forward's result into it.
    """
    store_output = len(tensors) == 6
    if not store_output:  # the kernel never writes out_ptr: pass grad_up in its place
        tensors, row_strides = (*tensors, tensors[4]), (*row_strides, row_strides[4])
    warp_size = describe_device(tensors[0].get_device()).warp_size
    grid, options = _backward_plan(
        n_rows, n_cols, max(row_strides), tensors[0].element_size(), approximate, warp_size, store_output
    )
    _launch_backward_kernel(grid, tensors, (n_rows, n_cols, *row_strides), options)
