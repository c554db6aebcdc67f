"""One training step (forward + backward) of a Gemma3-sized stack of GeGLU MLPs: time and peak memory.

Issue 15's training targets, measured where they are set: Gemma3 1B and 4B MLP
dimensions, 8 x 1024 tokens, bf16, random weights. The model is a residual
stack ``x = x + mlp(x)`` of the config's number of MLP layers (no attention,
no norms, no embedding: those are the same for every variant and would only
dilute the comparison). Each MLP is the GemmaStyleMLP of the benchmarks (the
attribute names of transformers' Gemma3MLP), with its forward toggled between

    eager   the module's own forward: F.gelu(gate_proj(x)) * up_proj(x), down_proj
    ours    the kernel's layers.GeGLUMLP.forward, bound as kernelize binds it
            (in training: geglu_down_proj, which keeps gate and up, not h)
    liger   Liger-Kernel's LigerGEGLUMLP.forward on the same weights (skipped,
            and reported missing, when liger_kernel is not installed)

in alternating rounds (eager, ours, liger; then ours, liger, eager; ...), so
that clock drift favours no variant. Per variant it reports

- GPU time of a step (CUDA events around forward + backward) and wall time
  (perf_counter, synchronized at both ends), medians over every timed step;
- peak memory above the weights: torch.cuda.max_memory_allocated during one
  step minus what is allocated before it (weights, the input, no gradients),
  so it counts the saved activations, the transient buffers and the weight
  gradients (the same for every variant);
- the relative error of its input gradient and its first gate_proj weight
  gradient against eager's (the same step, the same inputs).

    python benchmarks/training_step.py --out training_step.json
    python benchmarks/training_step.py --kernel-dir build --configs 1b --layers 4 --out quick.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

from geglu_triton.benchmarking.environment import device_name, load_kernel, utc_now, versions
from geglu_triton.benchmarking.modules import GemmaStyleMLP, fused_forward, liger_mlp

#: Gemma3 text configs (transformers' Gemma3TextConfig of the released models): hidden, intermediate, layers.
CONFIGS = {
    "1b": {"name": "Gemma3 1B", "hidden": 1152, "intermediate": 6912, "layers": 26},
    "4b": {"name": "Gemma3 4B", "hidden": 2560, "intermediate": 10240, "layers": 34},
}
VARIANTS = ("eager", "ours", "liger")
GIB = 2**30


class MLPStack(nn.Module):
    """x = x + mlp(x) for each layer: the MLP half of a decoder stack."""

    def __init__(self, hidden: int, intermediate: int, layers: int, device, dtype) -> None:
        super().__init__()
        self.mlps = nn.ModuleList(
            GemmaStyleMLP(hidden, intermediate, approximate="tanh", device=device, dtype=dtype) for _ in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for mlp in self.mlps:
            x = x + mlp(x)
        return x


def forwards_of(stack: MLPStack, kernel, variant: str) -> list:
    """Per MLP, the forward of ``variant`` (None: the module's own)."""
    if variant == "eager":
        return [None] * len(stack.mlps)
    if variant == "ours":
        return [fused_forward(mlp, kernel) for mlp in stack.mlps]
    return [liger_mlp(mlp).forward for mlp in stack.mlps]


def use_forwards(stack: MLPStack, forwards: list) -> None:
    for mlp, forward in zip(stack.mlps, forwards):
        if forward is None:
            mlp.__dict__.pop("forward", None)
        else:
            mlp.forward = forward


def step(stack: MLPStack, x: torch.Tensor, grad_y: torch.Tensor) -> tuple[float, float]:
    """One forward + backward; (GPU ms, wall ms)."""
    stack.zero_grad(set_to_none=True)
    x.grad = None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    wall = time.perf_counter()
    start.record()
    stack(x).backward(grad_y)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end), (time.perf_counter() - wall) * 1e3


def peak_above_weights(stack: MLPStack, x: torch.Tensor, grad_y: torch.Tensor) -> float:
    stack.zero_grad(set_to_none=True)
    x.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    stack(x).backward(grad_y)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / GIB


def rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    actual, expected = actual.double(), expected.double()
    return ((actual - expected).norm() / expected.norm()).item()


