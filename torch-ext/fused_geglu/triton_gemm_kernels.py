"""Triton kernel for the first half of a GeGLU MLP: both projections and the GeGLU in one GEMM.

    h = gelu(x @ W_gate^T + b_gate) * (x @ W_up^T + b_up)

x is [M, K] (tokens x hidden), W_gate and W_up are ``nn.Linear`` weights
[N, K] (intermediate x hidden), h is [M, N]. Eager PyTorch runs two GEMMs
that each write an [M, N] tensor to HBM, then reads both back for the GELU
and the multiply. Here one program computes one [BLOCK_M, BLOCK_N] tile of h:
it streams the matching rows of both weights past the same x tile into two
fp32 accumulators and writes h alone. The weights are read where they are:
two separate ``nn.Linear`` weights, or the two halves of a fused
``gate_up_proj`` weight, with no concatenated copy.

Tiling
------
Each step of the K loop loads an x tile [BLOCK_M, BLOCK_K] and the two weight
tiles [BLOCK_N, BLOCK_K] (rows of W, contiguous along K: 16-byte loads) and
feeds both products to the tensor cores through ``tl.dot`` (bf16/fp16
operands, fp32 accumulation; on Hopper, wgmma where the tile allows).
``num_stages`` is how many K steps Triton's pipeliner keeps in flight.
Rows and columns past the end of x and W are clamped onto valid ones, so the
loads need no row or column mask; the final store drops those results.

The launch tables (``device_tables.GEMM_TABLES``, one per shared-memory
class of device) have these token classes:

- decode (a few tokens): each weight is read once and each weight byte
  meets at most a few tokens, so the kernel streams weights and is
  memory-bound. BLOCK_M is the smallest tile ``tl.dot`` takes (16) and
  BLOCK_N is small, giving several programs per SM to keep HBM busy.
- mid (up to 64 tokens) and prefill: compute-bound. Larger tiles; programs
  run in groups of GROUP_M row tiles that share each weight tile while it
  is in L2. Past 64 tokens two cuBLAS GEMMs are faster on GPUs
  (``FUSED_MAX_TOKENS``); the prefill class runs under the interpreter and
  for tuning.

Rounding points
---------------
Eager's projections return bf16/fp16, so it rounds each accumulator (bias
added in fp32) to the storage dtype before the GELU; the epilogue rounds at
the same point and then computes the GeGLU exactly as the activation kernel
does. h then differs from eager's only through the GEMMs' order of
accumulation.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch
import triton
import triton.language as tl

from .device_tables import FUSED_MAX_TOKENS, GemmConfig, describe_device, gemm_config
from .triton_kernels import RUNS_INTERPRETED, geglu_rounded_like_eager, needs_int64_offsets, round_to
from .triton_launcher import Launcher, LaunchOptions

#: Storage dtypes the fused GEMM runs (tensor-core operands; fp32 would need
#: tf32 or a slow exact dot, so fp32 takes cuBLAS and the activation kernel).
FUSED_DTYPES = (torch.bfloat16, torch.float16)


@triton.jit(do_not_specialize=["n_tokens"])
def geglu_linear_kernel(
    x_ptr,
    gate_weight_ptr,
    up_weight_ptr,
    gate_bias_ptr,
    up_bias_ptr,
    out_ptr,
    n_tokens,
    n_out,
    n_in,
    x_row_stride,
    gate_weight_row_stride,
    up_weight_row_stride,
    out_row_stride,
    APPROXIMATE_TANH: tl.constexpr,
    HAS_GATE_BIAS: tl.constexpr,
    HAS_UP_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    INT64_OFFSETS: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of h = gelu(x W_gate^T + b_gate) * (x W_up^T + b_up).

    ``n_tokens`` is not specialized on, so a new token count never compiles
    a new variant.
    """
    # Program -> tile, in groups of GROUP_M row tiles: the programs of a group
    # walk the same column tiles (weight rows) one after another.
    pid = tl.program_id(0)
    row_tiles = tl.cdiv(n_tokens, BLOCK_M)
    col_tiles = tl.cdiv(n_out, BLOCK_N)
    programs_per_group = GROUP_M * col_tiles
    first_row_tile = (pid // programs_per_group) * GROUP_M
    group_rows = tl.minimum(row_tiles - first_row_tile, GROUP_M)
    row_tile = first_row_tile + (pid % programs_per_group) % group_rows
    col_tile = (pid % programs_per_group) // group_rows

    rows = row_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = col_tile * BLOCK_N + tl.arange(0, BLOCK_N)
    if INT64_OFFSETS:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    # Clamped onto valid rows of x and W: in-bounds loads with no row mask.
    x_rows = rows % n_tokens
    weight_rows = cols % n_out
    x_ptrs = x_ptr + x_rows[:, None] * x_row_stride + ks[None, :]
    gate_weight_ptrs = gate_weight_ptr + weight_rows[:, None] * gate_weight_row_stride + ks[None, :]
    up_weight_ptrs = up_weight_ptr + weight_rows[:, None] * up_weight_row_stride + ks[None, :]

    # Both projections over the same x tiles: x is loaded once for two dots.
    acc_gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, n_in, BLOCK_K):
        in_k = ks[None, :] < n_in - k_start  # only the last step of a K that BLOCK_K does not divide masks anything
        x = tl.load(x_ptrs, mask=in_k, other=0.0)
        gate_weight = tl.load(gate_weight_ptrs, mask=in_k, other=0.0)
        up_weight = tl.load(up_weight_ptrs, mask=in_k, other=0.0)
        if INTERPRETED:  # see triton_kernels.RUNS_INTERPRETED
            x, gate_weight, up_weight = x.to(tl.float32), gate_weight.to(tl.float32), up_weight.to(tl.float32)
        acc_gate = tl.dot(x, tl.trans(gate_weight), acc_gate)
        acc_up = tl.dot(x, tl.trans(up_weight), acc_up)
        x_ptrs += BLOCK_K
        gate_weight_ptrs += BLOCK_K
        up_weight_ptrs += BLOCK_K

    # Epilogue: bias in fp32, then the projections rounded to the storage
    # dtype as eager's GEMMs return them, then eager's rounded GeGLU.
    if HAS_GATE_BIAS:
        acc_gate += tl.load(gate_bias_ptr + weight_rows).to(tl.float32)[None, :]
    if HAS_UP_BIAS:
        acc_up += tl.load(up_bias_ptr + weight_rows).to(tl.float32)[None, :]
    dtype = out_ptr.dtype.element_ty
    gate = round_to(acc_gate, dtype, INTERPRETED).to(tl.float32)
    up = round_to(acc_up, dtype, INTERPRETED).to(tl.float32)
    h = geglu_rounded_like_eager(gate, up, dtype, APPROXIMATE_TANH, INTERPRETED)
    mask = (rows < n_tokens)[:, None] & (cols < n_out)[None, :]
    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], h, mask=mask)


