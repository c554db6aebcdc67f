"""Host time per call: the direct launch against Triton's dispatch, and the kernelized decode MLP against eager's.

What the CPU spends queueing one call, GPU time left out: each round first
queues a GPU spin longer than the round's host work, so that the host never
waits for the GPU, then times N calls on the host (perf_counter, no
synchronization inside), then synchronizes. The figure is the fastest round
of ROUNDS, the cases taking turns, the garbage collector off.

Cases:
- the activation kernel (``geglu`` on [1, 256] bf16) and the fused GEMM
  (``launch_geglu_linear``, 1 token, Gemma3 1B dims): the direct launch
  (``Launcher.direct``, where ``direct_launch_supported()``) against every
  launch through Triton's ``kernel[grid]`` (issue 12, item 3: keep the
  direct path only where it pays);
- a Gemma-style MLP at decode (1 token, bf16) at Gemma3 1B and 4B dims:
  eager's five ops against ``GeGLUMLP.forward`` (the kernelized MLP), with
  direct launches and with Triton's dispatch (issue 15, item 4: at most 0.7x
  eager's host time).

    python benchmarks/host_time.py --out host_time.json [--kernel-dir build]

(without --kernel-dir the kernel is built from this checkout first).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import types
from pathlib import Path

import torch

from geglu_triton.benchmarking.environment import load_kernel, utc_now, versions
from geglu_triton.benchmarking.grid import MLPModel
from geglu_triton.benchmarking.host import triton_dispatch
from geglu_triton.benchmarking.modules import GemmaStyleMLP
from geglu_triton.benchmarking.timing import garbage_collector_paused

GEMMA3_1B = MLPModel("Gemma3 1B", 1152, 6912)
GEMMA3_4B = MLPModel("Gemma3 4B", 2560, 10240)
#: Calls per round (at most five kernels each: 500 launches, inside CUDA's launch queue of ~1000) and rounds.
CALLS = 100
ROUNDS = 7
#: The spin that keeps the GPU busy through a round: this many seconds at 2 GHz or less.
SPIN_S = 0.1
TARGET_RATIO = 0.7


def host_us_per_call(fn) -> float:
    """One round: the host's time per call, behind a GPU spin so that it never waits for the GPU."""
    torch.cuda.synchronize()
    torch.cuda._sleep(int(SPIN_S * 2e9))
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / CALLS * 1e6


def fastest_rounds(cases: dict) -> dict:
    """Each case's fastest round, the cases in turns (slower rounds are other processes' doing)."""
    for fn, setting in cases.values():  # warm up: compile, caches
        with setting():
            for _ in range(20):
                fn()
    best = {name: float("inf") for name in cases}
    with garbage_collector_paused():
        for _ in range(ROUNDS):
            for name, (fn, setting) in cases.items():
                with setting():
                    best[name] = min(best[name], host_us_per_call(fn))
    return best


def launch_cases(kernel) -> dict:
    gemm, tables = kernel.triton_gemm_kernels, kernel.device_tables
    g, u = (torch.randn(1, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    x = torch.randn(1, GEMMA3_1B.hidden, device="cuda", dtype=torch.bfloat16)
    w_gate, w_up = (
        torch.randn(GEMMA3_1B.intermediate, GEMMA3_1B.hidden, device="cuda", dtype=torch.bfloat16) for _ in range(2)
    )
    h = torch.empty(1, GEMMA3_1B.intermediate, device="cuda", dtype=torch.bfloat16)
    config = tables.gemm_config(1, tables.describe_device(x.get_device()))

    def fused_gemm():
        gemm.launch_geglu_linear(x, w_gate, w_up, None, None, h, "tanh", config)

    direct, dispatch = contextlib.nullcontext, lambda: triton_dispatch(kernel)
    return {
        "geglu [1, 256], direct launch": (lambda: kernel.geglu(g, u), direct),
        "geglu [1, 256], Triton dispatch": (lambda: kernel.geglu(g, u), dispatch),
        "fused GEMM 1 token (Gemma3 1B), direct launch": (fused_gemm, direct),
        "fused GEMM 1 token (Gemma3 1B), Triton dispatch": (fused_gemm, dispatch),
    }


def mlp_cases(kernel, model: MLPModel) -> dict:
    module = GemmaStyleMLP(model.hidden, model.intermediate, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, 1, model.hidden, device="cuda", dtype=torch.bfloat16)
    ours = types.MethodType(kernel.layers.GeGLUMLP.forward, module)
    assert torch.equal(ours(x), ours(x)) and (ours(x) - module(x)).abs().max() < 0.1  # the kernelized MLP, running
    direct = contextlib.nullcontext
    return {
        "eager": (lambda: module(x), direct),
        "kernelized, direct launch": (lambda: ours(x), direct),
        "kernelized, Triton dispatch": (lambda: ours(x), lambda: triton_dispatch(kernel)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    kernel = load_kernel(args.kernel_dir).module
    traits = kernel.device_tables.describe_device(torch.cuda.current_device())
    results = {
        "what": __doc__.splitlines()[0],
        "gpu": torch.cuda.get_device_name(),
        "device_traits": traits.__dict__,
        "direct_launch_supported": kernel.triton_launcher.direct_launch_supported(),
        "versions": versions(),
        "date": utc_now().isoformat(timespec="seconds"),
        "method": f"fastest of {ROUNDS} rounds of {CALLS} calls, host time behind a GPU spin, cases in turns",
        "launch_us": {},
        "mlp_decode_us": {},
    }
    with torch.no_grad():
        results["launch_us"] = fastest_rounds(launch_cases(kernel))
        for name, us in results["launch_us"].items():
            print(f"{name:52s} {us:7.2f} us/call")
        for model in (GEMMA3_1B, GEMMA3_4B):
            row = fastest_rounds(mlp_cases(kernel, model))
            row["ratio kernelized/eager"] = row["kernelized, direct launch"] / row["eager"]
            row["meets target"] = row["ratio kernelized/eager"] <= TARGET_RATIO
            results["mlp_decode_us"][model.name] = row
            print(
                f"MLP {model.name} 1 token: eager {row['eager']:6.1f} us, kernelized {row['kernelized, direct launch']:6.1f} us "
                f"(Triton dispatch {row['kernelized, Triton dispatch']:6.1f}), ratio {row['ratio kernelized/eager']:.2f} "
                f"(target <= {TARGET_RATIO})"
            )
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
