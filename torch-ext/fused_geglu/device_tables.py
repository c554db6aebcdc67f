"""What the GPU offers, and the launch configurations chosen from it: every per-device choice, in one place.

A device is described by what it reports to Triton's driver
(``DeviceTraits``): its backend, the shared memory one program may use
(the opt-in maximum per block: NVIDIA shared memory, AMD LDS, Intel SLM),
its multiprocessor count and its warp (wavefront) size. The tables below
are keyed by those figures, not by device names, so a GPU nobody listed
still gets configurations that fit it.

Fused GEMM (``triton_gemm_kernels``)
------------------------------------
``GEMM_TABLES`` holds one launch table per shared-memory class: a device
gets the first table whose class its shared memory reaches. A table maps
token counts to a configuration (decode, mid, prefill classes; see
``triton_gemm_kernels``). Triton needs ``(num_stages - 1) x (BLOCK_M +
2 BLOCK_N) x BLOCK_K x 2`` bytes of shared memory for the pipelined loads of
x and both weights (``num_stages`` buffers on sm_90/sm_100 for some tiles),
so the ~100 KB and 64 KB classes take fewer stages or narrower tiles.
A device with less shared memory than the smallest class gets no table:
its projections run as two GEMMs and the activation kernel.
``tests/test_offline_compile.py`` compiles every configuration each table
can pick for sm_80, sm_86, sm_89, sm_90, sm_100, sm_120 and gfx90a/gfx942,
and checks shared memory and registers against those targets' limits.

Elementwise kernels (``triton_kernels``)
----------------------------------------
``elementwise_config``: a tile covers ``TILE_BYTES`` of each tensor, with
one warp per ``warp_size x VECTOR_BYTES`` bytes, so that every thread moves
one 16-byte vector per tensor (32-lane warps on NVIDIA and Intel, 64-lane
wavefronts on AMD CDNA). These kernels use no shared memory.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import triton


@dataclass(frozen=True)
class DeviceTraits:
    """What a device offers the launch tables."""

    backend: str  # Triton's backend name: "cuda", "hip", "xpu"; "interpreter" for TRITON_INTERPRET=1 on the CPU
    shared_memory: int  # bytes of shared memory one program may use (opt-in maximum per block)
    multiprocessors: int  # SMs (NVIDIA), CUs (AMD), Xe cores (Intel)
    warp_size: int  # threads per warp (wavefront, sub-group)


#: The interpreter has no limits; it runs the tables of the device they were tuned on (H200: sm_90).
INTERPRETER = DeviceTraits("interpreter", shared_memory=232_448, multiprocessors=132, warp_size=32)


@functools.lru_cache(maxsize=None)
def describe_device(index: int) -> DeviceTraits:
    """The traits of device ``index`` (a tensor's ``get_device()``; -1, the CPU, means the interpreter).

    Read once per device from Triton's driver: the figures Triton itself
    checks a compiled kernel against before it launches it.
    """
    if index < 0:
        return INTERPRETER
    from triton.runtime import driver

    properties = driver.active.utils.get_device_properties(index)
    target = driver.active.get_current_target()
    return DeviceTraits(
        backend=target.backend,
        shared_memory=properties["max_shared_mem"],
        multiprocessors=properties["multiprocessor_count"],
        warp_size=properties.get("warpSize", target.warp_size),
    )


# --- fused GEMM -----------------------------------------------------------------


@dataclass(frozen=True)
class GemmConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


#: A launch table: (most tokens of the class, config), the last class open-ended (None).
TokenClasses = tuple[tuple[Optional[int], GemmConfig], ...]

#: Launch tables by the least shared memory per block the device must offer, largest class first.
#: Source of every configuration: the H200 sweeps of benchmarks/tune_gemm_config.py
#: (benchmarks/results/2026-12-02-h200-session2/gemm_sweep_v1.json: geometric mean over
#: Gemma 2B, 7B and Gemma3 27B cells of each class; the decode class of the largest table from
#: benchmarks/results/2026-12-03-h200-sweep-all/gemm_sweep_all.json, every Gemma size),
#: restricted to the configurations that fit the class; the H200 times quoted are those
#: geometric means. Shared memory: as Triton 3.9
#: compiles the configuration for the class's first target named (tests/test_offline_compile.py
#: checks every target).
GEMM_TABLES: tuple[tuple[int, TokenClasses], ...] = (
    # 163 KB and up (sm_90, sm_100 232,448 B; sm_80 166,912 B): the H200-tuned table.
    (
        166_912,
        (
            # 144 KB. Checked on all nine Gemma MLPs (2026-12-03-h200-sweep-all): 1.044x each cell's
            # best over the 27 cells of 1-16 tokens, where 3 stages (72 KB) give 1.028x, but at one
            # token, batch-1 decode, 5 stages are 3-10% faster on the 7B, 9B, 12B and 27B MLPs.
            (16, GemmConfig(16, 64, 128, group_m=1, num_warps=4, num_stages=5)),
            (64, GemmConfig(64, 64, 64, group_m=8, num_warps=4, num_stages=3)),  # 72 KB, 79.9 us: best
            (None, GemmConfig(128, 128, 64, group_m=8, num_warps=8, num_stages=3)),  # 144 KB, 990 us: best
        ),
    ),
    # 99 KB (sm_86, sm_89, sm_120 101,376 B; Intel Max 128 KB SLM).
    (
        101_376,
        (
            (16, GemmConfig(16, 64, 128, group_m=1, num_warps=4, num_stages=3)),  # 72 KB, 77.4 us (best 77.3)
            (64, GemmConfig(64, 64, 64, group_m=8, num_warps=4, num_stages=3)),  # 48 KB, 79.9 us: best
            # 72 KB, 1087 us; the best (990 us) spills registers on sm_86/sm_120 and leaves no headroom.
            (None, GemmConfig(128, 128, 32, group_m=8, num_warps=8, num_stages=4)),
        ),
    ),
    # 64 KB (AMD CDNA LDS, gfx90a/gfx942 65,536 B; sm_75).
    (
        65_536,
        (
            (16, GemmConfig(16, 32, 128, group_m=1, num_warps=4, num_stages=3)),  # 40 KB, 82.5 us (best 77.3)
            (64, GemmConfig(64, 64, 64, group_m=8, num_warps=4, num_stages=3)),  # 48 KB, 79.9 us: best
            (None, GemmConfig(128, 128, 32, group_m=8, num_warps=8, num_stages=3)),  # 48 KB, 1177 us (best 990)
        ),
    ),
)

#: The fused kernel is the default up to this many tokens; past it, two
#: cuBLAS GEMMs and the activation kernel are faster (H200, every Gemma size:
#: docs/PERFORMANCE.md, v10).
FUSED_MAX_TOKENS = 64

#: The down projection's tables (the GEMM kernel's plain form, one weight [hidden, intermediate]),
#: keyed as GEMM_TABLES. One class, for one token: the GEMV form (BLOCK_M 1), whose loads go
#: to registers (64 B of shared memory, for the reduction), so it fits every device. Past one
#: token cuBLAS runs the down projection: the tensor-core tiles of the plain form lost to cuBLAS
#: at 16 tokens on the 1B by 1.17x. Source: benchmarks/results/2026-12-03-h200-v14/
#: gemv_sweep_down-proj.json, every Gemma size's down projection at one token: the one
#: configuration closest to each shape's best (1.05x their geometric mean; docs/PERFORMANCE.md, v14).
DOWN_PROJ_TABLES: tuple[tuple[int, TokenClasses], ...] = (
    (0, ((1, GemmConfig(1, 2, 2048, group_m=1, num_warps=8, num_stages=1)),)),
)

#: The most tokens any class of the down projection's tables serves (more: cuBLAS, decided first).
DOWN_PROJ_MAX_TOKENS = max(most for _, table in DOWN_PROJ_TABLES for most, _ in table)

#: The GEMV form runs down projections whose weight is at most this large; larger ones take
#: cuBLAS. Side by side on the H200 it took 0.83x cuBLAS's GPU time on the 16 MB weight of
#: Gemma3 1B, 0.99x and 1.03x on the 52 and 42 MB of Gemma3 4B and Gemma2 2B, and from 67 MB
#: 0.97-1.07x (Gemma 2B 1.06x, Gemma3 27B 1.07x): past this size cuBLAS's GEMV is as fast or faster.
DOWN_PROJ_MAX_WEIGHT_BYTES = 64 * 2**20


def _table_for(tables: tuple[tuple[int, TokenClasses], ...], device: DeviceTraits) -> Optional[TokenClasses]:
    """The table of the largest shared-memory class the device reaches, or None below them all."""
    return next((table for needs, table in tables if device.shared_memory >= needs), None)


def _class_config(table: Optional[TokenClasses], n_tokens: int) -> Optional[GemmConfig]:
    """The configuration of the token class that ``n_tokens`` falls in, or None (no table, or past its last class)."""
    return next((config for most, config in table or () if most is None or n_tokens <= most), None)


def gemm_table(device: DeviceTraits) -> Optional[TokenClasses]:
    """The fused GEMM's launch table for the device, or None below every class."""
    return _table_for(GEMM_TABLES, device)


def down_proj_table(device: DeviceTraits) -> Optional[TokenClasses]:
    """The down projection's launch table for the device, or None below every class."""
    return _table_for(DOWN_PROJ_TABLES, device)


@functools.lru_cache(maxsize=1024)
def gemm_config(n_tokens: int, device: DeviceTraits) -> Optional[GemmConfig]:
    """The fused GEMM's configuration for this many tokens on this device, or None where no table fits it."""
    return _class_config(gemm_table(device), n_tokens)


@functools.lru_cache(maxsize=1024)
def down_proj_gemm_config(n_tokens: int, weight_bytes: int, device: DeviceTraits) -> Optional[GemmConfig]:
    """The down projection's configuration for this many tokens and this weight on this device, or None: cuBLAS runs it."""
    if weight_bytes > DOWN_PROJ_MAX_WEIGHT_BYTES:
        return None
    return _class_config(down_proj_table(device), n_tokens)


# --- elementwise kernels -----------------------------------------------------------

# Bytes of one tensor that a tile covers, bytes one thread moves per tensor
# (one 16-byte vector), the most warps, and the narrowest tile (tl.arange
# wants a power of two). Source: benchmarks/tune_launch_config.py on the H200
# (4 KiB tiles with 8 warps of 32 led or tied at every size swept).
TILE_BYTES = 4096
VECTOR_BYTES = 16
MAX_WARPS = 8
MIN_BLOCK_N = 16


@dataclass(frozen=True)
class ElementwiseConfig:
    block_m: int
    block_n: int
    num_warps: int


@functools.lru_cache(maxsize=4096)
def elementwise_config(n_rows: int, n_cols: int, element_size: int, warp_size: int) -> ElementwiseConfig:
    """Tile shape and warps of the elementwise kernels for a [n_rows, n_cols] problem.

    The kernels are memory-bound. A tile covers TILE_BYTES of each tensor,
    with one warp per ``warp_size x VECTOR_BYTES`` bytes (up to MAX_WARPS),
    so every thread moves exactly one 16-byte vector per tensor; small tiles
    mean many programs, which fills the GPU from a few MiB on. Narrow rows get
    several rows per tile so that a tile keeps that size.
    """
    tile_elements = TILE_BYTES // element_size
    block_n = max(MIN_BLOCK_N, min(triton.next_power_of_2(n_cols), tile_elements))
    block_m = max(1, min(triton.next_power_of_2(n_rows), tile_elements // block_n))
    tile_bytes = block_m * block_n * element_size
    num_warps = max(1, min(MAX_WARPS, tile_bytes // (warp_size * VECTOR_BYTES)))
    return ElementwiseConfig(block_m, block_n, num_warps)


def elementwise_configs(element_size: int, warp_size: int) -> frozenset[ElementwiseConfig]:
    """Every configuration ``elementwise_config`` can pick for this element size and warp size.

    It depends on the shape only through next_power_of_2 of each side,
    clamped to the tile, so powers of two up to twice the tile cover every shape.
    """
    sides = [2**i for i in range((2 * TILE_BYTES // element_size).bit_length())]
    return frozenset(elementwise_config(rows, cols, element_size, warp_size) for rows in sides for cols in sides)