def fused_pays_off(n_tokens: int) -> bool:
    """Whether the fused kernel is the faster path for this many tokens.

    Under the interpreter it always runs, so that the CPU tests exercise it.
    """
    return RUNS_INTERPRETED or n_tokens <= FUSED_MAX_TOKENS


@functools.lru_cache(maxsize=256)
def fused_config(n_tokens: int, device_index: int) -> Optional[GemmConfig]:
    """The configuration to run the fused kernel with for this many tokens on this device, or None where it should not run.

    It runs where it pays off and the device has a launch table (enough
    shared memory). ``device_index`` is a tensor's ``get_device()`` (-1: the
    interpreter). Cached on the two integers: one lookup per call.
    """
    return gemm_config(n_tokens, describe_device(device_index)) if fused_pays_off(n_tokens) else None


@functools.lru_cache(maxsize=1024)
def _launch_plan(
    n_tokens: int,
    n_out: int,
    n_in: int,
    strides: tuple[int, int, int, int],
    config: GemmConfig,
    approximate: str,
    has_gate_bias: bool,
    has_up_bias: bool,
) -> tuple[tuple[int, int, int], LaunchOptions]:
    """Grid and constexprs of one launch (cached: one lookup per call, no Python arithmetic on the way)."""
    matrices = ((n_tokens, n_in), (n_out, n_in), (n_out, n_in), (n_tokens, n_out))
    int64_offsets = needs_int64_offsets(*((rows, cols, stride) for (rows, cols), stride in zip(matrices, strides)))
    options = LaunchOptions(
        constexprs=(
            ("APPROXIMATE_TANH", approximate == "tanh"),
            ("HAS_GATE_BIAS", has_gate_bias),
            ("HAS_UP_BIAS", has_up_bias),
            ("BLOCK_M", config.block_m),
            ("BLOCK_N", config.block_n),
            ("BLOCK_K", config.block_k),
            ("GROUP_M", config.group_m),
            ("INT64_OFFSETS", int64_offsets),
            ("INTERPRETED", RUNS_INTERPRETED),
        ),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    grid = (triton.cdiv(n_tokens, config.block_m) * triton.cdiv(n_out, config.block_n), 1, 1)
    return grid, options


_launch_geglu_linear_kernel = Launcher(geglu_linear_kernel)


def launch_geglu_linear(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    gate_bias: Optional[torch.Tensor],
    up_bias: Optional[torch.Tensor],
    out: torch.Tensor,
    approximate: str,
    config: GemmConfig,
) -> None:
    """out [..., N] = GeGLU of x [..., K] through the weights [N, K]; every matrix with unit column stride.

    x and out are each either 2-D [M, K] / [M, N] (any row stride) or
    contiguous with any leading shape (M = the product of the leading
    dimensions): the kernel reads them as [M, K] and [M, N] without a view.
    ``config``: from ``fused_config``, or any other (for tuning).
    """
    n_in, n_out = x.shape[-1], gate_weight.shape[0]
    n_tokens = out.numel() // n_out
    x_row_stride = x.stride(0) if x.dim() == 2 else n_in
    out_row_stride = out.stride(0) if out.dim() == 2 else n_out
    strides = (x_row_stride, gate_weight.stride(0), up_weight.stride(0), out_row_stride)
    grid, options = _launch_plan(
        n_tokens, n_out, n_in, strides, config, approximate, gate_bias is not None, up_bias is not None
    )
    # Without a bias the kernel never reads its pointer: pass out in its place.
    biases = (out if gate_bias is None else gate_bias, out if up_bias is None else up_bias)
    tensors = (x, gate_weight, up_weight, *biases, out)
    _launch_geglu_linear_kernel(grid, tensors, (n_tokens, n_out, n_in, *strides), options)
