"""What the benchmark measures: the one source of truth for shapes, dtypes, models and budgets.

Three grids: ``full`` (the default on a GPU, about five minutes on an H200),
``quick`` (``--quick``, about a minute and a half) and ``tiny`` (every run
without a GPU, so CI can smoke-test the same code path; ``--grid tiny`` on a
GPU gives the same smoke test there in well under a minute).

Every static shape costs ``torch.compile`` a fresh compile (about 1 s forward,
2 s forward+backward on an H200), which is most of a run's time. So the
compiled implementation runs on every shape of ``compile_everywhere_dtypes``
and only on the ``compile_subgrid`` shapes of the other dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Short names on the command line and in the output -> torch dtypes.
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

#: The GELU forms, as torch.nn.functional.gelu names them.
APPROXIMATIONS = ("tanh", "none")

ACTIVATION_FORWARD = "activation-forward"
ACTIVATION_FORWARD_BACKWARD = "activation-forward-backward"
MLP_FORWARD = "mlp-forward"
MLP_FORWARD_BACKWARD = "mlp-forward-backward"
HOST = "host"
#: Workload names, in the order the report lists them.
WORKLOADS = (ACTIVATION_FORWARD, ACTIVATION_FORWARD_BACKWARD, MLP_FORWARD, MLP_FORWARD_BACKWARD, HOST)

#: Cells whose inputs and outputs (both layouts, every gradient) would exceed this are skipped.
DEFAULT_MEMORY_BUDGET_GIB = 40.0


def dtype_name(dtype: torch.dtype) -> str:
    return next(name for name, value in DTYPES.items() if value == dtype)


@dataclass(frozen=True)
class MLPModel:
    """The sizes of one model's GeGLU MLP: ``down_proj(gelu(gate_proj(x)) * up_proj(x))``."""

    name: str
    hidden: int
    intermediate: int


GEMMA_2B = MLPModel("Gemma 2B", 2048, 16384)
GEMMA_7B = MLPModel("Gemma 7B", 3072, 24576)
GEMMA3_1B = MLPModel("Gemma3 1B", 1152, 6912)
GEMMA3_4B = MLPModel("Gemma3 4B", 2560, 10240)
GEMMA3_27B = MLPModel("Gemma3 27B", 5376, 21504)
#: Every Gemma size's MLP (hidden, intermediate from the published configs).
GEMMA_MLPS = (
    GEMMA_2B,
    GEMMA_7B,
    MLPModel("Gemma2 2B", 2304, 9216),
    MLPModel("Gemma2 9B", 3584, 14336),
    MLPModel("Gemma2 27B", 4608, 36864),
    GEMMA3_1B,
    GEMMA3_4B,
    MLPModel("Gemma3 12B", 3840, 15360),
    GEMMA3_27B,
)
TINY_MLP = MLPModel("tiny", 32, 96)


@dataclass(frozen=True)
class Grid:
    """Everything one run measures, and how long it may take."""

    name: str
    #: Activation cells: every (tokens, intermediate) pair, in every dtype.
    tokens: tuple[int, ...]
    intermediates: tuple[int, ...]
    dtypes: tuple[torch.dtype, ...]
    approximations: tuple[str, ...]
    #: Dtypes compiled on every shape; the others only on compile_subgrid's shapes.
    compile_everywhere_dtypes: tuple[torch.dtype, ...]
    compile_subgrid: tuple[tuple[int, ...], tuple[int, ...]]  # (tokens, intermediates)
    #: MLP cells: (model, tokens) pairs, in every mlp dtype.
    mlp_cells: tuple[tuple[MLPModel, int], ...]
    mlp_dtypes: tuple[torch.dtype, ...]
    #: Host-side measurements.
    overhead_shape: tuple[int, int]  # (tokens, intermediate) small enough that launches dominate
    overhead_calls: int
    recompile_token_counts: tuple[int, ...]
    recompile_intermediate: int
    cold_start_shape: tuple[int, int]
    #: Timer settings (milliseconds, as triton.testing.do_bench takes them).
    warmup_ms: float
    rep_ms: float
    #: Past this many seconds, remaining cells are skipped (and say so).
    time_budget_s: float

    def compiles(self, dtype: torch.dtype, tokens: int, intermediate: int) -> bool:
        """Whether the torch.compile implementation runs on this activation cell."""
        sub_tokens, sub_intermediates = self.compile_subgrid
        return dtype in self.compile_everywhere_dtypes or (tokens in sub_tokens and intermediate in sub_intermediates)


#: The MLP token counts of issue 5's targets: decode, and prefill (1024 to 16384).
MLP_DECODE_TOKENS = (1, 8, 16)
MLP_PREFILL_TOKENS = (1024, 4096, 16384)


def _mlp_product(models: tuple[MLPModel, ...], tokens: tuple[int, ...]) -> tuple[tuple[MLPModel, int], ...]:
    return tuple((model, count) for model in models for count in tokens)


FULL = Grid(
    name="full",
    tokens=(1, 16, 128, 1024, 4096, 8192, 16384),
    intermediates=(4231, 9216, 14336, 16384, 24576, 73728),
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    approximations=("tanh",),
    compile_everywhere_dtypes=(torch.bfloat16,),
    compile_subgrid=((1, 1024, 8192), (4231, 16384, 73728)),
    mlp_cells=_mlp_product((GEMMA_2B, GEMMA_7B, GEMMA3_27B), MLP_DECODE_TOKENS + (128,) + MLP_PREFILL_TOKENS),
    mlp_dtypes=(torch.bfloat16,),
    overhead_shape=(1, 256),
    overhead_calls=2000,
    recompile_token_counts=tuple(range(1, 21)),
    recompile_intermediate=16384,
    cold_start_shape=(1024, 16384),
    warmup_ms=5,
    rep_ms=25,
    time_budget_s=420,
)

QUICK = Grid(
    name="quick",
    tokens=(1, 1024, 8192),
    intermediates=(4231, 16384, 73728),
    dtypes=(torch.bfloat16,),
    approximations=("tanh",),
    compile_everywhere_dtypes=(torch.bfloat16,),
    compile_subgrid=((), ()),
    mlp_cells=((GEMMA_2B, 16), (GEMMA3_27B, 1024)),
    mlp_dtypes=(torch.bfloat16,),
    overhead_shape=(1, 256),
    overhead_calls=1000,
    recompile_token_counts=(1, 2, 3, 5, 8),
    recompile_intermediate=16384,
    cold_start_shape=(1024, 16384),
    warmup_ms=5,
    rep_ms=25,
    time_budget_s=100,
)

TINY = Grid(
    name="tiny",
    tokens=(1, 5),
    intermediates=(33,),
    dtypes=(torch.bfloat16,),
    approximations=("tanh",),
    compile_everywhere_dtypes=(torch.bfloat16,),
    compile_subgrid=((), ()),
    mlp_cells=((TINY_MLP, 5),),
    mlp_dtypes=(torch.bfloat16,),
    overhead_shape=(1, 256),
    overhead_calls=20,
    recompile_token_counts=(1, 2, 3),
    recompile_intermediate=33,
    cold_start_shape=(4, 33),
    warmup_ms=1,
    rep_ms=5,
    time_budget_s=600,
)


GRIDS = {grid.name: grid for grid in (FULL, QUICK, TINY)}


def grid_for(device_type: str, name: str | None) -> Grid:
    """The grid a run uses: ``name`` (default ``full``) on a GPU; ``tiny`` on a CPU, whatever was asked."""
    if device_type == "cpu":
        return TINY
    return GRIDS[name or FULL.name]
