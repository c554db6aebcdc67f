"""Host time per call: the direct launch against Triton's dispatch, and the kernelized decode MLP against eager's.

What the CPU spends queueing one call, GPU time left out: each round first
queues a GPU spin longer than the round's host work, so that the host never
waits for the GPU, then times N calls on the host (perf_counter, no
synchronization inside), then synchronizes. The figure is the fastest round
of ROUNDS, the cases taking turns, the garbage collector off.

Cases:
- the activation kernel (``geglu`` on [1, 256] bf16) and the fused GEMM
  (``launch_gemm`` with the table's launch, 1 token, Gemma3 1B dims): the direct launch
  (``Launcher.direct``, where ``direct_launch_supported()``) against every
  launch through Triton's ``kernel[grid]`` (issue 12, item 3: keep the
  direct path only where it pays);
- a Gemma-style MLP (bf16) at Gemma3 1B and 4B dims, at 1 token (decode)
  and at 64, 256 and 1024 tokens: eager's five ops against
  ``GeGLUMLP.forward`` (the kernelized MLP), with direct launches and with
  Triton's dispatch (issue 15, item 4: at most 0.7x eager's host time at
  decode, and never more than eager's), and eager's gate and down
  projections alone (one cuBLAS call each); beside each, the CUDA kernels
  one call launches. 256 and 1024 tokens are the model loop's wall-time
  cells (the 4B at 256, the 1B at 1024), where the projections run on
  cuBLAS (on a 227 KB device the 1B's first half is the fused GEMM up to
  256 tokens); with --baseline-kernel-dir, another build's kernelized MLP
  beside them (before/after a change, in one process);
- the kernelized decode MLP taken apart (``stage_cases``): each stage of
  its path timed alone, and eager's ops alone, to show where the time goes.

    python benchmarks/host_time.py --out host_time.json [--kernel-dir build] [--baseline-kernel-dir build]

(without --kernel-dir the kernel is built from this checkout first).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import types
from pathlib import Path

import torch
from triton.runtime import driver

from geglu_triton.benchmarking.environment import load_kernel, utc_now, versions
from geglu_triton.benchmarking.grid import GEMMA3_1B, GEMMA3_4B, MLPModel
from geglu_triton.benchmarking.host import triton_dispatch
from geglu_triton.benchmarking.modules import GemmaStyleMLP
from geglu_triton.benchmarking.timing import HOST_LOOP_CALLS, fastest_host_rounds, gpu_work

ROUNDS = 15
#: Token counts of the MLP cases: decode, and prefill sizes around issue 15's wall-time cells.
MLP_TOKENS = (1, 64, 256, 1024)
TARGET_RATIO = 0.7


def launch_cases(kernel) -> dict:
    gemm = kernel.triton_gemm_kernels
    g, u = (torch.randn(1, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    x = torch.randn(1, GEMMA3_1B.hidden, device="cuda", dtype=torch.bfloat16)
    w_gate, w_up = (
        torch.randn(GEMMA3_1B.intermediate, GEMMA3_1B.hidden, device="cuda", dtype=torch.bfloat16) for _ in range(2)
    )
    h = torch.empty(1, GEMMA3_1B.intermediate, device="cuda", dtype=torch.bfloat16)
    launch = gemm.table_launch(x.shape, w_gate.shape[0], None, x.dtype, x.get_device(), True, "tanh", False, False)

    def fused_gemm():
        gemm.launch_gemm(launch, x, w_gate, w_up, None, None, h)

    direct, dispatch = contextlib.nullcontext, lambda: triton_dispatch(kernel)
    return {
        "geglu [1, 256], direct launch": (lambda: kernel.geglu(g, u), direct),
        "geglu [1, 256], Triton dispatch": (lambda: kernel.geglu(g, u), dispatch),
        "fused GEMM 1 token (Gemma3 1B), direct launch": (fused_gemm, direct),
        "fused GEMM 1 token (Gemma3 1B), Triton dispatch": (fused_gemm, dispatch),
    }


def mlp_cases(kernel, model: MLPModel, tokens: int, baseline=None) -> dict:
    """Eager's MLP against the kernelized one (and against the kernelized one of a baseline build, if given),
    and eager's gate and down projections alone."""
    module = GemmaStyleMLP(model.hidden, model.intermediate, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, tokens, model.hidden, device="cuda", dtype=torch.bfloat16)
    hidden = module.act_fn(module.gate_proj(x)) * module.up_proj(x)
    ours = types.MethodType(kernel.layers.GeGLUMLP.forward, module)
    assert torch.equal(ours(x), ours(x)) and (ours(x) - module(x)).abs().max() < 0.1  # the kernelized MLP, running
    direct = contextlib.nullcontext
    cases = {
        "eager": (lambda: module(x), direct),
        "kernelized, direct launch": (lambda: ours(x), direct),
        "kernelized, Triton dispatch": (lambda: ours(x), lambda: triton_dispatch(kernel)),
        "eager: gate_proj(x) alone": (lambda: module.gate_proj(x), direct),
        "eager: down_proj(h) alone": (lambda: module.down_proj(hidden), direct),
    }
    if baseline is not None:
        theirs = types.MethodType(baseline.layers.GeGLUMLP.forward, module)
        cases["kernelized, baseline build"] = (lambda: theirs(x), direct)
    return cases


