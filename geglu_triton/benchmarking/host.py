"""What the host pays: per-call CPU overhead, recompilations, and the first call on a cold cache.

- Per-call overhead, at a size where launches dominate: N calls timed on the
  host with one synchronization at the end (µs per call: the host's dispatch
  cost, or the GPU's time when that is larger; the fastest of a few rounds,
  the implementations taking turns), and the same calls captured
  in a CUDA graph and replayed (µs per call with no host work at all). Their
  difference is what the host adds per call.
- Recompilations: one function called on tensors of many token counts.
  ``torch.compile(dynamic=False)`` compiles once per shape; with its default
  (automatic dynamic) it recompiles once, with symbolic shapes; ours called
  directly compiles no graph (Triton may JIT a variant per divisibility class,
  counted too).
- Cold start: a fresh process with empty Triton and Inductor caches times the
  first call of ours and of torch.compile, to a synchronized result
  (``coldstart`` is that process).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from geglu_triton import REPO_ROOT

from . import implementations
from .grid import dtype_name
from .implementations import COMPILE, EAGER, LIGER, OURS, OURS_CONCAT, Unavailable
from .timing import capture_graph, garbage_collector_paused, synchronize
from .workloads import Context, failure_text

#: Calls captured in one CUDA graph for the replay timing.
CALLS_PER_GRAPH = 100
#: Host-loop rounds: the implementations take turns, each keeps its fastest
#: round (as timeit advises: slower rounds are other processes' doing).
HOST_LOOP_ROUNDS = 5
#: The recompilation scenarios: one function, many token counts.
RECOMPILE_SCENARIOS = {
    "compile_static": "torch.compile(eager, dynamic=False)",
    "compile_default": "torch.compile(eager), default dynamic=None (automatic dynamic shapes)",
    "ours_compiled_dynamic": "torch.compile(ours, dynamic=True)",
    "ours_direct": "ours, called directly (no torch.compile)",
}
#: The cold-start child may take this long (importing torch, two cold compiles).
COLD_START_TIMEOUT_S = 240


@contextlib.contextmanager
def triton_dispatch(kernel):
    """Every launch of our kernels through Triton's ``kernel[grid]``, as without the direct path."""
    launchers = (
        kernel.triton_kernels._launch_forward_kernel,
        kernel.triton_kernels._launch_backward_kernel,
        kernel.triton_gemm_kernels._launch_mlp_gemm_kernel,
    )
    saved = [launcher.direct for launcher in launchers]
    for launcher in launchers:
        launcher.direct = False
    try:
        yield
    finally:
        for launcher, direct in zip(launchers, saved):
            launcher.direct = direct


def _activation_call(name: str, ctx: Context, approximate: str, gate, up, x) -> Callable[[], object]:
    fn = implementations.activation(name, approximate, ctx.kernel, ctx.device)
    return (lambda: fn(x)) if name == OURS_CONCAT else (lambda: fn(gate, up))


