"""Sweep the fused GeGLU GEMM's launch table on a GPU, against the paths it replaces.

Evidence for ``device_tables.GEMM_TABLES``: its configurations, and its classes' token and weight limits.
For each model size and token count it times, on the same random inputs
(medians of the bench's ``Timer``, which flushes the L2 before every
repetition):

- ``cublas+ours``: ``x @ W_gate^T`` and ``x @ W_up^T`` through cuBLAS, then our activation kernel;
- ``eager``: the same GEMMs, then ``F.gelu(g) * u``;
- ``fused``: the fused kernel under every candidate configuration of the
  token count's class (each checked against eager's output first), timed
  one after another to pick the best;
- then eager, cublas+ours, the best configuration, the launch table's own
  (``table``), with ``--baseline-kernel-dir`` another build's table
  (``baseline table``), and ``read-once`` (one kernel that only reads the
  weights' bytes: ``stream_read_kernel`` over both, stacked, in the fastest
  of ``READ_CONFIGS``) once more, in alternating rounds (``Timer.timings_interleaved``)
  so that their ratios do not inherit drift between them. Those are the
  figures printed.

The floor of the first half is the larger of reading both weights once at
the measured copy bandwidth and its FLOPs (4 T H I) at the measured cuBLAS
rate. Token counts from 32 to 256 locate where cuBLAS overtakes the fused
kernel, per MLP size (the tables' classes past 64 tokens). Every Gemma size's MLP is swept
(``grid.GEMMA_MLPS``); each timed configuration records the shared memory
and registers of its compiled kernel, so that tables for devices with less
shared memory can be chosen from the same measurements. ``--sweep`` limits
the candidate sweep to some token counts; the others time the launch
table's choice alone.

With ``--down-proj`` each MLP's down projection is swept instead: the plain
kernel (``launch_linear``, one weight [hidden, intermediate]) against
cuBLAS's ``F.linear`` on the same weight (``cublas``), the down projection's
table (``table``) and ``read-once`` of that one weight: evidence for
``device_tables.DOWN_PROJ_TABLES``. (PERFORMANCE v13's ``--down-shapes`` run,
the gated kernel on two weights of that shape, is at commit 1d2e3ff.)

The timer flushes the L2 by writing a buffer, as ``do_bench`` does, which leaves dirty lines that the
timed kernel's reads must write back (9-10 us a call on an H100, PERFORMANCE v24); ``--read-flush``
flushes by reading one instead, leaving the L2 clean, as the layers before a decode MLP leave it.

    python benchmarks/tune_gemm_config.py --kernel-dir build --out gemm_sweep.json [--sweep 128 256] [--down-proj]
        [--read-flush] [--baseline-kernel-dir previous-build]
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.testing import do_bench

from geglu_triton.benchmarking.environment import device_properties, load_kernel, utc_now, versions
from geglu_triton.benchmarking.grid import GEMMA_MLPS
from geglu_triton.benchmarking.timing import Timer
from l2_flush_probe import ReadFlushTimer

TOKENS = (1, 8, 16, 32, 64, 128, 256)
#: Rounds of the side-by-side comparison, and the fused output's largest relative error to eager's.
ROUNDS = 3
MAX_REL_ERROR = 2e-2


@triton.jit
def stream_read_kernel(src_ptr, partial_sums_ptr, n_elements, BLOCK: tl.constexpr):
    """Read ``src`` once and write one fp32 partial sum per program: a kernel that only streams bytes.

    Program p reads blocks p, p + P, p + 2P, ... (P programs in the grid): with P a multiple of the
    SM count every SM streams its share to the end, and each thread keeps one 16-byte vector (or a
    few) in flight per block. The sum keeps the loads from being dropped; it writes P floats.
    """
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(pid * BLOCK, n_elements, tl.num_programs(0) * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        acc += tl.load(src_ptr + offsets, mask=offsets < n_elements, other=0.0).to(tl.float32)
    tl.store(partial_sums_ptr + pid, tl.sum(acc))


#: ``stream_read_kernel``'s launches tried per buffer: programs per SM (None: one program per block),
#: elements per block, warps.
READ_CONFIGS = tuple(itertools.product((1, 2, 4, 8, None), (4096, 8192, 16384), (4, 8)))


def fastest_stream_read(src: torch.Tensor, timer: Timer) -> tuple[dict, Callable[[], None]]:
    """The fastest of ``READ_CONFIGS`` reading ``src`` (contiguous): its launch, and a call that runs it.

    What one kernel that only reads these bytes takes on this device: the floor a single launch
    can reach (PERFORMANCE v12-v13 used PyTorch's sum, a general reduction, in its place). The
    fastest launch's partial sums are checked against PyTorch's sum of the same bytes.
    """
    sms = torch.cuda.get_device_properties(src.device).multi_processor_count
    timed = []
    for programs_per_sm, block, warps in READ_CONFIGS:
        programs = triton.cdiv(src.numel(), block) if programs_per_sm is None else programs_per_sm * sms
        partial_sums = torch.empty(programs, device=src.device, dtype=torch.float32)

        def read(programs=programs, block=block, warps=warps, partial_sums=partial_sums):
            stream_read_kernel[(programs,)](src, partial_sums, src.numel(), BLOCK=block, num_warps=warps)

        launch = {"programs_per_sm": programs_per_sm, "programs": programs, "block": block, "num_warps": warps}
        timed.append((timer.median_s(read), launch, read, partial_sums))
    _, launch, read, partial_sums = min(timed, key=lambda entry: entry[0])
    read()
    got, expected = partial_sums.sum().item(), src.sum(dtype=torch.float32).item()
    if abs(got - expected) > 1e-3 * (abs(expected) + src.numel() ** 0.5):
        raise AssertionError(f"stream_read_kernel {launch} summed {got}, PyTorch {expected}")
    return launch, read


def candidates(gemm, tokens: int, down_proj: bool, gemv: bool) -> list:
    """The configurations tried for this token count's class (of the down projection's table with ``down_proj``).

    ``gemv``: one-token tiles only (BLOCK_M 1: products reduced along K on the CUDA cores, no tensor cores).
    """
    config = gemm.GemmConfig
    if gemv:
        grid = itertools.product((2, 4, 8, 16), (512, 1024, 2048), (4, 8), (1, 3))
        return [config(1, n, k, 1, w, s) for n, k, w, s in grid]
    # Stages from 2 up: the shallow ones are what fits ~100 KB (sm_86/89/120) and 64 KB (AMD) of shared memory.
    if down_proj:  # N = hidden is narrow, K = intermediate long: narrow tiles for enough programs, long K steps
        grid = itertools.product((16, 32, 64), (128, 256, 512), (4,), (2, 3, 4, 5, 6))
        return [config(16, n, k, 1, w, s) for n, k, w, s in grid]
    if tokens <= 16:
        grid = itertools.product((16, 32, 64, 128), (64, 128, 256), (4,), (2, 3, 4, 5))
        return [config(16, n, k, 1, w, s) for n, k, w, s in grid]
    if tokens <= 64:
        grid = itertools.product((32, 64, 128), (64, 128), (4,), (2, 3, 5))
        return [config(min(64, triton.next_power_of_2(tokens)), n, k, 8, w, s) for n, k, w, s in grid]
    if tokens <= 512:  # the crossover region: medium tiles too, so that few tiles still fill the SMs
        grid = itertools.product(((64, 64, 64, 4), (64, 128, 64, 4), (128, 64, 64, 4), (128, 128, 64, 8)), (3, 4))
        return [config(m, n, k, 8, w, s) for (m, n, k, w), s in grid]
    shapes = [(64, 128, 64, 4), (128, 64, 64, 4), (128, 128, 64, 8), (128, 128, 32, 8), (64, 256, 64, 8), (128, 256, 32, 8)]
    return [config(m, n, k, 8, w, s) for (m, n, k, w), s in itertools.product(shapes, (3, 4))]


def config_fields(config) -> dict | None:
    """A GemmConfig's fields by name (a NamedTuple's since v40; a baseline build's may be a dataclass), or None."""
    if config is None:
        return None
    return config._asdict() if hasattr(config, "_asdict") else dict(vars(config))


