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

Split-K
-------
At a few tokens the grid has one row of tiles, and its tiles may fill the
SMs unevenly (``device_tables.choose_split_k``). Then each tile's K loop is
split over SPLIT_K programs: program s accumulates the K steps of its share,
stores its two fp32 accumulators in the tile's slot s of a scratch buffer
and increments the tile's arrival counter. The program that arrives last
adds the SPLIT_K slots in order s = 0, 1, ... and runs the epilogue, so the
sum never depends on timing: a split launch gives the same bits every time
(not the same bits as an unsplit one: the additions are grouped differently).
That program also sets the counter back to zero, so every launch finds its
counters at zero; the counters are per stream (``split_scratch``).

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
from triton.runtime import driver

from .device_tables import FUSED_MAX_TOKENS, MAX_SPLIT_TILES, GemmConfig, choose_split_k, describe_device, gemm_config
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
    partials_ptr,
    arrivals_ptr,
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
    SPLIT_K: tl.constexpr,
    INT64_OFFSETS: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of h = gelu(x W_gate^T + b_gate) * (x W_up^T + b_up), or one K-split of it.

    ``n_tokens`` is not specialized on, so a new token count never compiles
    a new variant. With ``SPLIT_K`` > 1, ``partials_ptr`` is fp32 scratch of
    ``tiles x SPLIT_K x 2 x BLOCK_M x BLOCK_N`` and ``arrivals_ptr`` one int32
    counter per tile, zero on entry and left zero on exit (see Split-K above);
    with ``SPLIT_K`` = 1 neither is read.
    """
    # Program -> (tile, split): the SPLIT_K programs of a tile are neighbours,
    # so a tile's splits run together and its sum is ready early.
    pid = tl.program_id(0)
    split = pid % SPLIT_K
    pid = pid // SPLIT_K
    # Tile -> (row tile, column tile), in groups of GROUP_M row tiles: the
    # tiles of a group walk the same column tiles (weight rows) one after another.
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
    # This program's share of the K loop: whole BLOCK_K steps, the same number
    # for every split but the last (which may have fewer, or none).
    steps_per_split = tl.cdiv(tl.cdiv(n_in, BLOCK_K), SPLIT_K)
    k_first = split * steps_per_split * BLOCK_K
    k_end = tl.minimum(k_first + steps_per_split * BLOCK_K, n_in)
    ks = k_first + tl.arange(0, BLOCK_K)
    # Clamped onto valid rows of x and W: in-bounds loads with no row mask.
    x_rows = rows % n_tokens
    weight_rows = cols % n_out
    x_ptrs = x_ptr + x_rows[:, None] * x_row_stride + ks[None, :]
    gate_weight_ptrs = gate_weight_ptr + weight_rows[:, None] * gate_weight_row_stride + ks[None, :]
    up_weight_ptrs = up_weight_ptr + weight_rows[:, None] * up_weight_row_stride + ks[None, :]

    # Both projections over the same x tiles: x is loaded once for two dots.
    acc_gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(k_first, k_end, BLOCK_K):
        in_k = ks[None, :] < n_in - k_start + k_first  # only a step past a K that BLOCK_K does not divide masks anything
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

    in_rows = (rows < n_tokens)[:, None]
    finishes_tile = True
    if SPLIT_K > 1:
        # Split-K: publish this split's fp32 sums in the tile's slot s of the
        # scratch (valid rows only: at one token, 1/BLOCK_M of the tile), then
        # count arrivals. The barrier orders every thread's stores before the
        # atomic, whose release makes them visible GPU-wide; the program that
        # arrives last (acquire) sums the SPLIT_K slots in split order, so the
        # result does not depend on which split finished when, and resets the
        # tile's counter for the next launch on this stream.
        tile_size: tl.constexpr = BLOCK_M * BLOCK_N
        in_tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        tile_partials = partials_ptr + pid.to(tl.int64) * (SPLIT_K * 2 * tile_size)
        tl.store(tile_partials + split * (2 * tile_size) + in_tile, acc_gate, mask=in_rows)
        tl.store(tile_partials + split * (2 * tile_size) + tile_size + in_tile, acc_up, mask=in_rows)
        tl.debug_barrier()
        arrived_before = tl.atomic_add(arrivals_ptr + pid, 1, sem="acq_rel", scope="gpu")
        finishes_tile = arrived_before == SPLIT_K - 1
        if finishes_tile:
            acc_gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in range(SPLIT_K):  # fixed order; .cg reads L2, where the other programs' stores are
                slot = tile_partials + s * (2 * tile_size) + in_tile
                acc_gate += tl.load(slot, mask=in_rows, other=0.0, cache_modifier=".cg")
                acc_up += tl.load(slot + tile_size, mask=in_rows, other=0.0, cache_modifier=".cg")
            tl.store(arrivals_ptr + pid, 0)

    # Epilogue: bias in fp32, then the projections rounded to the storage
    # dtype as eager's GEMMs return them, then eager's rounded GeGLU.
    if finishes_tile:
        if HAS_GATE_BIAS:
            acc_gate += tl.load(gate_bias_ptr + weight_rows).to(tl.float32)[None, :]
        if HAS_UP_BIAS:
            acc_up += tl.load(up_bias_ptr + weight_rows).to(tl.float32)[None, :]
        dtype = out_ptr.dtype.element_ty
        gate = round_to(acc_gate, dtype, INTERPRETED).to(tl.float32)
        up = round_to(acc_up, dtype, INTERPRETED).to(tl.float32)
        h = geglu_rounded_like_eager(gate, up, dtype, APPROXIMATE_TANH, INTERPRETED)
        mask = in_rows & (cols < n_out)[None, :]
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
    device_index: int,
    split_k: Optional[int],
) -> tuple[tuple[int, int, int], LaunchOptions, int, int]:
    """Grid, constexprs, tiles and programs per tile of one launch (cached: one lookup per call).

    ``split_k``: the programs per tile, or None for the device's choice (``device_tables.split_k``).
    """
    matrices = ((n_tokens, n_in), (n_out, n_in), (n_out, n_in), (n_tokens, n_out))
    int64_offsets = needs_int64_offsets(*((rows, cols, stride) for (rows, cols), stride in zip(matrices, strides)))
    tiles = triton.cdiv(n_tokens, config.block_m) * triton.cdiv(n_out, config.block_n)
    if split_k is None:
        split_k = choose_split_k(tiles, triton.cdiv(n_in, config.block_k), config, describe_device(device_index))
    options = LaunchOptions(
        constexprs=(
            ("APPROXIMATE_TANH", approximate == "tanh"),
            ("HAS_GATE_BIAS", has_gate_bias),
            ("HAS_UP_BIAS", has_up_bias),
            ("BLOCK_M", config.block_m),
            ("BLOCK_N", config.block_n),
            ("BLOCK_K", config.block_k),
            ("GROUP_M", config.group_m),
            ("SPLIT_K", split_k),
            ("INT64_OFFSETS", int64_offsets),
            ("INTERPRETED", RUNS_INTERPRETED),
        ),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return (tiles * split_k, 1, 1), options, tiles, split_k


#: (device index, stream) -> the split-K scratch of launches on that stream: fp32 partial sums (grown
#: to the largest launch seen) and one int32 arrival counter per tile, zero between launches (the last
#: program of each tile resets its own). Launches on one stream run in order, so they can share it;
#: launches on another stream get their own. Kept for the process's lifetime, as PyTorch keeps a
#: cuBLAS workspace per stream; a buffer replaced by a larger one is freed to PyTorch's allocator,
#: which reuses it only behind the launches already queued on that stream.
_split_scratch: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _current_stream(device_index: int) -> int:
    return 0 if device_index < 0 else driver.active.get_current_stream(device_index)


def split_scratch(like: torch.Tensor, tiles: int, partials: int) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """(fp32 partial sums of at least ``partials`` elements, zeroed counters for ``tiles`` tiles) on ``like``'s device.

    None past MAX_SPLIT_TILES tiles (the launch then runs unsplit). Outside
    CUDA graph capture, the current stream's scratch. While a graph is being
    captured, new buffers for this launch alone (allocated from the graph's
    pool, their zeroing captured so that every replay starts from zero):
    graphs captured on one stream may be replayed on several at once.
    """
    if tiles > MAX_SPLIT_TILES:
        return None
    if like.is_cuda and torch.cuda.is_current_stream_capturing():
        return like.new_empty(partials, dtype=torch.float32), torch.zeros(tiles, dtype=torch.int32, device=like.device)
    index = like.get_device()
    key = (index, _current_stream(index))
    scratch = _split_scratch.get(key)
    if scratch is None or scratch[0].numel() < partials:
        counters = torch.zeros(MAX_SPLIT_TILES, dtype=torch.int32, device=like.device) if scratch is None else scratch[1]
        scratch = _split_scratch[key] = (like.new_empty(partials, dtype=torch.float32), counters)
    return scratch


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
    split_k: Optional[int] = None,
) -> None:
    """out [..., N] = GeGLU of x [..., K] through the weights [N, K]; every matrix with unit column stride.

    x and out are each either 2-D [M, K] / [M, N] (any row stride) or
    contiguous with any leading shape (M = the product of the leading
    dimensions): the kernel reads them as [M, K] and [M, N] without a view.
    ``config``: from ``fused_config``, or any other (for tuning); ``split_k``:
    programs per tile, or None for the device's choice.
    """
    n_in, n_out = x.shape[-1], gate_weight.shape[0]
    n_tokens = out.numel() // n_out
    x_row_stride = x.stride(0) if x.dim() == 2 else n_in
    out_row_stride = out.stride(0) if out.dim() == 2 else n_out
    strides = (x_row_stride, gate_weight.stride(0), up_weight.stride(0), out_row_stride)
    flags = (approximate, gate_bias is not None, up_bias is not None, x.get_device())
    grid, options, tiles, split_k = _launch_plan(n_tokens, n_out, n_in, strides, config, *flags, split_k)
    # Without a bias or a split the kernel never reads those pointers: pass out in their place.
    partials = arrivals = out
    if split_k > 1:
        scratch = split_scratch(x, tiles, grid[0] * 2 * config.block_m * config.block_n)
        if scratch is None:  # too many tiles for the counters: one program per tile
            grid, options, *_ = _launch_plan(n_tokens, n_out, n_in, strides, config, *flags, 1)
        else:
            partials, arrivals = scratch
    biases = (out if gate_bias is None else gate_bias, out if up_bias is None else up_bias)
    tensors = (x, gate_weight, up_weight, *biases, out, partials, arrivals)
    _launch_geglu_linear_kernel(grid, tensors, (n_tokens, n_out, n_in, *strides), options)
