"""Does a decode GEMM that loads its tiles through Hopper's tensor memory accelerator (TMA) read weights faster?

On the H100 the fused GEMM's decode table reaches 86-87% of the weight-read floor on the Gemma3 4B MLP, where
``stream_read_kernel`` (pointer loads, one 16-byte vector per thread) reaches 93%; on the H200 the 4B reaches
73-82% and the tuned read 85-86% (docs/PERFORMANCE.md, v24-v27). No configuration of the table's kernel came
within 3 us of the read. Two things the table's kernel does not do at decode:

- ``tma``: the x and weight tiles arrive by TMA (``TensorDescriptor``): one bulk copy per tile, issued by one
  thread, in place of 16-byte loads from every thread; x's missing rows are zero-filled by the copy engine.
- ``swap``: the product computed transposed, ``h^T = W x^T``: the weight tile is the MMA's M side (64-128 rows)
  and x's 16 rows its N side, the shape Hopper's warpgroup MMA takes, where a 16-row M side cannot use it.

Each variant (``ptr``/``tma`` x ``plain``/``swap``) is swept over tiles and stages for the MLPs the table
misses 90% on, then the best of each is timed side by side with the table's choice, the tuned read and a TMA
read of the same bytes (``tma_read_kernel``: the stacked weights in [BLOCK_N, BLOCK_K] boxes, the GEMM's
access pattern without the MMA), in alternating rounds after a read flush (clean L2, as at decode).

    python benchmarks/tma_decode_probe.py --kernel-dir build --out tma_decode_probe.json
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from geglu_triton.benchmarking.environment import device_properties, load_kernel, utc_now, versions
from geglu_triton.benchmarking.grid import GEMMA_MLPS
from l2_flush_probe import ReadFlushTimer
from tune_gemm_config import MAX_REL_ERROR, ROUNDS, fastest_stream_read, median_ms

MODELS = ("Gemma3 4B", "Gemma2 2B", "Gemma2 9B", "Gemma3 12B")
TOKENS = (1, 16)
#: (BLOCK_N, BLOCK_K, num_stages), num_warps 4, BLOCK_M 16: those whose pointer form fits 227 KB (some TMA forms do not).
TILES = (*itertools.product((64, 128), (64, 128), (3, 4, 5)), (64, 256, 3))


@triton.jit
def _gelu_tanh(gate):
    # tanh(u) = 2 sigmoid(2u) - 1, so 0.5 g (1 + tanh(u)) = g sigmoid(2u)
    inner = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
    return gate * tl.sigmoid(2.0 * inner)


@triton.jit
def decode_geglu_kernel(
    x_ptr, gate_ptr, up_ptr, x_desc, gate_desc, up_desc, out_ptr, n_tokens, n_out, n_in,
    TMA: tl.constexpr, SWAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of gelu(x W_gate^T) * (x W_up^T), one row tile (decode: n_tokens <= 16)."""
    col_start = tl.program_id(0) * BLOCK_N
    rows = tl.arange(0, BLOCK_M)
    cols = col_start + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        acc_up = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in tl.range(0, n_in, BLOCK_K, num_stages=NUM_STAGES):
        if TMA:
            x = x_desc.load([0, k_start])
            gate = gate_desc.load([col_start, k_start])
            up = up_desc.load([col_start, k_start])
        else:
            x = tl.load(x_ptr + rows[:, None] * n_in + k_start + ks[None, :], mask=(rows < n_tokens)[:, None], other=0.0)
            gate = tl.load(gate_ptr + cols[:, None] * n_in + k_start + ks[None, :])
            up = tl.load(up_ptr + cols[:, None] * n_in + k_start + ks[None, :])
        if SWAP:
            acc = tl.dot(gate, tl.trans(x), acc)
            acc_up = tl.dot(up, tl.trans(x), acc_up)
        else:
            acc = tl.dot(x, tl.trans(gate), acc)
            acc_up = tl.dot(x, tl.trans(up), acc_up)
    if SWAP:
        acc = tl.trans(acc)
        acc_up = tl.trans(acc_up)
    dtype = out_ptr.dtype.element_ty
    gate_out = acc.to(dtype).to(tl.float32)
    up_out = acc_up.to(dtype).to(tl.float32)
    out = (_gelu_tanh(gate_out).to(dtype).to(tl.float32) * up_out).to(dtype)
    tl.store(out_ptr + rows[:, None] * n_out + cols[None, :], out, mask=(rows < n_tokens)[:, None])


@triton.jit
def tma_read_kernel(desc, partial_sums_ptr, n_in, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr):
    """Read BLOCK_N rows of the stacked weights in [BLOCK_N, BLOCK_K] TMA boxes; write their fp32 sum."""
    row_start = tl.program_id(0) * BLOCK_N
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k_start in tl.range(0, n_in, BLOCK_K, num_stages=NUM_STAGES):
        acc += desc.load([row_start, k_start]).to(tl.float32)
    tl.store(partial_sums_ptr + tl.program_id(0), tl.sum(acc))