def compiled_resources(gemm, config) -> dict:
    """Shared memory (bytes) and registers per thread of the kernel last compiled for ``config``'s tiles and stages."""
    tiles = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k, "GROUP_M": config.group_m}
    for (_, options, *_), compiled in reversed(gemm._launch_mlp_gemm_kernel._compiled.items()):
        constexprs = dict(options.constexprs)
        same_launch = (options.num_warps, options.num_stages) == (config.num_warps, config.num_stages)
        if same_launch and all(constexprs[name] == value for name, value in tiles.items()):
            return {"shared_bytes": compiled.metadata.shared, "registers": compiled.n_regs}
    return {}


def median_ms(fn) -> float:
    return do_bench(fn, warmup=10, rep=60, return_mode="median")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--approximate", default="tanh")
    parser.add_argument("--tokens", type=int, nargs="*", default=TOKENS, help="token counts (default: %(default)s)")
    parser.add_argument("--models", nargs="*", help="model names of grid.GEMMA_MLPS (default: all)")
    parser.add_argument(
        "--sweep", type=int, nargs="*", default=TOKENS, help="token counts whose candidates are swept (default: all)"
    )
    parser.add_argument(
        "--down-proj",
        action="store_true",
        help="each MLP's down projection instead (the plain kernel on one [hidden, intermediate] weight) against "
        "cuBLAS's F.linear",
    )
    parser.add_argument(
        "--gemv", action="store_true", help="sweep one-token tiles only (BLOCK_M 1, the GEMV form); with --tokens 1"
    )
    parser.add_argument(
        "--baseline-kernel-dir",
        type=Path,
        default=None,
        help="another build, whose launch table's choice is timed beside this one's (before/after a table change; "
        "the fused GEMM's table only, not with --down-proj)",
    )
    parser.add_argument(
        "--read-flush",
        action="store_true",
        help="flush the L2 by reading a buffer, not writing it, before every timed repetition",
    )
    args = parser.parse_args()
    if args.baseline_kernel_dir and args.down_proj:
        parser.error("--baseline-kernel-dir times the fused GEMM's table, not the down projection's: drop one of them")

    kernel = load_kernel(args.kernel_dir).module
    baseline = load_kernel(args.baseline_kernel_dir).module if args.baseline_kernel_dir else None
    gemm = kernel.triton_gemm_kernels
    dtype, approximate = torch.bfloat16, args.approximate

    src = torch.randint(0, 256, (2**30,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_bytes_per_s = 2 * src.numel() / (median_ms(lambda: dst.copy_(src)) * 1e-3)
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=dtype) for _ in range(2))
    matmul_flop_per_s = 2 * 8192**3 / (median_ms(lambda: a @ b) * 1e-3)
    del src, dst, a, b
    print(f"copy {copy_bytes_per_s / 1e12:.2f} TB/s, matmul {matmul_flop_per_s / 1e12:.0f} TFLOP/s", flush=True)

    timer = (ReadFlushTimer if args.read_flush else Timer)(torch.device("cuda"), warmup_ms=10, rep_ms=60)
    # What this timer gives a kernel that moves next to nothing (our activation on 16 elements): the
    # launch latency, ramp and drain that any one kernel pays on top of its memory traffic.
    tiny = torch.zeros(16, device="cuda", dtype=dtype)
    fixed_s = timer.timings_interleaved({"tiny": (lambda: kernel.geglu(tiny, tiny), None)}, rounds=ROUNDS)["tiny"].median_s
    print(f"one kernel's fixed cost under this timer: {fixed_s * 1e6:.1f} us", flush=True)
    cells = []
    result = {
        "what": "MLP GEMM launch-table sweep: "
        + ("the down projection (plain kernel, one weight)" if args.down_proj else "the gated first half (both projections and the GeGLU)"),
        "gpu": torch.cuda.get_device_name(),
        "device": device_properties(torch.device("cuda")),
        "versions": versions(),
        "date": utc_now().isoformat(timespec="seconds"),
        "dtype": "bf16",
        "approximate": approximate,
        "copy_tb_per_s": copy_bytes_per_s / 1e12,
        "matmul_tflop_per_s": matmul_flop_per_s / 1e12,
        "floor": "max(read the weights once at the copy bandwidth, 2*T*K*N FLOPs per weight at the matmul rate)",
        "fixed_cost_us": fixed_s * 1e6,
        "fixed_cost": "the timer's median for the activation kernel on 16 elements (any one kernel's launch, ramp, drain)",
        "side_by_side": f"Timer.timings_interleaved, {ROUNDS} rounds, L2 flushed before each repetition "
        + ("by reading a buffer (clean lines)" if args.read_flush else "by writing a buffer (dirty lines)"),
        "cells": cells,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    models = [m for m in GEMMA_MLPS if not args.models or m.name in args.models]
    tables = kernel.device_tables
    device = tables.describe_device(torch.cuda.current_device())
    if baseline is not None:
        baseline_device = baseline.device_tables.describe_device(torch.cuda.current_device())
    for model, tokens in itertools.product(models, args.tokens):
        # The down projection maps intermediate to hidden; the first half hidden to intermediate.
        n_in, n_out = (model.intermediate, model.hidden) if args.down_proj else (model.hidden, model.intermediate)
        x = torch.randn(tokens, n_in, device="cuda", dtype=dtype)
        weights = [torch.randn(n_out, n_in, device="cuda", dtype=dtype) * n_in**-0.5 for _ in range(1 if args.down_proj else 2)]
        floor_s = max(
            len(weights) * weights[0].numel() * 2 / copy_bytes_per_s,
            2 * len(weights) * tokens * n_in * n_out / matmul_flop_per_s,
        )
        out = torch.empty(tokens, n_out, device="cuda", dtype=dtype)
        if args.down_proj:
            (weight,) = weights
            references = {"cublas": lambda: F.linear(x, weight)}
            table = tables.down_proj_table(device)[0].config  # every shape: the form's own configuration

            def ours_with(config):
                return lambda: gemm.launch_linear(x, weight, None, out, config)

        else:
            w_gate, w_up = weights
            references = {
                "eager": lambda: F.gelu(x @ w_gate.T, approximate=approximate) * (x @ w_up.T),
                "cublas+ours": lambda: kernel.geglu(x @ w_gate.T, x @ w_up.T, approximate=approximate),
            }
            table = tables.gemm_config(tokens, w_gate.nbytes, device)

            def ours_with(config, gemm=gemm):
                return lambda: gemm.launch_geglu_linear(x, w_gate, w_up, None, None, out, approximate, config)

        reference = next(iter(references.values()))().float()
        cell = {"model": model.name, "n_in": n_in, "n_out": n_out, "tokens": tokens}
        cell["floor_us"] = floor_s * 1e6
        cell["table_config"] = config_fields(table)
        cell["configs"] = []
        swept = candidates(gemm, tokens, args.down_proj, args.gemv) if tokens in args.sweep else [table] if table else []
        for config in swept:
            entry = {"config": config_fields(config)}
            try:
                out.fill_(float("nan"))
                ours_with(config)()
                torch.cuda.synchronize()
                entry["rel_error_vs_eager"] = ((out.float() - reference).norm() / reference.norm()).item()
                entry["us"] = timer.median_s(ours_with(config)) * 1e6
                entry.update(compiled_resources(gemm, config))
            except Exception as err:  # out of shared memory or registers: record and go on
                entry["error"] = f"{type(err).__name__}: {str(err)[:200]}"
            cell["configs"].append(entry)
        timed = [c for c in cell["configs"] if "us" in c and c["rel_error_vs_eager"] < MAX_REL_ERROR]
        best = min(timed, key=lambda c: c["us"]) if timed else None
        cell["best"] = best
        # What one kernel that only reads the same bytes takes (the weights, stacked): the floor a
        # single launch can reach, against the copy-rate floor above.
        stacked_weights = torch.cat(weights).view(-1)
        cell["read_once_launch"], read_once = fastest_stream_read(stacked_weights, timer)
        side_by_side = {name: (fn, None) for name, fn in references.items()}
        side_by_side["read-once"] = (read_once, None)
        if table:
            side_by_side["table"] = (ours_with(table), None)
        if baseline is not None:
            baseline_config = baseline.device_tables.gemm_config(tokens, w_gate.nbytes, baseline_device)
            cell["baseline_table_config"] = config_fields(baseline_config)
            if baseline_config:
                side_by_side["baseline table"] = (ours_with(baseline_config, baseline.triton_gemm_kernels), None)
        if best:
            side_by_side["best"] = (ours_with(gemm.GemmConfig(**best["config"])), None)
        timings = timer.timings_interleaved(side_by_side, rounds=ROUNDS)
        cell["side_by_side_us"] = {name: timing.median_s * 1e6 for name, timing in timings.items()}
        us = cell["side_by_side_us"]
        reference_name = next(iter(references))
        ours = us.get("table", us.get("best", float("nan")))
        print(
            f"{model.name:10} T={tokens:5} floor {cell['floor_us']:8.1f} us | "
            + " ".join(f"{name} {us[name]:8.1f}" for name in references)
            + f" table {us.get('table', float('nan')):8.1f} ({100 * cell['floor_us'] / ours:4.0f}% of floor, "
            f"{100 * (cell['floor_us'] + fixed_s * 1e6) / ours:4.0f}% of floor + fixed cost, "
            f"{100 * us['read-once'] / ours:4.0f}% of one read-only kernel's {us['read-once']:.1f} us, "
            f"{us[reference_name] / ours:.2f}x {reference_name}) best {us.get('best', float('nan')):8.1f} "
            f"{best['config'] if best else None}"
            + (f" baseline table {us['baseline table']:8.1f}" if "baseline table" in us else ""),
            flush=True,
        )
        cells.append(cell)
        args.out.write_text(json.dumps(result, indent=1))  # after every cell: a run cut short keeps what it measured
        del x, weights, out, reference, stacked_weights, references, read_once
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
