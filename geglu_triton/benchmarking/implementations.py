"""The implementations compared, side by side, on the same inputs.

Activation (``gelu(gate) * up``):
  eager        ``F.gelu(g, approximate=a) * u``: two kernels, the GELU result through memory;
  compile      ``torch.compile`` of that same function (``dynamic=False``; its compile
               time is recorded apart from its run time);
  liger        ``liger_kernel.ops.geglu.LigerGELUMulFunction`` (tanh GELU only);
  ours         ``kernel.geglu(g, u)``: gate and up as separate tensors;
  ours_concat  ``kernel.geglu_concat(x)``: x = [gate | up], a fused gate_up projection.
MLP (``down_proj(gelu(gate_proj(x)) * up_proj(x))``): eager, compile, liger
(``LigerGEGLUMLP``) and ours (the kernel's ``layers.GeGLUMLP.forward``).

A factory raises ``Unavailable`` when an implementation cannot run a cell at
all (Liger not installed, or asked for the exact GELU); the cell records the
reason as "skipped". Any other exception is recorded as a failure.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable

import torch
import torch.nn.functional as F

from . import modules

EAGER = "eager"
COMPILE = "compile"
LIGER = "liger"
OURS = "ours"
OURS_CONCAT = "ours_concat"

#: Order of measurement within a cell. Liger goes last: its backward writes the
#: gradients into its inputs' memory, which nothing may read afterwards.
ACTIVATION_IMPLEMENTATIONS = (EAGER, COMPILE, OURS, OURS_CONCAT, LIGER)
MLP_IMPLEMENTATIONS = (EAGER, COMPILE, OURS, LIGER)
#: Ours and what it is compared with.
BASELINES = (EAGER, COMPILE, LIGER)
OUR_IMPLEMENTATIONS = (OURS, OURS_CONCAT)

LABELS = {
    EAGER: "eager PyTorch",
    COMPILE: "torch.compile",
    LIGER: "Liger",
    OURS: "ours (gate, up)",
    OURS_CONCAT: "ours ([gate | up])",
}


class Unavailable(Exception):
    """The implementation cannot run this cell at all; the message says why."""


def compile_backend(device: torch.device) -> str:
    """Inductor on a GPU; on a CPU, where Inductor needs a C++ toolchain and is slow, ``aot_eager``."""
    return "inductor" if device.type == "cuda" else "aot_eager"


def compiled_graph_count() -> int:
    """Graphs Dynamo has compiled since the last ``torch._dynamo.reset()`` (one per static shape)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def fresh_compile(fn: Callable, device: torch.device, *, dynamic: bool | None = False) -> Callable:
    """``torch.compile(fn)`` with Dynamo's caches and counters cleared first.

    Each cell compiles from scratch, so no cell inherits another's graphs and
    Dynamo's recompile limit is never reached.
    """
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    return torch.compile(fn, dynamic=dynamic, backend=compile_backend(device))


def eager_activation(approximate: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def eager_geglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.gelu(gate, approximate=approximate) * up

    return eager_geglu


@contextmanager
def raised_recompile_limit(limit: int):
    """Raise Dynamo's per-function recompile limit (default 8; past it Dynamo falls back to eager)."""
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    previous = getattr(dynamo_config, name)
    setattr(dynamo_config, name, max(previous, limit))
    try:
        yield previous
    finally:
        setattr(dynamo_config, name, previous)


def warm_up_compiler(device: torch.device) -> float:
    """Seconds of a first, throwaway compile: Inductor's imports and worker start-up, paid once per process.

    Done before any cell, so that no cell's compile time includes it.
    """
    start = time.perf_counter()
    compiled = fresh_compile(eager_activation("tanh"), device)
    x = torch.randn(8, 8, device=device)
    compiled(x, x)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def _liger_gelu_mul() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    try:
        from liger_kernel.ops.geglu import LigerGELUMulFunction
    except ImportError as err:
        raise Unavailable(f"liger_kernel cannot be imported ({err})") from err
    return LigerGELUMulFunction.apply


def _require_tanh_for_liger(approximate: str) -> None:
    if approximate != "tanh":
        raise Unavailable("Liger implements the tanh GELU only")


def activation(name: str, approximate: str, kernel, device: torch.device) -> Callable:
    """The activation function of one implementation: ``f(gate, up)``, or ``f(x)`` for ours_concat."""
    if name == EAGER:
        return eager_activation(approximate)
    if name == COMPILE:
        return fresh_compile(eager_activation(approximate), device)
    if name == LIGER:
        _require_tanh_for_liger(approximate)
        return _liger_gelu_mul()
    if name == OURS:
        return lambda gate, up: kernel.geglu(gate, up, approximate=approximate)
    if name == OURS_CONCAT:
        return lambda x: kernel.geglu_concat(x, approximate=approximate)
    raise ValueError(f"unknown activation implementation {name!r}")


def mlp(name: str, module: modules.GemmaStyleMLP, approximate: str, kernel, device: torch.device) -> Callable:
    """The MLP forward of one implementation, on ``module``'s weights: ``f(x)``."""
    if name == EAGER:
        return module
    if name == COMPILE:
        return fresh_compile(module, device)
    if name == LIGER:
        _require_tanh_for_liger(approximate)
        try:
            return modules.liger_mlp(module)
        except ImportError as err:
            raise Unavailable(f"liger_kernel cannot be imported ({err})") from err
    if name == OURS:
        return modules.fused_forward(module, kernel)
    raise ValueError(f"unknown MLP implementation {name!r}")
