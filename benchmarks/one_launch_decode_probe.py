"""Probe: a decode MLP in one launch, both halves in one kernel, against ours' two launches and eager's five ops.

The question (issue 15, item 4): inside ``generate`` ours' decode call costs
0.81-0.85x eager's host time (PERFORMANCE v41-v42), where the target is 0.7x.
Of its host time the two GEMM launches and their two output allocations are
the largest part, and no trimming of Python takes a launch away. One kernel
for the whole MLP at one token would: each program computes BLOCK_N columns
of h = GeGLU(x W_gate^T, x W_up^T), rounded as eager rounds it, and at once
multiplies them into the down weight's matching columns, a partial sum of
every output element. The programs' partial sums then have to meet:
- in any order: float32 atomic adds into a workspace, which the program that
  finishes last (a counter says which) rounds to the output and clears. The
  order of the additions changes from call to call, so the output is not
  bitwise repeatable (cuBLAS's and ours' are);
- ordered: each program writes its partial sums to a row of its own; the last
  program of each group of about sqrt(programs) sums its group's rows in
  program order, and the last group to finish sums the groups' rows in group
  order and rounds. The same additions in the same order on every call, for
  two short serial tails and the partial sums' round trip through L2.
Either way the workspace is state shared by the calls on it.

Per Gemma3 1B and 4B MLP at one token, bf16, this measures:
- the output of both variants against eager's and ours' (largest
  difference, over 20 calls on one input), and whether those calls agree bitwise;
- GPU time per call by CUDA-graph replay, over enough MLP copies that the
  weights come from HBM, not L2;
- host time per call: a loop behind a GPU spin, fastest of ROUNDS rounds,
  the arms in turns; the ordered variant's fastest configuration both alone and inside the layer
  (``GeGLUMLP.forward`` with ``ops.geglu_mlp_impl`` replaced by it), which is
  what the layer would cost with it.

    python benchmarks/one_launch_decode_probe.py --kernel-dir build --out one_launch.json
    TRITON_INTERPRET=1 python benchmarks/one_launch_decode_probe.py --kernel-dir build --check-only   # CPU

``--check-only`` runs the correctness checks on small shapes (under the
interpreter on a CPU: the kernel's logic, not its timing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from pathlib import Path

import torch
import triton
import triton.language as tl

from geglu_triton.benchmarking.environment import device_name, load_kernel, utc_now, versions
from geglu_triton.benchmarking.grid import GEMMA3_1B, GEMMA3_4B, MLPModel
from geglu_triton.benchmarking.modules import GemmaStyleMLP
from geglu_triton.benchmarking.timing import capture_graph, fastest_host_rounds, l2_cache_bytes

#: Tile configurations tried: (BLOCK_N intermediate columns a program, BLOCK_K, BLOCK_H output rows a step, warps).
CONFIGS = ((16, 512, 128, 4), (32, 256, 64, 4), (32, 512, 128, 8), (64, 256, 64, 8))
ROUNDS = 15
REPEATS = 20
REPLAYS = 50

# The kernel package's rounding helpers (@triton.jit functions), bound when the package is loaded (main): the
# kernel's first launch compiles it with them, so it rounds exactly as ours' fused GEMM does.
round_to = geglu_rounded_like_eager = None


@triton.jit
def _geglu_columns(
    x_ptr, gate_weight_ptr, up_weight_ptr, n_hidden, n_intermediate, dtype: tl.constexpr,
    APPROXIMATE_TANH: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """This program's BLOCK_N columns of h = GeGLU(x W_gate^T, x W_up^T) for one token (0 past the end), in fp32
    holding ``dtype`` values: a GEMV over the hidden dimension (products on the CUDA cores, fp32 sums), rounded
    as eager rounds its projections and its GeGLU. Also the columns, and which are in range."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_cols = cols < n_intermediate
    ks = tl.arange(0, BLOCK_K)
    gate_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
    up_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k_start in range(0, n_hidden, BLOCK_K):
        k = k_start + ks
        in_k = k < n_hidden
        x = tl.load(x_ptr + k, mask=in_k, other=0.0).to(tl.float32)
        offsets = cols[:, None] * n_hidden + k[None, :]
        mask = in_cols[:, None] & in_k[None, :]
        gate_sum += tl.sum(tl.load(gate_weight_ptr + offsets, mask=mask, other=0.0).to(tl.float32) * x[None, :], axis=1)
        up_sum += tl.sum(tl.load(up_weight_ptr + offsets, mask=mask, other=0.0).to(tl.float32) * x[None, :], axis=1)
    gate = round_to(gate_sum, dtype, INTERPRETED).to(tl.float32)
    up = round_to(up_sum, dtype, INTERPRETED).to(tl.float32)
    return geglu_rounded_like_eager(gate, up, dtype, APPROXIMATE_TANH, INTERPRETED).to(tl.float32), cols, in_cols