def _copy_bytes_per_s() -> float:
    """Device-to-device copy rate of 1 GiB (bytes read plus written per second): the floor's bandwidth."""
    src = torch.randint(0, 256, (2**30,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / (median_ms(lambda: dst.copy_(src)) * 1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    kernel = load_kernel(args.kernel_dir).module
    gemm, tables = kernel.triton_gemm_kernels, kernel.device_tables
    device = tables.describe_device(torch.cuda.current_device())
    dtype = torch.bfloat16

    copy_bytes_per_s = _copy_bytes_per_s()
    timer = ReadFlushTimer(torch.device("cuda"), warmup_ms=10, rep_ms=60)
    result = {
        "what": __doc__.splitlines()[0],
        "gpu": torch.cuda.get_device_name(),
        "device": device_properties(torch.device("cuda")),
        "versions": versions(),
        "date": utc_now().isoformat(timespec="seconds"),
        "copy_tb_per_s": copy_bytes_per_s / 1e12,
        "side_by_side": f"Timer.timings_interleaved, {ROUNDS} rounds, L2 flushed by reading before each repetition",
        "cells": [],
    }
    print(f"copy {copy_bytes_per_s / 1e12:.2f} TB/s", flush=True)
    for model, tokens in itertools.product([m for m in GEMMA_MLPS if m.name in MODELS], TOKENS):
        n_in, n_out = model.hidden, model.intermediate
        x = torch.randn(tokens, n_in, device="cuda", dtype=dtype)
        w_gate, w_up = (torch.randn(n_out, n_in, device="cuda", dtype=dtype) * n_in**-0.5 for _ in range(2))
        out = torch.empty(tokens, n_out, device="cuda", dtype=dtype)
        reference = (F.gelu(x @ w_gate.T, approximate="tanh") * (x @ w_up.T)).float()
        floor_us = 2 * w_gate.nbytes / copy_bytes_per_s * 1e6
        cell = {"model": model.name, "tokens": tokens, "floor_us": floor_us, "sweep": []}

        def variant(tma, swap, block_n, block_k, stages):
            descs = (
                TensorDescriptor.from_tensor(x, [16, block_k]),
                TensorDescriptor.from_tensor(w_gate, [block_n, block_k]),
                TensorDescriptor.from_tensor(w_up, [block_n, block_k]),
            ) if tma else (None, None, None)
            grid = (triton.cdiv(n_out, block_n),)
            return lambda: decode_geglu_kernel[grid](
                x, w_gate, w_up, *descs, out, tokens, n_out, n_in, TMA=tma, SWAP=swap, BLOCK_M=16,
                BLOCK_N=block_n, BLOCK_K=block_k, NUM_STAGES=stages, num_warps=4,
            )

        best = {}
        for tma, swap in itertools.product((False, True), (False, True)):
            name = ("tma" if tma else "ptr") + ("-swap" if swap else "")
            for block_n, block_k, stages in TILES:
                entry = {"variant": name, "block_n": block_n, "block_k": block_k, "stages": stages}
                try:
                    fn = variant(tma, swap, block_n, block_k, stages)
                    out.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    entry["rel_error"] = ((out.float() - reference).norm() / reference.norm()).item()
                    entry["us"] = timer.median_s(fn) * 1e6
                    if entry["rel_error"] < MAX_REL_ERROR and entry["us"] < best.get(name, ({}, float("inf")))[1]:
                        best[name] = (entry, entry["us"], fn)
                except Exception as err:  # out of shared memory or registers, or no TMA on this Triton
                    entry["error"] = f"{type(err).__name__}: {str(err)[:200]}"
                cell["sweep"].append(entry)
        stacked = torch.cat([w_gate, w_up])
        read_launch, read_once = fastest_stream_read(stacked.view(-1), timer)
        cell["read_once_launch"] = read_launch

        def tma_read(block_n, block_k, stages):
            desc = TensorDescriptor.from_tensor(stacked, [block_n, block_k])
            sums = torch.empty(triton.cdiv(2 * n_out, block_n), device="cuda", dtype=torch.float32)
            return lambda: tma_read_kernel[(sums.numel(),)](
                desc, sums, n_in, BLOCK_N=block_n, BLOCK_K=block_k, NUM_STAGES=stages, num_warps=4
            )

        tma_reads = []
        for tile in TILES:
            try:
                fn = tma_read(*tile)
                tma_reads.append((timer.median_s(fn), tile, fn))
            except Exception as err:  # out of shared memory
                cell.setdefault("tma_read_errors", []).append(f"{type(err).__name__}: {str(err)[:120]}")
        table = tables.gemm_config(tokens, w_gate.nbytes, device)
        side = {"table": (lambda: gemm.launch_geglu_linear(x, w_gate, w_up, None, None, out, "tanh", table), None),
                "read-once": (read_once, None)}
        if tma_reads:
            _, cell["tma_read_launch"], tma_read = min(tma_reads, key=lambda r: r[0])
            side["tma-read"] = (tma_read, None)
        for name, (entry, _, fn) in best.items():
            cell[f"best_{name}"] = entry
            side[name] = (fn, None)
        timings = timer.timings_interleaved(side, rounds=ROUNDS)
        cell["side_by_side_us"] = us = {name: t.median_s * 1e6 for name, t in timings.items()}
        print(f"{model.name:11} T={tokens:3} floor {floor_us:6.1f} | "
              + " ".join(f"{name} {v:6.1f} ({100 * floor_us / v:3.0f}%)" for name, v in us.items()), flush=True)
        result["cells"].append(cell)
        args.out.write_text(json.dumps(result, indent=1))  # after every cell: a run cut short keeps what it measured


if __name__ == "__main__":
    main()