def measure_config(config: dict, kernel, args, device: torch.device) -> dict:
    dtype = torch.bfloat16
    layers = args.layers or config["layers"]
    torch.manual_seed(0)
    stack = MLPStack(config["hidden"], config["intermediate"], layers, device, dtype)
    batch, seq = args.tokens
    x = torch.randn(batch, seq, config["hidden"], device=device, dtype=dtype, requires_grad=True)
    grad_y = torch.randn_like(x)

    forwards, missing = {}, {}
    for variant in VARIANTS:
        try:
            forwards[variant] = forwards_of(stack, kernel, variant)
        except ImportError as error:  # Liger not installed
            missing[variant] = str(error)

    reference = {}
    results = {variant: {"gpu_ms": [], "wall_ms": []} for variant in forwards}
    for variant in forwards:  # gradients, then one warm-up step each (Triton compiles, cuBLAS picks)
        use_forwards(stack, forwards[variant])
        step(stack, x, grad_y)
        grads = (x.grad.clone(), stack.mlps[0].gate_proj.weight.grad.clone())
        reference.setdefault("eager", grads)
        results[variant]["x_grad_rel_error_vs_eager"] = rel_error(grads[0], reference["eager"][0])
        results[variant]["gate_weight_grad_rel_error_vs_eager"] = rel_error(grads[1], reference["eager"][1])
        results[variant]["peak_gib_above_weights"] = peak_above_weights(stack, x, grad_y)
    del reference

    order = list(forwards)
    for round_index in range(args.rounds):
        rotated = order[round_index % len(order):] + order[: round_index % len(order)]
        for variant in rotated:
            use_forwards(stack, forwards[variant])
            step(stack, x, grad_y)  # one untimed step after the switch
            for _ in range(args.steps):
                gpu_ms, wall_ms = step(stack, x, grad_y)
                results[variant]["gpu_ms"].append(gpu_ms)
                results[variant]["wall_ms"].append(wall_ms)
    use_forwards(stack, [None] * layers)

    summary = {}
    for variant, result in results.items():
        summary[variant] = {
            "gpu_ms_median": statistics.median(result["gpu_ms"]),
            "wall_ms_median": statistics.median(result["wall_ms"]),
            "peak_gib_above_weights": result["peak_gib_above_weights"],
            "x_grad_rel_error_vs_eager": result["x_grad_rel_error_vs_eager"],
            "gate_weight_grad_rel_error_vs_eager": result["gate_weight_grad_rel_error_vs_eager"],
            "gpu_ms": result["gpu_ms"],
            "wall_ms": result["wall_ms"],
        }
    ratios = {}
    for other in ("eager", "liger"):
        if other in summary:
            ratios[f"ours_over_{other}"] = {
                key: summary["ours"][key] / summary[other][key]
                for key in ("gpu_ms_median", "wall_ms_median", "peak_gib_above_weights")
            }
    return {
        "config": config["name"],
        "hidden": config["hidden"],
        "intermediate": config["intermediate"],
        "layers": layers,
        "tokens": f"{batch}x{seq}",
        "variants": summary,
        "missing": missing,
        "ratios": ratios,
        # Issue 15's targets: memory <= 0.8x eager's, step time <= eager's and <= Liger's.
        "targets_met": {
            "memory_at_most_0.8x_eager": ratios["ours_over_eager"]["peak_gib_above_weights"] <= 0.8,
            "gpu_time_at_most_eager": ratios["ours_over_eager"]["gpu_ms_median"] <= 1.0,
            "wall_time_at_most_eager": ratios["ours_over_eager"]["wall_ms_median"] <= 1.0,
            **(
                {
                    "gpu_time_at_most_liger": ratios["ours_over_liger"]["gpu_ms_median"] <= 1.0,
                    "wall_time_at_most_liger": ratios["ours_over_liger"]["wall_ms_median"] <= 1.0,
                }
                if "ours_over_liger" in ratios
                else {}
            ),
        },
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON results file")
    parser.add_argument("--kernel-dir", type=Path, help="a build (python -m geglu_triton build); default: build now")
    parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), default=["1b", "4b"])
    parser.add_argument("--layers", type=int, help="MLP layers in the stack (default: the config's layer count)")
    parser.add_argument("--tokens", type=int, nargs=2, default=(8, 1024), metavar=("BATCH", "SEQ"))
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds over the variants")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant per round")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("training_step.py measures on a GPU; none is available", file=sys.stderr)
        return 2
    loaded = load_kernel(args.kernel_dir)
    try:
        report = {
            "benchmark": "training_step",
            "created": utc_now().isoformat(),
            "device": device_name(torch.device("cuda", 0)),
            "versions": versions(),
            "results": [measure_config(CONFIGS[name], loaded.module, args, torch.device("cuda", 0)) for name in args.configs],
        }
    finally:
        loaded.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    for result in report["results"]:
        print(f"{result['config']} ({result['layers']} MLP layers, {result['tokens']} tokens, bf16)")
        for variant, figures in result["variants"].items():
            print(
                f"  {variant:6s} GPU {figures['gpu_ms_median']:8.2f} ms  wall {figures['wall_ms_median']:8.2f} ms  "
                f"peak {figures['peak_gib_above_weights']:6.2f} GiB  "
                f"grad err vs eager: x {figures['x_grad_rel_error_vs_eager']:.2e}, "
                f"gate W {figures['gate_weight_grad_rel_error_vs_eager']:.2e}"
            )
        for variant, why in result["missing"].items():
            print(f"  {variant:6s} missing: {why}")
        print(f"  ratios: {json.dumps(result['ratios'])}")
        print(f"  targets met: {json.dumps(result['targets_met'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