def _host_loop_us(call: Callable[[], object], calls: int, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    synchronize(device)
    return (time.perf_counter() - start) / calls * 1e6


def _fastest_host_loops_us(named_calls: dict, calls: int, device: torch.device) -> dict:
    """Each call's fastest host loop over HOST_LOOP_ROUNDS rounds in turns, the garbage collector off."""
    with garbage_collector_paused():
        rounds = [
            {name: _host_loop_us(call, calls, device) for name, call in named_calls.items()}
            for _ in range(HOST_LOOP_ROUNDS)
        ]
    return {name: min(loops[name] for loops in rounds) for name in named_calls}


def _graph_replay_us(ctx: Context, call: Callable[[], object]) -> float:
    """µs per call of CALLS_PER_GRAPH calls captured in one CUDA graph, replayed (median)."""

    def calls() -> None:
        for _ in range(CALLS_PER_GRAPH):
            call()

    return ctx.timer.median_s(capture_graph(calls).replay) / CALLS_PER_GRAPH * 1e6


def call_overhead(ctx: Context, dtype: torch.dtype, approximate: str) -> dict:
    tokens, intermediate = ctx.grid.overhead_shape
    gate = torch.randn(tokens, intermediate, device=ctx.device, dtype=dtype)
    up = torch.randn_like(gate)
    x = torch.randn(tokens, 2 * intermediate, device=ctx.device, dtype=dtype)
    results, ready = {}, {}
    for name in (EAGER, COMPILE, LIGER, OURS, OURS_CONCAT):
        try:
            call = _activation_call(name, ctx, approximate, gate, up, x)
            for _ in range(10):  # compiles, JITs, warms the allocator
                call()
            ready[name] = call
            results[name] = {"status": "ok"}
        except Unavailable as why:
            results[name] = {"status": "skipped", "reason": str(why)}
        except Exception as err:
            results[name] = {"status": "failed", "reason": failure_text(err)}
    loops = _fastest_host_loops_us(ready, ctx.grid.overhead_calls, ctx.device)
    for name, call in ready.items():
        result = results[name]
        result["host_loop_us"] = loops[name]
        if ctx.device.type == "cuda":
            try:
                result["graph_replay_us"] = _graph_replay_us(ctx, call)
                result["host_added_us"] = result["host_loop_us"] - result["graph_replay_us"]
            except Exception as err:  # capture is optional evidence: keep the host figure
                result["graph_replay_error"] = failure_text(err)
    return {
        "dtype": dtype_name(dtype),
        "approximate": approximate,
        "tokens": tokens,
        "intermediate": intermediate,
        "calls": ctx.grid.overhead_calls,
        "calls_per_graph": CALLS_PER_GRAPH if ctx.device.type == "cuda" else None,
        "method": (
            f"host_loop_us: wall time of `calls` back-to-back calls with one synchronize at the end, per call, "
            f"fastest of {HOST_LOOP_ROUNDS} rounds taken in turns; "
            "graph_replay_us: the same call captured CALLS_PER_GRAPH times in a CUDA graph, replay median per call; "
            "host_added_us: their difference"
        ),
        "results": results,
    }


def _triton_variants(kernel) -> int | None:
    """Compiled variants of our Triton kernels in this process (None where Triton does not say, as interpreted)."""
    triton_kernels = getattr(getattr(kernel, "ops", None), "triton_kernels", None)
    total = 0
    for jit_function in (
        getattr(triton_kernels, "geglu_forward_kernel", None),
        getattr(triton_kernels, "geglu_backward_kernel", None),
    ):
        caches = getattr(jit_function, "device_caches", None)
        if caches is None:
            return None
        try:
            total += sum(len(entry[0]) for entry in caches.values())
        except (TypeError, IndexError):  # a Triton whose cache layout differs
            return None
    return total


def recompilations(ctx: Context, dtype: torch.dtype, approximate: str) -> dict:
    token_counts = ctx.grid.recompile_token_counts
    intermediate = ctx.grid.recompile_intermediate
    inputs = [
        (
            torch.randn(t, intermediate, device=ctx.device, dtype=dtype),
            torch.randn(t, intermediate, device=ctx.device, dtype=dtype),
        )
        for t in token_counts
    ]
    eager = implementations.eager_activation(approximate)

    def ours(gate, up):
        return ctx.kernel.geglu(gate, up, approximate=approximate)

    scenarios = {
        "compile_static": lambda: implementations.fresh_compile(eager, ctx.device, dynamic=False),
        "compile_default": lambda: implementations.fresh_compile(eager, ctx.device, dynamic=None),
        "ours_compiled_dynamic": lambda: implementations.fresh_compile(ours, ctx.device, dynamic=True),
        "ours_direct": None,
    }
    results = {}
    with implementations.raised_recompile_limit(4 * len(token_counts)) as default_limit:
        for scenario, make in scenarios.items():
            try:
                variants_before = _triton_variants(ctx.kernel)
                fn = make() if make is not None else ours
                seconds = []
                for gate, up in inputs:
                    start = time.perf_counter()
                    fn(gate, up)
                    synchronize(ctx.device)
                    seconds.append(time.perf_counter() - start)
                variants_after = _triton_variants(ctx.kernel)
                results[scenario] = {
                    "status": "ok",
                    "description": RECOMPILE_SCENARIOS[scenario],
                    "graphs_compiled": implementations.compiled_graph_count() if make is not None else 0,
                    "new_triton_variants_of_ours": (
                        variants_after - variants_before if None not in (variants_before, variants_after) else None
                    ),
                    "total_s": sum(seconds),
                    "call_s": seconds,
                }
            except Exception as err:
                results[scenario] = {
                    "status": "failed",
                    "description": RECOMPILE_SCENARIOS[scenario],
                    "reason": failure_text(err),
                }
    return {
        "dtype": dtype_name(dtype),
        "approximate": approximate,
        "intermediate": intermediate,
        "token_counts": list(token_counts),
        "compile_backend": implementations.compile_backend(ctx.device),
        "dynamo_default_recompile_limit": default_limit,
        "note": (
            "each call is timed to a synchronized result, compile included; the recompile limit was raised for the "
            "count (with the default, Dynamo falls back to eager past that many shapes)"
        ),
        "results": results,
    }


def cold_start(ctx: Context, kernel_dir: Path, dtype: torch.dtype, approximate: str) -> dict:
    """The child process's report, or the failure; caches are fresh temporary directories."""
    tokens, intermediate = ctx.grid.cold_start_shape
    with tempfile.TemporaryDirectory(prefix="fused-geglu-cold-") as scratch:
        env = dict(os.environ)
        env["TRITON_CACHE_DIR"] = str(Path(scratch) / "triton")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(scratch) / "inductor")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
        command = [
            sys.executable, "-m", "geglu_triton.benchmarking.coldstart",
            "--kernel-dir", str(kernel_dir),
            "--tokens", str(tokens),
            "--intermediate", str(intermediate),
            "--dtype", dtype_name(dtype),
            "--approximate", approximate,
        ]  # fmt: skip
        try:
            child = subprocess.run(
                command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=COLD_START_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return {"status": "failed", "reason": f"the cold-start process took over {COLD_START_TIMEOUT_S} s"}
    if child.returncode != 0:
        return {"status": "failed", "reason": f"exit code {child.returncode}: {child.stderr.strip()[-1500:]}"}
    try:
        report = json.loads(child.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"status": "failed", "reason": f"no report on the child's last line: {child.stdout.strip()[-500:]!r}"}
    return {"status": "ok", **report}
