"""What the GPU offers, and the launch configurations chosen from it: every per-device choice, in one place.

A device is described by the two figures the tables read from Triton's
driver (``DeviceTraits``): the shared memory one program may use (the opt-in
maximum per block: NVIDIA shared memory, AMD LDS, Intel SLM), which picks the
GEMM's table, and the warp (wavefront) size, which shapes the elementwise
kernels' tiles. The tables are keyed by those figures, not by device names,
so a GPU nobody listed still gets configurations that fit it.

Fused GEMM (``triton_gemm_kernels``)
------------------------------------
``GEMM_TABLES`` holds one launch table per shared-memory class: a device
gets the first table whose class its shared memory reaches. A table is a
list of token classes: each serves calls of at most ``most_tokens`` tokens
whose weight (one projection's) is at most ``max_weight_bytes``, with one
configuration. A call no class serves runs on cuBLAS: the table is also
where the fused kernel stops paying off, per device class and per weight
size (our tiles beat cuBLAS's longer on small weights, whose grids are
small). Triton needs ``(num_stages - 1) x (BLOCK_M + 2 BLOCK_N) x BLOCK_K x 2``
bytes of shared memory for the pipelined loads of x and both weights
(``num_stages`` buffers on sm_90/sm_100 for some tiles), so the ~100 KB and
64 KB classes take fewer stages or narrower tiles. A device with less
shared memory than the smallest class gets no table: its projections run as
two GEMMs and the activation kernel. ``tests/test_offline_compile.py``
compiles every configuration each table can pick for sm_80, sm_86, sm_89,
sm_90, sm_100, sm_120 and gfx90a/gfx942, and checks shared memory,
registers and spills against those targets' limits.

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
from typing import NamedTuple, Optional

import triton


@dataclass(frozen=True)
class DeviceTraits:
    """What a device offers the launch tables."""

    shared_memory: int  # bytes of shared memory one program may use (opt-in maximum per block)
    warp_size: int  # threads per warp (wavefront, sub-group)


#: Shared memory per block of sm_90 and sm_100 (opt-in maximum): the class of the device the tables were tuned on.
SM90_SHARED_MEMORY = 232_448

#: The interpreter has no limits; it runs the tables of the device they were tuned on (H200: sm_90).
INTERPRETER = DeviceTraits(shared_memory=SM90_SHARED_MEMORY, warp_size=32)


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
    return DeviceTraits(
        shared_memory=properties["max_shared_mem"],
        warp_size=properties.get("warpSize", driver.active.get_current_target().warp_size),
    )


# --- fused GEMM -----------------------------------------------------------------


class GemmConfig(NamedTuple):
    """One launch configuration of the GEMM kernel."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class TokenClass:
    """Calls of at most ``most_tokens`` tokens, through a weight of at most ``max_weight_bytes``, run ``config``."""

    most_tokens: int
    config: GemmConfig
    max_weight_bytes: Optional[int] = None  # None: any weight

    def serves(self, n_tokens: int, weight_bytes: int) -> bool:
        return n_tokens <= self.most_tokens and (self.max_weight_bytes is None or weight_bytes <= self.max_weight_bytes)


#: A launch table: its token classes, fewest tokens first; the first that serves a call runs it.
LaunchTable = tuple[TokenClass, ...]

MiB = 2**20

