"""Sweep the launch table of the GeGLU kernels on a GPU: tile bytes x warps, per shape class.

Evidence for ``device_tables.elementwise_config``: for each shape and layout it
times the forward and backward kernels under every candidate configuration
(side by side with eager and, when installed, Liger, on the same inputs) and
prints the best configuration per shape class. Results go to a JSON file.

    python benchmarks/tune_launch_config.py --kernel-dir build --out results.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

SHAPES = [(1, 16384), (16, 9216), (128, 4231), (1024, 4231), (1024, 16384), (4096, 16384), (8192, 24576), (16384, 14336), (8192, 73728)]
TILE_BYTES = (4096, 8192, 16384, 32768)
WARPS = (4, 8)
L2_BYTES = 60 * 2**20


def copy_bandwidth() -> float:
    """Bytes read + written per second by a large device-to-device copy."""
    src = torch.randn(2**28, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=100, return_mode="median")
    return 2 * src.numel() * src.element_size() / (ms * 1e-3)


def input_sets(n_rows, n_cols, dtype, layout, tensors_per_set):
    """Enough independent input sets that together they exceed 3x L2 (no cache hits between calls)."""
    set_bytes = tensors_per_set * n_rows * n_cols * torch.tensor([], dtype=dtype).element_size()
    count = max(1, min(16, (3 * L2_BYTES) // max(set_bytes, 1) + 1))
    sets = []
    for _ in range(count):
        if layout == "concat":
            x = torch.randn(n_rows, 2 * n_cols, device="cuda", dtype=dtype)
            gate, up = x[:, :n_cols], x[:, n_cols:]
        else:
            gate = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)
            up = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)
        sets.append((gate, up, torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)))
    return sets


def rotating(fn, sets):
    state = {"i": 0}

    def call():
        fn(*sets[state["i"] % len(sets)])
        state["i"] += 1

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()

    from kernels import get_local_kernel

    kernel = get_local_kernel(args.kernel_dir)
    tk = kernel.triton_kernels
    ops = kernel.ops
    dtype = getattr(torch, args.dtype)
    element_size = torch.tensor([], dtype=dtype).element_size()
    try:
        from liger_kernel.ops.geglu import LigerGELUMulFunction
    except ImportError:
        LigerGELUMulFunction = None

    bandwidth = copy_bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s", flush=True)
    cells = []
    for n_rows, n_cols in SHAPES:
        for layout in ("separate", "concat"):
            sets = input_sets(n_rows, n_cols, dtype, layout, tensors_per_set=6)
            out = torch.empty(n_rows, n_cols, device="cuda", dtype=dtype)
            grad_gate, grad_up = torch.empty_like(out), torch.empty_like(out)
            fwd_bytes = 3 * n_rows * n_cols * element_size
            bwd_bytes = 5 * n_rows * n_cols * element_size
            cell = {"n_rows": n_rows, "n_cols": n_cols, "layout": layout, "configs": []}

            def time_ms(fn):
                return do_bench(rotating(fn, sets), warmup=5, rep=25, return_mode="median")

            cell["eager_fwd_ms"] = time_ms(lambda g, u, d: F.gelu(g, approximate="tanh") * u)
            cell["ours_fwd_ms"] = time_ms(lambda g, u, d: ops.geglu(g, u, "tanh"))
            cell["ours_bwd_ms"] = time_ms(lambda g, u, d: ops.geglu_backward(d, g, u, "tanh"))
            if LigerGELUMulFunction is not None and n_cols <= 65536:
                cell["liger_fwd_ms"] = time_ms(lambda g, u, d: LigerGELUMulFunction.apply(g, u))
            matrices = "rows" if layout == "concat" else "flat"
            for tile_bytes in TILE_BYTES:
                for warps in WARPS:
                    # The flat (contiguous) path runs as one row of numel elements.
                    rows, cols = (n_rows, n_cols) if matrices == "rows" else (1, n_rows * n_cols)
                    block_n = max(16, min(triton.next_power_of_2(cols), tile_bytes // element_size))
                    block_m = max(1, min(triton.next_power_of_2(rows), (tile_bytes // element_size) // block_n))
                    grid = (triton.cdiv(rows, block_m) * triton.cdiv(cols, block_n),)
                    meta = dict(APPROXIMATE_TANH=True, BLOCK_M=block_m, BLOCK_N=block_n, INT64_OFFSETS=False,
                                INTERPRETED=False, num_warps=warps)

                    def fwd(g, u, d):
                        rs = g.stride(0) if matrices == "rows" else 0
                        tk.geglu_forward_kernel[grid](g, u, out, rows, cols, rs, rs, n_cols if matrices == "rows" else 0, **meta)

                    def bwd(g, u, d):
                        rs = g.stride(0) if matrices == "rows" else 0
                        oc = n_cols if matrices == "rows" else 0
                        tk.geglu_backward_kernel[grid](
                            d, g, u, grad_gate, grad_up, grad_up, rows, cols, oc, rs, rs, oc, oc, oc, **meta, STORE_OUTPUT=False
                        )

                    f_ms, b_ms = time_ms(fwd), time_ms(bwd)
                    cell["configs"].append({"tile_bytes": tile_bytes, "num_warps": warps, "block_m": block_m,
                                            "block_n": block_n, "fwd_ms": f_ms, "bwd_ms": b_ms,
                                            "fwd_tbps": fwd_bytes / (f_ms * 1e-3) / 1e12,
                                            "bwd_tbps": bwd_bytes / (b_ms * 1e-3) / 1e12})
            best_f = min(cell["configs"], key=lambda c: c["fwd_ms"])
            best_b = min(cell["configs"], key=lambda c: c["bwd_ms"])
            cell["best_fwd"], cell["best_bwd"] = best_f, best_b
            print(
                f"{n_rows:>6}x{n_cols:<6} {layout:8} eager {fwd_bytes / cell['eager_fwd_ms'] / 1e9:5.2f} "
                f"ours {fwd_bytes / cell['ours_fwd_ms'] / 1e9:5.2f} "
                f"liger {fwd_bytes / cell.get('liger_fwd_ms', float('inf')) / 1e9:5.2f} | "
                f"best fwd {best_f['fwd_tbps']:5.2f} TB/s (tile {best_f['tile_bytes']}, w{best_f['num_warps']}) "
                f"ours bwd {bwd_bytes / cell['ours_bwd_ms'] / 1e9:5.2f} best bwd {best_b['bwd_tbps']:5.2f} "
                f"(tile {best_b['tile_bytes']}, w{best_b['num_warps']})",
                flush=True,
            )
            cells.append(cell)
            del sets
    result = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "dtype": args.dtype,
        "copy_bandwidth_tbps": bandwidth / 1e12,
        "byte_model": "forward reads gate and up and writes out (3 tensors); backward reads grad_out, gate, up and writes grad_gate, grad_up (5)",
        "cells": cells,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
