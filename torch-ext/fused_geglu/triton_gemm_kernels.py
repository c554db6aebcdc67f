"""Triton GEMM kernel for a GeGLU MLP's projections: the gated first half, and the down projection at decode.

Gated (``GATED=True``), the first half of the MLP: both projections and the GeGLU in one GEMM,

    h = gelu(x @ W_gate^T + b_gate) * (x @ W_up^T + b_up)

x is [M, K] (tokens x hidden), W_gate and W_up are ``nn.Linear`` weights
[N, K] (intermediate x hidden), h is [M, N]. Eager PyTorch runs two GEMMs
that each write an [M, N] tensor to HBM, then reads both back for the GELU
and the multiply. Here one program computes one [BLOCK_M, BLOCK_N] tile of h:
it streams the matching rows of both weights past the same x tile into two
fp32 accumulators and writes h alone. The weights are read where they are:
two separate ``nn.Linear`` weights, or the two halves of a fused
``gate_up_proj`` weight, with no concatenated copy.

Plain (``GATED=False``), the down projection of one token: y = h @ W_down^T + b_down,
with K = intermediate and N = hidden. It is a GEMV that streams one weight,
as the gated GEMM streams two, at cuBLAS's GPU time, and cuBLAS's call for it
costs more host time than this kernel's whole launch (docs/PERFORMANCE.md,
v13-v14); the second weight, its accumulator and the GeGLU compile out.

Tiling
------
Each step of the K loop loads an x tile [BLOCK_M, BLOCK_K] and the weight
tiles [BLOCK_N, BLOCK_K] (rows of W, contiguous along K: 16-byte loads) and
feeds the products to the tensor cores through ``tl.dot`` (bf16/fp16
operands, fp32 accumulation; on Hopper, wgmma where the tile allows).
``num_stages`` is how many K steps Triton's pipeliner keeps in flight.
Columns past the end of W are clamped onto valid rows of W, so its loads
need no row mask (only the K tail's); rows past the end of x are masked (a
clamped row would repeat a valid row's request); the final store drops
those results.

The launch tables (``device_tables``, one per shared-memory class of
device) have these token classes:

- decode (a few tokens): each weight is read once and each weight byte
  meets at most a few tokens, so the kernel streams weights and is
  memory-bound. BLOCK_M is the smallest tile ``tl.dot`` takes (16) and
  BLOCK_N is small, so that the N / BLOCK_N programs cover the SMs and keep
  HBM busy (one program per SM fits with 5 stages; small weights take 3
  stages, and two or three per SM). The down projection has a table of
  its own (``DOWN_PROJ_TABLES``), for one token: its N (hidden) is narrow
  and its K long, so a tile of 16 tokens leaves most SMs idle. There BLOCK_M is 1 (the GEMV form, see
  ``_multiply_accumulate``) and BLOCK_N 2: one program per two rows of the
  weight, thousands of programs whose loads go straight to registers.
- mid (17-64 tokens, and on small weights up to 256), gated only:
  compute-bound. Larger tiles; programs run in groups of GROUP_M row tiles
  that share each weight tile while it is in L2. Past the table's last class
  that serves a call, two cuBLAS GEMMs are faster on GPUs: past 64 tokens
  on most weights, past 128 or 256 on small ones (``device_tables``).

Rounding points
---------------
Eager's projections return bf16/fp16, so it rounds each accumulator (bias
added in fp32) to the storage dtype before the GELU; the epilogue rounds at
the same point and then computes the GeGLU exactly as the activation kernel
does. h then differs from eager's only through the GEMMs' order of
accumulation. The plain epilogue adds the bias in fp32 and rounds once, on
the store, as cuBLAS's epilogue does.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from .device_tables import (  # *_MAX_TOKENS: for ops, which imports this module only with triton
    DOWN_PROJ_MAX_TOKENS,  # noqa: F401
    FUSED_MAX_TOKENS,  # noqa: F401
    GemmConfig,
    describe_device,
    down_proj_gemm_config,
    gemm_config,
)
from .triton_kernels import geglu_rounded_like_eager, needs_int64_offsets, round_to
from .triton_launcher import RUNS_INTERPRETED, Launcher, LaunchOptions

#: Storage dtypes the fused GEMM runs (tensor-core operands; fp32 would need
#: tf32 or a slow exact dot, so fp32 takes cuBLAS and the activation kernel).
FUSED_DTYPES = (torch.bfloat16, torch.float16)


@triton.jit
def _multiply_accumulate(x, weight, acc, BLOCK_M: tl.constexpr):
    """acc + x @ weight^T for an x tile [BLOCK_M, BLOCK_K] and a weight tile [BLOCK_N, BLOCK_K].

    On the tensor cores (``tl.dot``, which takes 16 rows or more), except for
    one row (BLOCK_M == 1: one token, a GEMV), where each weight element is
    used once: products on the CUDA cores (exact in fp32 for bf16/fp16
    operands) summed along K, with no shared-memory layout for the dot.
    """
    if BLOCK_M == 1:
        return acc + tl.sum(x.to(tl.float32) * weight.to(tl.float32), axis=1)[None, :]
    return tl.dot(x, tl.trans(weight), acc)


@triton.jit(do_not_specialize=["n_tokens"])
def mlp_gemm_kernel(
    x_ptr,
    weight_ptr,
    up_weight_ptr,
    bias_ptr,
    up_bias_ptr,
    out_ptr,
    n_tokens,
    n_out,
    n_in,
    x_row_stride,
    weight_row_stride,
    up_weight_row_stride,
    out_row_stride,
    GATED: tl.constexpr,
    APPROXIMATE_TANH: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_UP_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    INT64_OFFSETS: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of out = gelu(x W^T + b) * (x W_up^T + b_up) (GATED), else of x W^T + b.

    Gated, ``weight``/``bias`` are the gate projection's; plain, the up
    pointers are never read. ``n_tokens`` is not specialized on, so a new
    token count never compiles a new variant.
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
    # Rows of W past n_out are clamped onto valid ones: in-bounds loads with no column mask. Rows of x past
    # n_tokens are masked instead (no memory request, zeros; the store drops them too): clamped, all 16 tile
    # rows of a one-token call would request the same x line, in every program at once.
    token_rows = (rows < n_tokens)[:, None]
    weight_rows = cols % n_out
    x_ptrs = x_ptr + rows[:, None] * x_row_stride + ks[None, :]
    weight_ptrs = weight_ptr + weight_rows[:, None] * weight_row_stride + ks[None, :]
    up_weight_ptrs = up_weight_ptr + weight_rows[:, None] * up_weight_row_stride + ks[None, :]

    # Gated: both projections over the same x tiles, x loaded once for two dots.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, n_in, BLOCK_K):
        in_k = ks[None, :] < n_in - k_start  # only the last step of a K that BLOCK_K does not divide masks anything
        x = tl.load(x_ptrs, mask=token_rows & in_k, other=0.0)
        weight = tl.load(weight_ptrs, mask=in_k, other=0.0)
        if INTERPRETED:  # see triton_kernels on RUNS_INTERPRETED
            x, weight = x.to(tl.float32), weight.to(tl.float32)
        acc = _multiply_accumulate(x, weight, acc, BLOCK_M)
        if GATED:
            up_weight = tl.load(up_weight_ptrs, mask=in_k, other=0.0)
            if INTERPRETED:
                up_weight = up_weight.to(tl.float32)
            acc_up = _multiply_accumulate(x, up_weight, acc_up, BLOCK_M)
            up_weight_ptrs += BLOCK_K
        x_ptrs += BLOCK_K
        weight_ptrs += BLOCK_K

    # Epilogue: bias in fp32. Gated: the projections rounded to the storage
    # dtype as eager's GEMMs return them, then eager's rounded GeGLU. Plain:
    # rounded once, by the store.
    if HAS_BIAS:
        acc += tl.load(bias_ptr + weight_rows).to(tl.float32)[None, :]
    dtype = out_ptr.dtype.element_ty
    if GATED:
        if HAS_UP_BIAS:
            acc_up += tl.load(up_bias_ptr + weight_rows).to(tl.float32)[None, :]
        gate = round_to(acc, dtype, INTERPRETED).to(tl.float32)
        up = round_to(acc_up, dtype, INTERPRETED).to(tl.float32)
        out = geglu_rounded_like_eager(gate, up, dtype, APPROXIMATE_TANH, INTERPRETED)
    else:
        out = round_to(acc, dtype, INTERPRETED)
    mask = token_rows & (cols < n_out)[None, :]
    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], out, mask=mask)


def fused_config(n_tokens: int, weight_bytes: int, device_index: int) -> Optional[GemmConfig]:
    """The configuration to run the fused kernel with for this many tokens through weights of this size
    (one projection's) on this device, or None where it should not run.

    It runs where the device's launch table has a class for the call: where
    the device has enough shared memory, and the fused kernel beats two
    cuBLAS GEMMs and the activation kernel. ``device_index`` is a tensor's
    ``get_device()`` (-1: the interpreter, which runs the H200's table).
    """
    return gemm_config(n_tokens, weight_bytes, describe_device(device_index))


def down_proj_config(n_tokens: int, weight_bytes: int, device_index: int) -> Optional[GemmConfig]:
    """The plain form's configuration for a down projection of this many tokens through a weight of this size,
    or None: cuBLAS runs it.

    Only one token has one, for small weights (``device_tables.DOWN_PROJ_TABLES``), on every device
    (the interpreter's included, so that the CPU tests exercise it).
    """
    return down_proj_gemm_config(n_tokens, weight_bytes, describe_device(device_index))


class GemmLaunch(NamedTuple):
    """One call's launch of ``mlp_gemm_kernel``: the shape of the output it writes, its grid, its integer
    arguments (n_tokens, n_out, n_in, then the row strides of x, the weight, the up weight and out) and its
    constexprs and launch options."""

    out_shape: tuple[int, ...]
    grid: tuple[int, int, int]
    scalars: tuple[int, ...]
    options: LaunchOptions


@functools.lru_cache(maxsize=1024)
def plan_launch(
    out_shape: tuple[int, ...],
    n_in: int,
    strides: tuple[int, int, int, int],
    config: GemmConfig,
    gated: bool,
    approximate: str,
    has_bias: bool,
    has_up_bias: bool,
) -> GemmLaunch:
    """The launch of ``config`` for an output of ``out_shape`` (M = the product of its leading dimensions)
    from x [M, n_in], with these row strides of x, the weights and out. Cached: the tuning tools launch one
    configuration over and over (``launch_geglu_linear``), at the host cost of a decode call's launch."""
    n_out = out_shape[-1]
    n_tokens = math.prod(out_shape[:-1])
    matrices = ((n_tokens, n_in), (n_out, n_in), (n_out, n_in), (n_tokens, n_out))
    int64_offsets = needs_int64_offsets(*((rows, cols, stride) for (rows, cols), stride in zip(matrices, strides)))
    options = LaunchOptions(
        constexprs=(
            ("GATED", gated),
            ("APPROXIMATE_TANH", approximate == "tanh"),
            ("HAS_BIAS", has_bias),
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
    return GemmLaunch(out_shape, grid, (n_tokens, n_out, n_in, *strides), options)


@functools.lru_cache(maxsize=1024)
def table_launch(
    x_shape: tuple[int, ...],
    n_out: int,
    strides: Optional[tuple[int, int, int]],
    dtype: torch.dtype,
    device_index: int,
    gated: bool,
    approximate: str,
    has_bias: bool,
    has_up_bias: bool,
) -> Optional[GemmLaunch]:
    """The launch the device's table gives a call of x [..., n_in] through weights [n_out, n_in], or None where
    the kernel does not run it: a dtype without tensor-core operands, no element, or no class of the table
    (``fused_config`` gated, ``down_proj_config`` plain) for this many tokens and weights of this size.

    ``strides``: the row strides of x, the weight and the up weight, or None where all three are contiguous
    (then x and out are read with any leading shape, as ``launch_geglu_linear`` says). Cached: a decode call
    costs one lookup here, on what it reads of its operands once.
    """
    n_in = x_shape[-1]
    n_tokens = math.prod(x_shape[:-1])
    if dtype not in FUSED_DTYPES or n_tokens == 0 or n_in == 0 or n_out == 0:
        return None
    choose = fused_config if gated else down_proj_config
    config = choose(n_tokens, n_out * n_in * dtype.itemsize, device_index)
    if config is None:
        return None
    row_strides = (*(strides or (n_in,) * 3), n_out)  # out: fresh, contiguous
    return plan_launch((*x_shape[:-1], n_out), n_in, row_strides, config, gated, approximate, has_bias, has_up_bias)


_launch_mlp_gemm_kernel = Launcher(mlp_gemm_kernel)


def _row_stride(matrix: torch.Tensor, n_cols: int) -> int:
    """The row stride the kernel reads a matrix with: ``n_cols`` where a contiguous layout gives it (also
    for x and out of any leading shape, which are contiguous), else the 2-D tensor's own."""
    return n_cols if matrix.dim() != 2 or matrix.is_contiguous() else matrix.stride(0)


def _unit_stride(bias: torch.Tensor) -> torch.Tensor:
    """A bias as the kernel reads it, a unit-stride vector: copied where it is not (tiny next to the weights)."""
    return bias if bias.stride(0) == 1 else bias.contiguous()


def launch_gemm(launch: GemmLaunch, x, weight, up_weight, bias, up_bias, out) -> None:
    """``launch`` (``table_launch``'s or ``plan_launch``'s) on these operands, whose rows the kernel reads from
    their pointers with the launch's row strides; plain, ``up_weight`` is ``weight`` and ``up_bias`` None
    (neither is read)."""
    # Without a bias the kernel never reads its pointer: pass out in its place.
    biases = (out if bias is None else _unit_stride(bias), out if up_bias is None else _unit_stride(up_bias))
    _launch_mlp_gemm_kernel(launch.grid, (x, weight, up_weight, *biases, out), launch.scalars, launch.options)


def _launch_with(config: GemmConfig, x, weight, up_weight, bias, up_bias, out, gated: bool, approximate: str) -> None:
    """One launch of ``config`` (tuning's: any configuration, any operands ``launch_geglu_linear`` takes)."""
    n_in, n_out = x.shape[-1], weight.shape[0]
    strides = (_row_stride(x, n_in), _row_stride(weight, n_in), _row_stride(up_weight, n_in), _row_stride(out, n_out))
    out_shape = (out.numel() // n_out, n_out)
    launch = plan_launch(out_shape, n_in, strides, config, gated, approximate, bias is not None, up_bias is not None)
    launch_gemm(launch, x, weight, up_weight, bias, up_bias, out)


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
    """out [..., N] = GeGLU of x [..., K] through the weights [N, K] with ``config``; every matrix with unit column
    stride, biases [N] (or None) of any stride. For tuning and tests; ``ops`` launches ``table_launch``'s.

    x and out are each either 2-D [M, K] / [M, N] (any row stride) or
    contiguous with any leading shape (M = the product of the leading
    dimensions): the kernel reads them as [M, K] and [M, N] without a view.
    """
    _launch_with(config, x, gate_weight, up_weight, gate_bias, up_bias, out, True, approximate)


def launch_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], out: torch.Tensor, config: GemmConfig
) -> None:
    """out [..., N] = x [..., K] W^T + b with ``config``, W [N, K] with unit column stride; x and out as
    ``launch_geglu_linear``'s. For tuning and tests."""
    _launch_with(config, x, weight, weight, bias, None, out, False, "none")