#: The configurations the tables share. Source of every configuration: the H200 sweeps of
#: benchmarks/tune_gemm_config.py, restricted to what fits each class (GPU times quoted are the
#: sweeps' geometric means over the cells of the class: benchmarks/results/2026-12-02-h200-session2/
#: gemm_sweep_v1.json for Gemma 2B, 7B and Gemma3 27B, 2026-12-03-h200-sweep-all/gemm_sweep_all.json
#: for every Gemma size's decode). Shared memory: as Triton 3.9 compiles them.
#: 144 KB. Over all nine Gemma MLPs at 1-16 tokens 1.044x each cell's best, where 3 stages
#: (72 KB) give 1.028x, but at one token, batch-1 decode, 5 stages are 3-10% faster on the 7B,
#: 9B, 12B and 27B MLPs.
DECODE_5_STAGES = GemmConfig(16, 64, 128, group_m=1, num_warps=4, num_stages=5)
#: 72 KB: three programs fit an SM where DECODE_5_STAGES fits one. On weights up to
#: SMALL_WEIGHT_BYTES (below) the grid of N / 64 programs is 0.8-1.2 times the SM count (Gemma3 1B,
#: Gemma2 2B, Gemma3 4B: 108, 144 and 160 programs on 132 SMs). Past the SM count, one program per SM
#: leaves the last 12-28 to run as a second wave on an otherwise idle GPU; three per SM hold the
#: whole grid at once. 1-16 tokens, time against DECODE_5_STAGES on those three MLPs: in the sweeps,
#: H200 0.87-1.03x (geometric mean 0.94x; the sweep above, L2 flushed by writing), H100 0.91-0.99x
#: (0.95x; benchmarks/results/2026-12-05-h100-v24/decode_sweep_read_flush.json, flushed by reading,
#: as decode leaves it); side by side with the 5-stage table on the H100 (read_floor_*.json there,
#: two runs, both flushes), Gemma2 2B 0.89-0.93x, Gemma3 4B 0.94-0.97x and Gemma3 1B 0.97-1.01x, whose
#: grid fits one wave either way; on the H200 (2026-12-06-h200-v25/read_floor_read_flush*.json)
#: Gemma2 2B 0.87-0.94x, Gemma3 4B 0.88-0.97x, Gemma3 1B 1.00-1.08x: the weakest cells at one token, where x's tile rows were
#: then clamped onto one line (docs/PERFORMANCE.md, v26).
DECODE_3_STAGES = GemmConfig(16, 64, 128, group_m=1, num_warps=4, num_stages=3)
#: 48-72 KB, 79.9 us at 17-64 tokens: the best there, and it fits every class.
MID = GemmConfig(64, 64, 64, group_m=8, num_warps=4, num_stages=3)

#: Past 64 tokens the fused kernel beats two cuBLAS GEMMs and the activation kernel on small
#: weights only (H200): at 128 tokens MID took 0.86x, 0.93x and 0.94x their time on the MLPs of
#: Gemma3 1B, Gemma2 2B and Gemma3 4B (the largest, 50 MiB per weight) and 1.01-1.20x on the six
#: from Gemma 2B (64 MiB) up (docs/PERFORMANCE.md, v10); at 256 tokens 128x128x64 tiles with
#: 4 stages took 0.85x their time on the 1B (16 MiB per weight; 108 programs: one wave on 132
#: SMs) and lost on Gemma2 2B and Gemma3 4B (v12). Side by side with the table (v15,
#: benchmarks/results/2026-12-04-h200-v15/crossover_table.json): 0.87-0.93x their time in every
#: cell these classes serve. Both classes are in the measured device's table only; 128x128x64
#: tiles spill registers on sm_80, sm_86, sm_89 and sm_120.
SMALL_WEIGHT_BYTES = 50 * MiB
TINY_WEIGHT_BYTES = 16 * MiB

#: 1-16 tokens where DECODE_5_STAGES fits: small weights take DECODE_3_STAGES (its comment says why).
DECODE_CLASSES: LaunchTable = (
    TokenClass(16, DECODE_3_STAGES, max_weight_bytes=SMALL_WEIGHT_BYTES),
    TokenClass(16, DECODE_5_STAGES),
)

#: Launch tables by the least shared memory per block the device must offer, largest class first.
GEMM_TABLES: tuple[tuple[int, LaunchTable], ...] = (
    # 227 KB (sm_90, sm_100: 232,448 B): the H200-tuned table. On an H100 (3.0 TB/s against 4.2) it took
    # 0.71-0.98x the time of cuBLAS plus our activation in every Gemma MLP's cell at 1-256 tokens but one
    # (Gemma2 27B at 32 tokens: 1.02x and 0.96x in two runs; benchmarks/results/2026-12-05-h100-v21/).
    (
        SM90_SHARED_MEMORY,
        (
            *DECODE_CLASSES,
            TokenClass(64, MID),
            TokenClass(128, MID, max_weight_bytes=SMALL_WEIGHT_BYTES),
            TokenClass(256, GemmConfig(128, 128, 64, group_m=8, num_warps=8, num_stages=4), TINY_WEIGHT_BYTES),
        ),
    ),
    # 163 KB (sm_80: 166,912 B): the H200's decode and mid classes. Not measured on an A100; the
    # small-weight decode class's reason holds there with more room: on its 108 SMs one 5-stage program
    # per SM leaves 36 of Gemma2 2B's 144 programs and 52 of Gemma3 4B's 160 to a second wave, and two
    # 3-stage programs per SM hold either grid.
    (166_912, (*DECODE_CLASSES, TokenClass(64, MID))),
    # 99 KB (sm_86, sm_89, sm_120 101,376 B; Intel Max 128 KB SLM). Decode: 72 KB, 77.4 us (best 77.3).
    (101_376, (TokenClass(16, DECODE_3_STAGES), TokenClass(64, MID))),
    # 64 KB (AMD CDNA LDS, gfx90a/gfx942 65,536 B; sm_75). Decode: 40 KB, 82.5 us (best 77.3).
    (65_536, (TokenClass(16, GemmConfig(16, 32, 128, group_m=1, num_warps=4, num_stages=3)), TokenClass(64, MID))),
)