def stage_cases(kernel, model: MLPModel) -> dict:
    """The kernelized decode MLP taken apart: each stage of its path alone, and eager's ops alone."""
    module = GemmaStyleMLP(model.hidden, model.intermediate, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, 1, model.hidden, device="cuda", dtype=torch.bfloat16)
    gate_w, up_w, down = module.gate_proj.weight, module.up_proj.weight, module.down_proj
    hidden = kernel.functional.geglu_linear(x, gate_w, up_w)
    gate = module.gate_proj(x)
    x_rows, h_rows = x.view(-1, model.hidden), hidden.view(-1, model.intermediate)
    h_vector = hidden.view(model.intermediate)
    table_launch = kernel.triton_gemm_kernels.table_launch(
        x.shape, gate_w.shape[0], None, x.dtype, x.get_device(), True, "tanh", False, False
    )
    layers, ops = kernel.layers, kernel.ops
    # The direct launcher's parts, on the launch just made (Launcher.__call__ for what they are).
    launcher_module, launcher = kernel.triton_launcher, kernel.triton_gemm_kernels._launch_mlp_gemm_kernel
    compiled = next(c for (_, options, *_), c in reversed(launcher._compiled.items()) if options == table_launch.options)
    backend = launcher._backends[x.get_device()]
    launch_tensors = (x_rows, gate_w, up_w, h_rows, h_rows, h_rows)
    grid = table_launch.grid
    stream = driver.active.get_current_stream(x.get_device())
    launch_args = (
        *[t.data_ptr() for t in launch_tensors], *table_launch.scalars, *table_launch.options.constexpr_values
    )
    direct = contextlib.nullcontext
    stages = {
        "GeGLUMLP.forward": lambda: layers.GeGLUMLP.forward(module, x),
        "forward's module checks (gelu_approximation, is_plain_linear x3)": lambda: (
            layers.gelu_approximation(module),
            layers.is_plain_linear(module.gate_proj),
            layers.is_plain_linear(module.up_proj),
            layers.is_plain_linear(module.down_proj),
        ),
        "functional.geglu_mlp (the whole MLP, GeGLUMLP.forward's call)": lambda: kernel.functional.geglu_mlp(
            x, gate_w, up_w, down.weight
        ),
        "checks.check_mlp": lambda: kernel.checks.check_mlp(x, gate_w, up_w, down.weight, None, None, None, "tanh"),
        "ops.linear_impl(h, down weight) (the down projection)": lambda: ops.linear_impl(hidden, down.weight, None),
        "functional.geglu_linear": lambda: kernel.functional.geglu_linear(x, gate_w, up_w),
        "checks.check_linear": lambda: kernel.checks.check_linear(x, gate_w, up_w, None, None, "tanh"),
        "ops.geglu_linear_impl": lambda: ops.geglu_linear_impl(x, gate_w, up_w, None, None, "tanh"),
        "launch_gemm (the table's launch)": lambda: kernel.triton_gemm_kernels.launch_gemm(
            table_launch, x, gate_w, up_w, None, None, hidden
        ),
        "launcher: current device (Triton's driver)": lambda: driver.active.get_current_device(),
        "launcher: current stream (Triton's driver)": lambda: driver.active.get_current_stream(0),
        "launcher: specialization key of the 6 pointer arguments": lambda: launcher_module.specialization_key(
            backend, launch_tensors, launcher._tensor_flags
        ),
        "launcher: tensor_key of the 6 pointer arguments (their addresses and what it keys on)": lambda: (
            launcher_module.tensor_key(backend, launcher._native_tensor_keys, launch_tensors, launcher._tensor_flags)
        ),
        "launcher: compiled.run alone": lambda: compiled.run(
            *grid, stream, compiled.function, compiled.packed_metadata, None, None, None, *launch_args
        ),
        "output allocation (new_empty)": lambda: x.new_empty((1, 1, model.intermediate)),
        "output allocation, its shape built as a torch.Size (before b812a9d)": lambda: x.new_empty(
            x.shape[:-1] + (gate_w.shape[0],)
        ),
        "output allocation, its shape built as a tuple (checks.linear_output_shape)": lambda: x.new_empty(
            (*x.shape[:-1], gate_w.shape[0])
        ),
        "x.view(-1, hidden)": lambda: x.view(-1, model.hidden),
        "down_proj(h) (nn.Linear call)": lambda: down(hidden),
        "F.linear(h, down weight)": lambda: torch.nn.functional.linear(hidden, down.weight),
        # The same product through fewer ops: the GEMM F.linear ends in, on h's 2-D view.
        "F.linear(h as [1, I], down weight)": lambda: torch.nn.functional.linear(h_rows, down.weight),
        "torch.mm(h as [1, I], down weight.t())": lambda: torch.mm(h_rows, down.weight.t()),
        "torch.mm(h as [1, I], down weight.t()).view(1, 1, H)": lambda: torch.mm(h_rows, down.weight.t()).view(
            1, 1, model.hidden
        ),
        "torch.mv(down weight, h as [I])": lambda: torch.mv(down.weight, h_vector),
        "down weight.t()": lambda: down.weight.t(),
        "eager: gate_proj(x)": lambda: module.gate_proj(x),
        "eager: act_fn(gate)": lambda: module.act_fn(gate),
        "eager: gate * up": lambda: gate * gate,
    }
    return {name: (fn, direct) for name, fn in stages.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--baseline-kernel-dir", type=Path, default=None, help="another build, timed beside this one (before/after)"
    )
    args = parser.parse_args()
    kernel = load_kernel(args.kernel_dir).module
    baseline = None if args.baseline_kernel_dir is None else load_kernel(args.baseline_kernel_dir).module
    traits = kernel.device_tables.describe_device(torch.cuda.current_device())
    results = {
        "what": __doc__.splitlines()[0],
        "gpu": torch.cuda.get_device_name(),
        "device_traits": traits.__dict__,
        "direct_launch_supported": kernel.triton_launcher.direct_launch_supported(),
        "versions": versions(),
        "date": utc_now().isoformat(timespec="seconds"),
        "method": f"fastest of {ROUNDS} rounds of {HOST_LOOP_CALLS} calls, host time behind a GPU spin, cases in turns",
        "launch_us": {},
        # The built modules' names carry the torch-ext tree each build is of (and _dirty where uncommitted).
        "kernel_module": kernel.__name__,
        "baseline_build": None if baseline is None else str(args.baseline_kernel_dir),
        "baseline_module": None if baseline is None else baseline.__name__,
        "mlp_us": {},
        "mlp_kernels_per_call": {},
        "decode_stages_us": {},
    }
    with torch.no_grad():
        results["launch_us"] = fastest_host_rounds(launch_cases(kernel), ROUNDS)
        for name, us in results["launch_us"].items():
            print(f"{name:52s} {us:7.2f} us/call")
        for model in (GEMMA3_1B, GEMMA3_4B):
            results["mlp_us"][model.name], results["mlp_kernels_per_call"][model.name] = {}, {}
            for tokens in MLP_TOKENS:
                cases = mlp_cases(kernel, model, tokens, baseline)
                row = fastest_host_rounds(cases, ROUNDS)
                row["ratio kernelized/eager"] = row["kernelized, direct launch"] / row["eager"]
                # Issue 15's host-time targets: 0.7x eager's at decode, at most eager's elsewhere.
                row["meets target"] = row["ratio kernelized/eager"] <= (TARGET_RATIO if tokens == 1 else 1.0)
                kernels = {}
                for name, (fn, setting) in cases.items():
                    with setting():
                        kernels[name] = len(gpu_work(fn, torch.device("cuda")))
                results["mlp_us"][model.name][tokens] = row
                results["mlp_kernels_per_call"][model.name][tokens] = kernels
                print(f"MLP {model.name} x{tokens} tokens: " + ", ".join(f"{name} {us:.3g}" for name, us in row.items()))
                print("    kernels per call: " + ", ".join(f"{name} {count}" for name, count in kernels.items()))
        results["decode_stages_us"] = fastest_host_rounds(stage_cases(kernel, GEMMA3_1B), ROUNDS)
        for name, us in results["decode_stages_us"].items():
            print(f"stage (Gemma3 1B, 1 token) {name:60s} {us:7.2f} us/call")
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
