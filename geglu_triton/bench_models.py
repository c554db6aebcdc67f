"""``python -m geglu_triton bench --models``: whole Gemma3 models, eager vs ours vs Liger vs torch.compile.

Builds Gemma3 text models at the 1B, 4B, 12B and 27B configurations
(``benchmarking/model_grid.py``: the one table of their dimensions) with
random weights, and measures on each, with every implementation of the MLP
taking turns on the same model:

- the MLP alone at 1 to 4096 tokens: GPU time (CUDA-graph replay), host time
  per call (the GPU kept ahead) and wall time;
- a prefill forward: GPU and wall time, logits compared with eager's;
- decode: HF ``generate`` tokens/s and a single-token loop on a static cache,
  the greedy tokens compared with eager's, one step's GPU time;
- a training step (1B and 4B, 8 x 1024 tokens): GPU and wall time, peak memory
  above the weights, loss and gradients compared with eager's.

Writes ``models.json`` (rewritten after each model, so a run cut short keeps
what it measured), ``models.md`` (every table, then where results differ from
eager's), ``readme_table.md`` (the model-level table for the README) and
``models.png`` into ``--out`` (default ``./<date>-<device>/``, in the current
directory, as ``bench`` writes). ``--time-budget-s`` skips what
remains past it; the default plan fits in about six minutes on an H200.
Without a GPU, a tiny config runs the same code in seconds (a smoke test).
"""

from __future__ import annotations

import argparse
import dataclasses

from .benchmarking import accuracy, environment, implementations, model_report
from .benchmarking.model_grid import DTYPE, GEMMA3_SIZES, PARTS, plan_for
from .benchmarking.model_implementations import LABELS, MODEL_IMPLEMENTATIONS
from .benchmarking.model_workloads import ModelContext, differences, measure_size, measured_results, release
from .benchmarking.report import write_json
from .benchmarking.timing import Deadline, Timer
from .benchmarking.workloads import failure_text
from .errors import DistinctValues, UsageError, positive_int

SCHEMA_VERSION = 1
#: Dynamo's per-function recompile limit for the run: one compiled MLP graph per
#: input shape (token counts, prefill, decode, training), over Dynamo's default of 8.
RECOMPILE_LIMIT = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``bench``'s options for the model-level run (``--out``, ``--kernel-dir`` and ``--time-budget-s`` are shared)."""
    sizes = list(GEMMA3_SIZES)
    parser.add_argument(
        "--models",
        nargs="*",
        action=DistinctValues,
        choices=sizes,
        metavar="SIZE",
        help=f"measure whole Gemma3 models instead of the kernel grid; sizes from {', '.join(sizes)} "
        "(default: the plan's, 1b 4b 12b 27b; tiny is a smoke test; without a GPU always tiny)",
    )
    parser.add_argument("--model-parts", nargs="+", action=DistinctValues, choices=PARTS, help="with --models: what to measure (default: all)")
    parser.add_argument(
        "--model-layers",
        type=positive_int,
        help="with --models: build this many layers of every size, at most its own count (models.json records the "
        "count built; default: the plan's, fewer for 12B and 27B)",
    )


def _print(line: str) -> None:
    print(line, flush=True)


def failures(models: list[dict]) -> list[dict]:
    """Every model, part or implementation that failed (not skipped), with the reason."""
    found = [
        {"where": record["size"], "implementation": None, "reason": record["failed"]}
        for record in models
        if "failed" in record
    ]
    found += [
        {"where": where, "implementation": name, "reason": result["reason"]}
        for where, name, result in measured_results(models)
        if result.get("status") == "failed"
    ]
    return found


def run(args: argparse.Namespace) -> int:
    ignored = [
        flag
        for flag, value in (
            ("--grid/--quick", args.grid),
            ("--dtypes", args.dtypes),
            ("--approximations", args.approximations),
            ("--workloads", args.workloads),
            ("--memory-budget-gib", args.memory_budget_gib),
        )
        if value is not None
    ]
    if ignored:
        flags = ", ".join(ignored)
        raise UsageError(f"{flags}: options of the kernel grid, not of bench --models (bf16 Gemma3 models)")
    device = environment.benchmark_device()
    plan = plan_for(device.type, args.models, args.model_layers, args.time_budget_s)
    parts = tuple(args.model_parts or PARTS)
    if device.type == "cpu" and args.models and set(args.models) != set(plan.sizes):
        _print(f"bench --models: no GPU, so the tiny config instead of {' '.join(args.models)}")
    loaded = environment.load_kernel(args.kernel_dir)
    out_dir = environment.output_directory(args.out, args.kernel_dir, device)
    json_path = out_dir / "models.json"
    _print(f"bench --models: {environment.device_name(device)}, sizes {' '.join(plan.sizes)}, writing to {out_dir}")
    _print(f"bench --models: ours runs {environment.kernel_path(loaded.module, device)}")
    try:
        timer = Timer(device, plan.warmup_ms, plan.rep_ms)
        deadline = Deadline(plan.time_budget_s)
        ctx = ModelContext(
            device=device,
            timer=timer,
            plan=plan,
            kernel_dir=loaded.build_dir,
            deadline=deadline,
            implementations=MODEL_IMPLEMENTATIONS,
        )
        results = {
            "schema_version": SCHEMA_VERSION,
            "meta": environment.run_meta(device, loaded, timer.method, implementations.compile_backend(device)),
            "dtype": str(DTYPE).removeprefix("torch."),
            "plan": dataclasses.asdict(plan),
            "parts": list(parts),
            "implementations": {name: LABELS.get(name, name) for name in ctx.implementations},
            "tolerances": accuracy.model_tolerances_as_json(DTYPE),
            "models": [],
            "differences": [],
            "failures": [],
            "notes": [],
        }
        results["meta"]["compiler_warm_up_s"] = implementations.warm_up_compiler(device)
        with implementations.raised_recompile_limit(RECOMPILE_LIMIT):
            for name in plan.sizes:
                if deadline.exceeded():
                    results["models"].append({"size": name, "skipped": deadline.reason})
                    continue
                try:
                    record = measure_size(
                        ctx,
                        GEMMA3_SIZES[name],
                        parts,
                        lambda line: _print(f"[{deadline.elapsed_s():5.0f}s] {name} {line}"),
                    )
                except Exception as err:  # building the model, most likely (memory): the run goes on
                    record = {"size": name, "failed": failure_text(err)}
                    release(device)
                results["models"].append(record)
                results["differences"] = differences(results["models"])
                results["failures"] = failures(results["models"])
                write_json(json_path, results)
        results["meta"]["complete"] = True
        results["meta"]["elapsed_s"] = deadline.elapsed_s()
        written = model_report.write_all(results, out_dir)
        write_json(json_path, results)
    finally:
        loaded.close()

    _print("")
    _print(model_report.readme_table_markdown(results))
    _print("")
    _print(model_report.differences_markdown(results))
    _print(f"wrote {', '.join(p.name for p in [json_path, *written])} in {out_dir}")
    return 0
