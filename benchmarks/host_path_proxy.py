"""CPU proxy of ours' decode MLP host path, launches included: the real launcher in front of a runner that does nothing.

On a GPU host ``host_time.py`` and ``decode_probe.py`` time the real thing.
Without a GPU the direct launch path never runs (``TRITON_INTERPRET`` goes
through Triton's dispatch, and decode_probe's CPU stages skip the launches
altogether), so a change to the launcher cannot be seen there. Here, on a CPU
build of the kernel (imported without TRITON_INTERPRET, so its kernels are
real ``JITFunction``s), the GEMM launcher is made to believe it runs on a
CUDA device: Triton's driver answers for device 0, its dispatch is replaced
by a compiled kernel whose runner returns at once, and the ops take CPU
tensors for Triton's. Everything ours does on the host for one decode call,
the two launches' Python included, then runs as on a GPU host, except the
runner's C call and the driver.

Per build: the launcher's own call (the fused GEMM's launch at Gemma3 1B
dims) and ``GeGLUMLP.forward`` at one token on a Gemma-style MLP of those
dims, each timed warm (median of a loop) and, for the forward, cold: each
call right after a forward of a tiny Gemma3 model (eager, on the CPU), as
decode_probe's cold stage times its pieces. The builds take turns, ROUNDS
times.

    env -u TRITON_INTERPRET python benchmarks/host_path_proxy.py --kernel-dir build [--baseline-kernel-dir B] --out F
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
import types
from pathlib import Path

import torch
from triton.backends.compiler import GPUTarget

from geglu_triton.benchmarking.environment import load_kernel, utc_now, versions
from geglu_triton.benchmarking.grid import GEMMA3_1B
from geglu_triton.benchmarking.modules import GemmaStyleMLP
from geglu_triton.benchmarking.timing import garbage_collector_paused, median_host_us

ROUNDS = 3
LOOP_CALLS = 5000
COLD_SAMPLES = 300


class _NoOpCompiledKernel:
    """A CompiledKernel whose runner returns at once (what the launcher keeps and calls)."""

    function = packed_metadata = None

    def launch_metadata(self, *args):
        return None

    def run(self, *args):
        return None


def _on_a_pretend_gpu(kernel) -> None:
    """The kernel package's GEMM launches, as on a CUDA device 0 with a supported Triton, to a no-op runner."""
    launcher_module, gemm, ops = (importlib.import_module(f"{kernel.__name__}.{name}") for name in ("triton_launcher", "triton_gemm_kernels", "ops"))
    if launcher_module.RUNS_INTERPRETED:
        raise SystemExit("host_path_proxy.py: run it without TRITON_INTERPRET (env -u TRITON_INTERPRET ...)")
    launcher_module.driver = types.SimpleNamespace(
        active=types.SimpleNamespace(
            get_current_device=lambda: 0,
            get_current_stream=lambda index: 0,
            get_current_target=lambda: GPUTarget("cuda", 90, 32),
        )
    )
    launcher = gemm._launch_mlp_gemm_kernel
    launcher.direct = True
    launcher._dispatch = lambda grid, tensors, scalars, options, index: _NoOpCompiledKernel()
    ops._runs_on_triton = lambda tensor: True


def _loop_us(fn) -> float:
    start = time.perf_counter_ns()
    for _ in range(LOOP_CALLS):
        fn()
    return (time.perf_counter_ns() - start) / LOOP_CALLS / 1e3


def _tiny_model_forward():
    """A forward of a tiny Gemma3 (eager, CPU, one token): the rest of a model's code between two MLP calls."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, max_position_embeddings=64,
    )
    model = Gemma3ForCausalLM(config).eval()
    token = torch.zeros(1, 1, dtype=torch.long)
    return lambda: model(token, use_cache=False)


def _cases(kernel) -> dict:
    model = GEMMA3_1B
    mlp = GemmaStyleMLP(model.hidden, model.intermediate, dtype=torch.bfloat16)
    x = torch.randn(1, 1, model.hidden, dtype=torch.bfloat16)
    gate, up = mlp.gate_proj.weight, mlp.up_proj.weight
    gemm = importlib.import_module(f"{kernel.__name__}.triton_gemm_kernels")
    launch = gemm.table_launch(x.shape, model.intermediate, None, x.dtype, x.get_device(), True, "tanh", False, False)
    h = x.new_empty(launch.out_shape)
    tensors = (x, gate, up, h, h, h)
    forward = kernel.layers.GeGLUMLP.forward
    return {
        "launcher call (fused GEMM, 1B, 1 token)": lambda: gemm._launch_mlp_gemm_kernel(launch.grid, tensors, launch.scalars, launch.options),
        "GeGLUMLP.forward (1B, 1 token)": lambda: forward(mlp, x),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", type=Path, required=True)
    parser.add_argument("--baseline-kernel-dir", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    builds = {"ours": args.kernel_dir}
    if args.baseline_kernel_dir:
        builds["baseline build"] = args.baseline_kernel_dir
    cases = {}
    for name, directory in builds.items():
        kernel = load_kernel(directory).module
        _on_a_pretend_gpu(kernel)
        cases[name] = _cases(kernel)
    model_forward = _tiny_model_forward()
    figures: dict = {name: {case: {"warm_us": [], "cold_us": []} for case in build} for name, build in cases.items()}
    with torch.no_grad(), garbage_collector_paused():
        for name, build in cases.items():
            for fn in build.values():
                fn()
        for _ in range(ROUNDS):
            for name, build in cases.items():
                for case, fn in build.items():
                    figures[name][case]["warm_us"].append(_loop_us(fn))
                    if case.startswith("GeGLUMLP"):
                        figures[name][case]["cold_us"].append(median_host_us(fn, model_forward, COLD_SAMPLES))
    for name, build in figures.items():
        for case, timing in build.items():
            cold = f", cold {min(timing['cold_us']):6.2f}" if timing["cold_us"] else ""
            print(f"{name:15s} {case:42s} warm {min(timing['warm_us']):6.2f} us{cold} (best of {ROUNDS} rounds)")
    result = {
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "rounds": ROUNDS, "loop_calls": LOOP_CALLS, "cold_samples": COLD_SAMPLES,
        "builds": {name: str(directory) for name, directory in builds.items()},
        "versions": versions(), "date": utc_now().isoformat(timespec="seconds"), "figures": figures,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