@triton.jit
def _down_partial(down_weight_ptr, h, cols, in_cols, rows, in_rows, n_intermediate):
    """These columns' share of output rows ``rows``: h W_down[rows, cols]^T in fp32 (each weight row's BLOCK_N
    columns are contiguous)."""
    weight = tl.load(
        down_weight_ptr + rows[:, None] * n_intermediate + cols[None, :], mask=in_rows[:, None] & in_cols[None, :], other=0.0
    )
    return tl.sum(weight.to(tl.float32) * h[None, :], axis=1)


@triton.jit
def one_launch_mlp_kernel(
    x_ptr,
    gate_weight_ptr,
    up_weight_ptr,
    down_weight_ptr,
    sums_ptr,
    counters_ptr,
    out_ptr,
    n_hidden,
    n_intermediate,
    APPROXIMATE_TANH: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_H: tl.constexpr,
    GROUP: tl.constexpr,
    ORDERED: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """y = GeGLU(x W_gate^T, x W_up^T) W_down^T for one token x [hidden]; weights as nn.Linear holds them.

    The workspace, zero before and after a launch: ``sums`` float32, ``counters`` int32. Any order (ORDERED
    False): sums [hidden], counters [1]; each program adds its partial sums into ``sums`` atomically, and the
    last one to finish rounds them. Ordered: sums [programs + groups, hidden], counters [groups + 1]; each
    program writes its partial sums to its own row; the last program of each GROUP sums the group's rows in
    program order, and the last group to finish sums the groups' rows in group order and rounds: the same
    additions in the same order on every call, whatever order the programs finish in.
    """
    dtype = out_ptr.dtype.element_ty
    h, cols, in_cols = _geglu_columns(
        x_ptr, gate_weight_ptr, up_weight_ptr, n_hidden, n_intermediate, dtype, APPROXIMATE_TANH, BLOCK_N, BLOCK_K,
        INTERPRETED,
    )
    program, n_programs = tl.program_id(0), tl.num_programs(0)
    hs = tl.arange(0, BLOCK_H)
    if not ORDERED:
        for h_start in range(0, n_hidden, BLOCK_H):
            rows = h_start + hs
            in_rows = rows < n_hidden
            partial = _down_partial(down_weight_ptr, h, cols, in_cols, rows, in_rows, n_intermediate)
            tl.atomic_add(sums_ptr + rows, partial, mask=in_rows, sem="relaxed")
        # The last program to finish (everyone's adds before it: the barrier, then the counter's
        # acquire-release) rounds the sums once, as cuBLAS's epilogue does, and clears the workspace.
        tl.debug_barrier()
        if tl.atomic_add(counters_ptr, 1, sem="acq_rel") == n_programs - 1:
            for h_start in range(0, n_hidden, BLOCK_H):
                rows = h_start + hs
                in_rows = rows < n_hidden
                # Read at L2; the counter's acquire already orders it after every add (no fence per read).
                total = tl.atomic_add(sums_ptr + rows, tl.zeros((BLOCK_H,), dtype=tl.float32), mask=in_rows, sem="relaxed")
                tl.store(out_ptr + rows, round_to(total, dtype, INTERPRETED), mask=in_rows)
                tl.store(sums_ptr + rows, tl.zeros((BLOCK_H,), dtype=tl.float32), mask=in_rows)
            tl.store(counters_ptr, 0)
    else:
        n_groups = tl.cdiv(n_programs, GROUP)
        group = program // GROUP
        first = group * GROUP
        for h_start in range(0, n_hidden, BLOCK_H):
            rows = h_start + hs
            in_rows = rows < n_hidden
            partial = _down_partial(down_weight_ptr, h, cols, in_cols, rows, in_rows, n_intermediate)
            tl.store(sums_ptr + program * n_hidden + rows, partial, mask=in_rows)
        tl.debug_barrier()
        if tl.atomic_add(counters_ptr + group, 1, sem="acq_rel") == tl.minimum(GROUP, n_programs - first) - 1:
            for h_start in range(0, n_hidden, BLOCK_H):
                rows = h_start + hs
                in_rows = rows < n_hidden
                total = tl.zeros((BLOCK_H,), dtype=tl.float32)
                for member in range(first, tl.minimum(first + GROUP, n_programs)):  # program order
                    total += tl.load(sums_ptr + member * n_hidden + rows, mask=in_rows, other=0.0, cache_modifier=".cg")
                tl.store(sums_ptr + (n_programs + group) * n_hidden + rows, total, mask=in_rows)
            tl.store(counters_ptr + group, 0)
            tl.debug_barrier()
            if tl.atomic_add(counters_ptr + n_groups, 1, sem="acq_rel") == n_groups - 1:
                for h_start in range(0, n_hidden, BLOCK_H):
                    rows = h_start + hs
                    in_rows = rows < n_hidden
                    total = tl.zeros((BLOCK_H,), dtype=tl.float32)
                    for member in range(0, n_groups):  # group order
                        total += tl.load(
                            sums_ptr + (n_programs + member) * n_hidden + rows, mask=in_rows, other=0.0, cache_modifier=".cg"
                        )
                    tl.store(out_ptr + rows, round_to(total, dtype, INTERPRETED), mask=in_rows)
                tl.store(counters_ptr + n_groups, 0)


def one_launch_mlp(kernel, config, ordered: bool):
    """A function (x, gate_weight, up_weight, down_weight) -> y through ``one_launch_mlp_kernel`` with ``config``,
    launched as ours' kernels are (the package's Launcher), with one workspace per device and shape."""
    launcher_module = kernel.triton_launcher
    launch = launcher_module.Launcher(one_launch_mlp_kernel)
    block_n, block_k, block_h, num_warps = config
    workspaces: dict = {}

    def mlp(x, gate_weight, up_weight, down_weight, *_unused):
        n_intermediate, n_hidden = gate_weight.shape
        if x.numel() != n_hidden:
            raise ValueError(f"the one-launch probe computes one token, got x of shape {tuple(x.shape)}")
        key = (x.get_device(), n_hidden, n_intermediate)
        plan = workspaces.get(key)
        if plan is None:  # the first call of a shape: its grid, groups, workspace and constexprs
            n_programs = triton.cdiv(n_intermediate, block_n)
            # Groups of about sqrt(programs): the two ordered sums then read about as many rows each.
            group = triton.next_power_of_2(math.isqrt(n_programs))
            n_groups = triton.cdiv(n_programs, group)
            sums_rows, counters = (n_programs + n_groups, n_groups + 1) if ordered else (1, 1)
            workspace = (
                torch.zeros(sums_rows * n_hidden, dtype=torch.float32, device=x.device),
                torch.zeros(counters, dtype=torch.int32, device=x.device),
            )
            options = launcher_module.LaunchOptions(
                constexprs=(
                    ("APPROXIMATE_TANH", True),
                    ("BLOCK_N", block_n),
                    ("BLOCK_K", block_k),
                    ("BLOCK_H", block_h),
                    ("GROUP", group),
                    ("ORDERED", ordered),
                    ("INTERPRETED", launcher_module.RUNS_INTERPRETED),
                ),
                num_warps=num_warps,
            )
            plan = workspaces[key] = (workspace, options, (n_programs, 1, 1))
        workspace, options, grid = plan
        out = x.new_empty((*x.shape[:-1], n_hidden))
        launch(grid, (x, gate_weight, up_weight, down_weight, *workspace, out), (n_hidden, n_intermediate), options)
        return out

    return mlp


def _weights(module):
    return module.gate_proj.weight, module.up_proj.weight, module.down_proj.weight


def check(kernel, model: MLPModel, config, ordered: bool, device) -> dict:
    """The one-launch output against eager's and ours', and whether REPEATS calls agree bitwise."""
    module = GemmaStyleMLP(model.hidden, model.intermediate, device=device, dtype=torch.bfloat16)
    x = torch.randn(1, 1, model.hidden, device=device, dtype=torch.bfloat16)
    mlp = one_launch_mlp(kernel, config, ordered)
    with torch.no_grad():
        eager = module(x)
        ours = kernel.layers.GeGLUMLP.forward(module, x)
        outputs = [mlp(x, *_weights(module)) for _ in range(REPEATS)]
    one = outputs[0]
    return {
        "max_abs_diff_vs_eager": max((out.float() - eager.float()).abs().max().item() for out in outputs),
        "max_abs_diff_ours_vs_eager": (ours.float() - eager.float()).abs().max().item(),
        "max_abs_diff_vs_ours": (one.float() - ours.float()).abs().max().item(),
        "max_abs_eager": eager.float().abs().max().item(),
        "calls_bitwise_equal_to_the_first": sum(torch.equal(out, one) for out in outputs),
        "calls": REPEATS,
    }


def _arm_name(config, ordered: bool) -> str:
    return f"one launch {config}, {'ordered' if ordered else 'any order'}"


def gpu_us(calls: list) -> float:
    """GPU time per call: the calls (one per MLP copy) captured in one CUDA graph, its replays timed by events."""
    graph = capture_graph(lambda: [call() for call in calls])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / REPLAYS / len(calls)


def measure(kernel, model: MLPModel, device) -> dict:
    """GPU and host time per call of eager, ours and the one-launch kernel at each configuration, one token."""
    mlp_bytes = 3 * model.hidden * model.intermediate * 2
    copies = [
        GemmaStyleMLP(model.hidden, model.intermediate, device=device, dtype=torch.bfloat16)
        for _ in range(max(2, math.ceil(3 * l2_cache_bytes(device) / mlp_bytes)))
    ]
    x = torch.randn(1, 1, model.hidden, device=device, dtype=torch.bfloat16)
    forward = kernel.layers.GeGLUMLP.forward
    arms = {
        "eager": lambda module: lambda: module(x),
        "ours (two launches)": lambda module: lambda: forward(module, x),
    }
    for config in CONFIGS:
        for ordered in (False, True):
            mlp = one_launch_mlp(kernel, config, ordered)
            arms[_arm_name(config, ordered)] = lambda module, mlp=mlp: lambda: mlp(x, *_weights(module))
    figures: dict = {"mlp_copies": len(copies), "gpu_us": {}, "host_us": {}}
    with torch.no_grad():
        for name, arm in arms.items():
            figures["gpu_us"][name] = gpu_us([arm(module) for module in copies])
        # Host time: the one-launch kernel alone, and inside the layer in place of ops.geglu_mlp_impl.
        best_config = min(CONFIGS, key=lambda config: figures["gpu_us"][_arm_name(config, True)])
        mlp = one_launch_mlp(kernel, best_config, True)
        module = copies[0]
        ops = kernel.ops
        two_launch_impl = ops.geglu_mlp_impl

        @contextlib.contextmanager
        def one_launch_in_the_layer():  # for a whole round: the layer's own path, with the one launch in place
            ops.geglu_mlp_impl = mlp
            try:
                yield
            finally:
                ops.geglu_mlp_impl = two_launch_impl

        plain = contextlib.nullcontext
        host_arms = {
            "eager": (lambda: module(x), plain),
            "ours (two launches)": (lambda: forward(module, x), plain),
            f"{_arm_name(best_config, True)}, alone": (lambda: mlp(x, *_weights(module)), plain),
            f"ours with {_arm_name(best_config, True)}": (lambda: forward(module, x), one_launch_in_the_layer),
            "ops.geglu_mlp_impl (ours' two launches, alone)": (
                lambda: two_launch_impl(x, *_weights(module), None, None, None, "tanh"),
                plain,
            ),
        }
        best = fastest_host_rounds(host_arms, ROUNDS)
        figures["host_us"] = best
        figures["best_config"] = best_config
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", type=Path, required=True, help="a build of the kernel (python -m geglu_triton build)")
    parser.add_argument("--out", type=Path, help="JSON results")
    parser.add_argument("--check-only", action="store_true", help="correctness on small shapes only (a CPU under the interpreter)")
    args = parser.parse_args()
    kernel = load_kernel(args.kernel_dir).module
    global round_to, geglu_rounded_like_eager
    round_to, geglu_rounded_like_eager = kernel.triton_kernels.round_to, kernel.triton_kernels.geglu_rounded_like_eager
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    models = (MLPModel("small", 96, 200),) if args.check_only else (GEMMA3_1B, GEMMA3_4B)
    result: dict = {"device": device_name(device), "versions": versions(), "date": utc_now().isoformat(timespec="seconds"), "models": {}}
    for model in models:
        checks = {_arm_name(c, ordered): check(kernel, model, c, ordered, device) for c in CONFIGS for ordered in (False, True)}
        figures = {"checks": checks}
        if not args.check_only:
            figures.update(measure(kernel, model, device))
        result["models"][model.name] = figures
        print(json.dumps({model.name: figures}, indent=1))
        if args.out:  # after each model: a later failure keeps the earlier figures
            args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