#: The down projection's tables (the GEMM kernel's plain form, one weight [hidden, intermediate]),
#: keyed as GEMM_TABLES. One class, for one token: the GEMV form (BLOCK_M 1), whose loads go
#: to registers (64 B of shared memory, for the reduction), so it fits every device. Past one
#: token cuBLAS runs the down projection: the tensor-core tiles of the plain form lost to cuBLAS
#: at 16 tokens on the 1B by 1.17x. Source: benchmarks/results/2026-12-03-h200-v14/
#: gemv_sweep_down-proj.json, every Gemma size's down projection at one token: the one
#: configuration closest to each shape's best (1.05x their geometric mean; docs/PERFORMANCE.md, v14).
#: Weights up to SMALL_WEIGHT_BYTES: side by side with cuBLAS's GEMV (two runs) it took 0.83x its GPU
#: time on Gemma3 1B's 16 MiB and 0.98-1.03x on Gemma3 4B's 50 MiB and Gemma2 2B's 40.5 MiB (a few
#: hundred nanoseconds, against a microsecond of host time saved). From Gemma 2B's 64 MiB up it took
#: 0.97-0.98x on Gemma 7B and Gemma2 27B and 1.00-1.02x on Gemma3 12B, with cuBLAS ahead by up to 6%
#: on the sizes between: no weight limit past 50 MiB separates the gains (docs/PERFORMANCE.md, v28's
#: corrections).
DOWN_PROJ_TABLES: tuple[tuple[int, LaunchTable], ...] = (
    (0, (TokenClass(1, GemmConfig(1, 2, 2048, group_m=1, num_warps=8, num_stages=1), SMALL_WEIGHT_BYTES),)),
)


def _most_tokens(tables: tuple[tuple[int, LaunchTable], ...]) -> int:
    return max(token_class.most_tokens for _, table in tables for token_class in table)


#: The most tokens any class serves (more: cuBLAS, decided first, before a cached lookup per token count).
FUSED_MAX_TOKENS = _most_tokens(GEMM_TABLES)
DOWN_PROJ_MAX_TOKENS = _most_tokens(DOWN_PROJ_TABLES)


def _table_for(tables: tuple[tuple[int, LaunchTable], ...], device: DeviceTraits) -> Optional[LaunchTable]:
    """The table of the largest shared-memory class the device reaches, or None below them all."""
    return next((table for needs, table in tables if device.shared_memory >= needs), None)


def _class_config(table: Optional[LaunchTable], n_tokens: int, weight_bytes: int) -> Optional[GemmConfig]:
    """The configuration of the first class that serves the call, or None (no table, or no class serves it)."""
    return next((c.config for c in table or () if c.serves(n_tokens, weight_bytes)), None)


def gemm_table(device: DeviceTraits) -> Optional[LaunchTable]:
    """The fused GEMM's launch table for the device, or None below every class."""
    return _table_for(GEMM_TABLES, device)


def down_proj_table(device: DeviceTraits) -> Optional[LaunchTable]:
    """The down projection's launch table for the device, or None below every class."""
    return _table_for(DOWN_PROJ_TABLES, device)


@functools.lru_cache(maxsize=1024)
def gemm_config(n_tokens: int, weight_bytes: int, device: DeviceTraits) -> Optional[GemmConfig]:
    """The fused GEMM's configuration for this many tokens through weights of this size on this device,
    or None: two cuBLAS GEMMs and the activation kernel run it."""
    return _class_config(gemm_table(device), n_tokens, weight_bytes)


@functools.lru_cache(maxsize=1024)
def down_proj_gemm_config(n_tokens: int, weight_bytes: int, device: DeviceTraits) -> Optional[GemmConfig]:
    """The down projection's configuration for this many tokens and this weight on this device, or None: cuBLAS runs it."""
    return _class_config(down_proj_table(device), n_tokens, weight_bytes)


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
