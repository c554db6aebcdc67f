"""``python -m geglu_triton bench``: eager vs torch.compile vs Liger vs ours, side by side.

One process, the same fresh N(0, 1) inputs for every implementation of a
cell, medians of CUDA-event timings, input sets rotated past the L2 cache,
every output checked against float64. It measures the device's copy
bandwidth and bf16 matmul rate first and states every figure against them.

With ``--models``, whole Gemma3 models instead (``bench_models``).

Writes into ``--out`` (default ``./<date>-<device>/``, in the current directory):
``results.json`` (every figure of every cell, rewritten after each section,
so a run cut short still leaves its results), ``results.md`` (the headline
and per-cell tables) and a few PNG plots. Without a GPU the same code runs
on the CPU at tiny sizes (the ``cpu`` grid), so CI can smoke-test it.

What is measured lives in ``benchmarking/grid.py``; how, in the other
modules of ``benchmarking/``.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import torch

from . import bench_models
from .benchmarking import accuracy, environment, host, implementations, report, workloads
from .benchmarking.grid import (
    APPROXIMATIONS,
    DEFAULT_MEMORY_BUDGET_GIB,
    DTYPES,
    GRIDS,
    HOST,
    WORKLOADS,
    Grid,
    dtype_name,
    grid_for,
)
from .benchmarking.timing import (
    CopyCeiling,
    Deadline,
    MatmulCeiling,
    Timer,
    measure_copy_ceiling,
    measure_matmul_ceiling,
)
from .errors import DistinctValues, UsageError, directory_to_read, directory_to_write, positive_float

SCHEMA_VERSION = 1
#: Size of the copy that measures the bandwidth ceiling, and of the matmul that measures the FLOP rate.
COPY_BYTES = {"cuda": 2 * 2**30, "cpu": 64 * 2**20}
MATMUL_N = {"cuda": 8192, "cpu": 256}
MATMUL_DTYPE = torch.bfloat16


def add_arguments(parser: argparse.ArgumentParser) -> None:
    grid = parser.add_mutually_exclusive_group()
    grid.add_argument(
        "--grid",
        choices=list(GRIDS),
        help="what to measure: full (default on a GPU, ~5 min on an H200), quick (~1.5 min), tiny (a smoke test; "
        "always used without a GPU)",
    )
    grid.add_argument("--quick", dest="grid", action="store_const", const="quick", help="the same as --grid quick")
    parser.add_argument(
        "--out", type=directory_to_write, help="output directory (default: ./<date>-<device>/ in the current directory)"
    )
    several = {"nargs": "+", "action": DistinctValues}
    parser.add_argument("--dtypes", **several, choices=list(DTYPES), help="dtypes (default: the grid's)")
    parser.add_argument("--workloads", **several, choices=WORKLOADS, help="what to run (default: all)")
    parser.add_argument("--approximations", **several, choices=APPROXIMATIONS, help="GELU forms (default: tanh)")
    parser.add_argument(
        "--kernel-dir", type=directory_to_read, help="an existing build (default: build this checkout into a temp dir)"
    )
    parser.add_argument(
        "--memory-budget-gib",
        type=positive_float,
        help=f"skip cells whose inputs and outputs need more (default: {DEFAULT_MEMORY_BUDGET_GIB})",
    )
    parser.add_argument(
        "--time-budget-s",
        type=positive_float,
        help="skip what remains past this (default: the grid's, or the model plan's)",
    )
    bench_models.add_arguments(parser)


def _grid_from(args: argparse.Namespace, device: torch.device) -> Grid:
    grid = grid_for(device.type, args.grid)
    changes = {}
    if args.dtypes:
        changes["dtypes"] = changes["mlp_dtypes"] = tuple(DTYPES[name] for name in args.dtypes)
    if args.approximations:
        changes["approximations"] = tuple(args.approximations)
    if args.time_budget_s is not None:
        changes["time_budget_s"] = args.time_budget_s
    return dataclasses.replace(grid, **changes)


def _grid_as_json(grid: Grid) -> dict:
    described = dataclasses.asdict(grid)
    for key in ("dtypes", "mlp_dtypes", "compile_everywhere_dtypes"):
        described[key] = [dtype_name(d) for d in getattr(grid, key)]
    described["mlp_cells"] = [{"model": dataclasses.asdict(model), "tokens": t} for model, t in grid.mlp_cells]
    return described


def _print(line: str) -> None:
    print(line, flush=True)


def _run_cells(cells: list, results: dict, counter: dict, deadline: Deadline) -> None:
    for bench in cells:
        counter["done"] += 1
        record = workloads.measure_cell(bench)
        results["cells"].append(record)
        _print(
            f"[{counter['done']:>4}/{counter['total']} {deadline.elapsed_s():5.0f}s] {report.progress_line(record['title'], record)}"
        )


def _run_host(ctx: workloads.Context, loaded: environment.LoadedKernel, results: dict) -> None:
    dtype, approximate = ctx.grid.dtypes[0], ctx.grid.approximations[0]
    steps = {
        "call_overhead": lambda: host.call_overhead(ctx, dtype, approximate),
        "cold_start": lambda: host.cold_start(ctx, loaded.build_dir, dtype, approximate),
        "recompilations": lambda: host.recompilations(ctx, dtype, approximate),
    }
    for name, measure in steps.items():
        if ctx.deadline.exceeded():
            results["host"][name] = {"status": "skipped", "reason": ctx.deadline.reason}
            continue
        _print(f"host: {name} ...")
        try:
            results["host"][name] = measure()
        except Exception as err:  # a host-side measurement failing must not lose the run
            results["host"][name] = {"status": "failed", "reason": workloads.failure_text(err)}
        _print(f"[{ctx.deadline.elapsed_s():5.0f}s] host: {report.host_line(name, results['host'][name])}")


def _measure_ceilings(timer: Timer, device: torch.device) -> tuple[CopyCeiling, MatmulCeiling]:
    copy = measure_copy_ceiling(timer, COPY_BYTES[device.type])
    matmul = measure_matmul_ceiling(timer, MATMUL_N[device.type], MATMUL_DTYPE, dtype_name(MATMUL_DTYPE))
    _print(
        f"ceilings: copy {copy.bytes_per_s / 1e12:.3f} TB/s (read + write of {copy.bytes_copied / 2**30:.2f} GiB), "
        f"matmul {matmul.flop_per_s / 1e12:.1f} TFLOP/s ({matmul.n}^3 {matmul.dtype})"
    )
    return copy, matmul


def _new_results(ctx: workloads.Context, loaded: environment.LoadedKernel, names: tuple[str, ...]) -> dict:
    """The results file before any cell: what ran, where, with what, against which ceilings."""
    device, copy, matmul = ctx.device, ctx.copy, ctx.matmul
    return {
        "schema_version": SCHEMA_VERSION,
        "meta": environment.run_meta(device, loaded, ctx.timer.method, implementations.compile_backend(device)),
        "ceilings": {
            "copy": {**dataclasses.asdict(copy), "tb_per_s": copy.bytes_per_s / 1e12, "bytes_counted": "read + write"},
            "matmul": {**dataclasses.asdict(matmul), "tflop_per_s": matmul.flop_per_s / 1e12, "inputs": "N(0, 1)"},
        },
        "byte_model": workloads.BYTE_MODEL,
        "tolerances": accuracy.as_json(),
        "grid": _grid_as_json(ctx.grid),
        "workloads": list(names),
        "cells": [],
        "host": {},
        "failures": [],
        "notes": [],
    }


def _run_plan(
    ctx: workloads.Context, loaded: environment.LoadedKernel, names: tuple[str, ...], results: dict, json_path: Path
) -> None:
    """Every section, most important first (the deadline cuts from the end); results rewritten after each."""
    first_dtype, *other_dtypes = ctx.grid.dtypes
    plan = [
        workloads.activation_cells(ctx, first_dtype, names),
        workloads.mlp_cells(ctx, names),
        HOST,
        *(workloads.activation_cells(ctx, dtype, names) for dtype in other_dtypes),
    ]
    counter = {"done": 0, "total": sum(len(step) for step in plan if step is not HOST)}
    for step in plan:
        if step is HOST:
            if HOST in names:
                _run_host(ctx, loaded, results)
        else:
            _run_cells(step, results, counter, ctx.deadline)
        results["failures"] = report.failures(results)
        report.write_json(json_path, results)


def run(args: argparse.Namespace) -> int:
    if args.models is not None:
        return bench_models.run(args)
    if args.model_parts or args.model_layers is not None:
        raise UsageError("--model-parts and --model-layers apply to whole models: add --models")
    device = environment.benchmark_device()
    grid = _grid_from(args, device)
    names = tuple(args.workloads or WORKLOADS)

    if device.type == "cpu" and args.grid not in (None, grid.name):
        _print(f"bench: no GPU, so the {grid.name!r} grid instead of {args.grid!r}")
    loaded = environment.load_kernel(args.kernel_dir)
    out_dir = environment.output_directory(args.out, args.kernel_dir, device)
    json_path = out_dir / "results.json"
    _print(f"bench: {environment.device_name(device)}, grid {grid.name!r}, writing to {out_dir}")
    _print(f"bench: ours runs {environment.kernel_path(loaded.module, device)}")
    try:
        timer = Timer(device, grid.warmup_ms, grid.rep_ms)
        deadline = Deadline(grid.time_budget_s)
        copy, matmul = _measure_ceilings(timer, device)
        ctx = workloads.Context(
            device=device,
            timer=timer,
            kernel=loaded.module,
            grid=grid,
            copy=copy,
            matmul=matmul,
            memory_budget_bytes=int((args.memory_budget_gib or DEFAULT_MEMORY_BUDGET_GIB) * 2**30),
            deadline=deadline,
        )
        results = _new_results(ctx, loaded, names)
        results["meta"]["compiler_warm_up_s"] = implementations.warm_up_compiler(device)
        _run_plan(ctx, loaded, names, results, json_path)
        results["meta"]["complete"] = True
        results["meta"]["elapsed_s"] = deadline.elapsed_s()
        written = report.write_all(results, out_dir)
        report.write_json(json_path, results)
    finally:
        loaded.close()

    _print("")
    _print(report.headline_markdown(results))
    _print(f"wrote {', '.join(p.name for p in [json_path, *written])} in {out_dir}")
    flagged = [f for f in results["failures"] if f["kind"] == "accuracy"]
    if flagged:
        _print(f"{len(flagged)} result(s) over their accuracy tolerance: see 'failures' in results.json")
    return 0
