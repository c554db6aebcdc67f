"""``python -m geglu_triton profile``: what each GeGLU MLP stage launches, by torch.profiler.

Stages, each a forward pass (inference, ``torch.no_grad``) on the same input,
or with ``--training`` (the MLP stages without bias only) a forward and a
backward, the input and the weights requiring gradients, at the training
shape of ``bench --models`` (8 x 1024 tokens) and Gemma3 1B's MLP:

  linear-eager           nn.Linear with bias, eager
  linear-compiled        the same, torch.compile
  mlp-eager-bias         a Gemma-style GeGLU MLP whose projections have a bias, eager
  mlp-eager              the Gemma-style MLP (no bias, as Gemma), eager
  mlp-compiled           the same, torch.compile
  mlp-liger              Liger's LigerGEGLUMLP on the same weights (when installed)
  mlp-ours               the kernel's layers.GeGLUMLP.forward bound to the Gemma-style module

Forward stages run Gemma 2B's MLP at 1024 tokens; ``--mlp`` and ``--tokens``
pick another Gemma size's MLP and token count (``--mlp gemma3-4b --tokens 4096``).

For each: the GPU kernels launched (name, count and time per forward), the
CPU-side ops (``aten::t``, ``aten::addmm``, ``aten::mm``, ``aten::gelu``,
``aten::mul``, ...) and, where there is a bias, whether it was folded into
the GEMM (``addmm``) or added by a kernel of its own. A closing table has one
row per stage, with what changed from the stage before. The stages run in
two passes, in the order above and then in reverse, and each figure is the
mean over both: no stage gains or loses from its place in the order.
Written as
``profile.md`` and ``profile.json``. Without a GPU it reports the CPU side only
(and says so); compiled stages then use the ``aot_eager`` backend.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch

from .benchmarking import environment, implementations, model_grid, modules
from .benchmarking.grid import GEMMA3_1B, GEMMA_2B, GEMMA_MLPS, TINY_MLP, MLPModel, dtype_name
from .benchmarking.report import md_cell
from .benchmarking.timing import synchronize
from .benchmarking.workloads import failure_text
from .errors import UserError, directory_to_read, directory_to_write, positive_int

#: Forward passes (training steps) profiled per stage in each of the two passes (figures are per forward
#: or step, over both passes), after WARMUP_CALLS unprofiled ones.
PROFILED_CALLS = 5
WARMUP_CALLS = 3
SIZES = {"cuda": (GEMMA_2B, 1024), "cpu": (TINY_MLP, 5)}
TRAINING_SIZES = {
    "cuda": (GEMMA3_1B, model_grid.GPU_PLAN.training_batch * model_grid.GPU_PLAN.training_sequence),
    "cpu": (TINY_MLP, 5),
}
#: ``--mlp``'s names: every Gemma size's MLP ("gemma3-4b").
MLP_CHOICES = {model.name.lower().replace(" ", "-"): model for model in GEMMA_MLPS}
DTYPE = torch.bfloat16
NO_GPU_NOTE = "GPU kernels need a GPU: this run had none, so only the CPU side (ops and their counts) is reported"

#: GPU kernel name patterns -> category, first match wins.
KERNEL_CATEGORIES = (
    ("ours", re.compile(r"geglu_(forward|backward)_kernel")),
    ("liger", re.compile(r"_geglu_tanh_")),
    ("inductor", re.compile(r"^triton_")),
    ("gemm", re.compile(r"gemm|gemv|nvjet|cutlass|xmma|cublas|sm\d+_", re.IGNORECASE)),
    ("copy/fill", re.compile(r"memcpy|memset|copy|fill", re.IGNORECASE)),
)


#: CPU-side driver and runtime calls that launch a kernel.
RUNTIME_LAUNCH = re.compile(
    r"^(cudaLaunchKernel|cuLaunchKernel|cudaLaunchKernelExC|cuLaunchKernelEx|hipLaunchKernel|hipModuleLaunchKernel)"
)


def kernel_category(name: str) -> str:
    return next((category for category, pattern in KERNEL_CATEGORIES if pattern.search(name)), "elementwise/other")


@dataclass(frozen=True)
class Stage:
    name: str
    description: str
    bias: bool
    #: (module with the stage's weights, kernel, device) -> the forward to profile.
    build: Callable[[torch.nn.Module, object, torch.device], Callable[[torch.Tensor], torch.Tensor]]


def _linear_of(module: modules.GemmaStyleMLP) -> torch.nn.Module:
    return module.gate_proj


STAGES = (
    Stage("linear-eager", "nn.Linear (hidden -> intermediate) with bias, eager", True, lambda m, k, d: _linear_of(m)),
    Stage(
        "linear-compiled",
        "the same nn.Linear, torch.compile",
        True,
        lambda m, k, d: implementations.fresh_compile(_linear_of(m), d),
    ),
    Stage("mlp-eager-bias", "GeGLU MLP, projections with bias, eager", True, lambda m, k, d: m),
    Stage("mlp-eager", "Gemma-style GeGLU MLP (no bias), eager", False, lambda m, k, d: m),
    Stage(
        "mlp-compiled", "the Gemma-style MLP, torch.compile", False, lambda m, k, d: implementations.fresh_compile(m, d)
    ),
    Stage("mlp-liger", "Liger's LigerGEGLUMLP on the same weights", False, lambda m, k, d: modules.liger_mlp(m)),
    Stage(
        "mlp-ours",
        "the kernel's layers.GeGLUMLP.forward on the Gemma-style module",
        False,
        lambda m, k, d: modules.fused_forward(m, k),
    ),
)


#: What ``--training`` profiles: the MLPs as Gemma has them (no bias).
TRAINING_STAGES = tuple(stage for stage in STAGES if stage.name.startswith("mlp-") and not stage.bias)


def _bias_verdict(stage: Stage, cpu_ops: Counter, addmm_copies: int, kernels: dict) -> str:
    if not stage.bias:
        return "no bias"
    if cpu_ops.get("aten::addmm"):
        if addmm_copies:
            return "in the GEMM call (aten::addmm): the bias is broadcast-copied into the output, the GEMM accumulates onto it"
        return "folded into the GEMM (aten::addmm; on CUDA the cuBLASLt bias epilogue)"
    if any(info["category"] == "inductor" for info in kernels.values()):
        return "aten::mm, and the bias add fused by Inductor into a Triton kernel"
    if cpu_ops.get("aten::add") or cpu_ops.get("aten::add_"):
        return "a separate add after the GEMM (aten::mm + aten::add)"
    return "not determined from the trace"


@dataclass
class _Trace:
    """What the profiler saw over some profiled steps of one stage: totals, not yet per step."""

    kernels: dict[str, dict] = field(default_factory=dict)  # name -> category, calls, us
    cpu_ops: Counter = field(default_factory=Counter)
    launch_calls: int = 0
    addmm_copies: int = 0
    gpu_us_by_pass: list[float] = field(default_factory=list)  # per step, one entry per pass

    @property
    def steps(self) -> int:
        """Steps profiled so far: PROFILED_CALLS in each pass."""
        return PROFILED_CALLS * len(self.gpu_us_by_pass)


def _profile_pass(
    stage: Stage, model: MLPModel, tokens: int, kernel, device: torch.device, training: bool, trace: _Trace
) -> None:
    """One pass over a stage: WARMUP_CALLS steps, then PROFILED_CALLS under torch.profiler, added to ``trace``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    module = modules.GemmaStyleMLP(model.hidden, model.intermediate, bias=stage.bias, device=device, dtype=DTYPE)
    module.requires_grad_(training)
    x = torch.randn(tokens, model.hidden, device=device, dtype=DTYPE, requires_grad=training)
    grad_out = torch.randn(tokens, model.hidden, device=device, dtype=DTYPE)
    forward = stage.build(module, kernel, device)

    def step() -> None:
        if training:  # the gradients of x and of every weight, set to None again after each step
            forward(x).backward(grad_out)
            x.grad = None
            module.zero_grad(set_to_none=True)
        else:
            forward(x)

    with torch.set_grad_enabled(training):
        for _ in range(WARMUP_CALLS):
            step()
        synchronize(device)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            for _ in range(PROFILED_CALLS):
                step()
            synchronize(device)

    pass_us = 0.0
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            us = float(event.time_range.elapsed_us())
            new = {"category": kernel_category(event.name), "calls": 0, "us": 0.0}
            info = trace.kernels.setdefault(event.name, new)
            info["calls"] += 1
            info["us"] += us
            pass_us += us
        elif RUNTIME_LAUNCH.match(event.name):
            trace.launch_calls += 1
        elif "::" in event.name:  # aten ops and custom ops (ours: <namespace>::geglu)
            trace.cpu_ops[event.name] += 1
            parent = getattr(event, "cpu_parent", None)
            if event.name == "aten::copy_" and parent is not None and parent.name == "aten::addmm":
                trace.addmm_copies += 1
    trace.gpu_us_by_pass.append(pass_us / PROFILED_CALLS)


def _stage_record(stage: Stage, trace: _Trace, device: torch.device) -> dict:
    """A stage's figures per step (forward or training step), averaged over every pass."""
    per_step = lambda value: value / trace.steps  # noqa: E731
    gpu = None
    if device.type == "cuda":
        gpu = {
            "kernels": [
                {
                    "name": name,
                    "category": info["category"],
                    "calls": per_step(info["calls"]),
                    "us": per_step(info["us"]),
                }
                for name, info in sorted(trace.kernels.items(), key=lambda kv: -kv[1]["us"])
            ],
            "launches": per_step(sum(info["calls"] for info in trace.kernels.values())),
            "us": per_step(sum(info["us"] for info in trace.kernels.values())),
            "us_by_pass": trace.gpu_us_by_pass,
            "by_category": {},
        }
        for info in trace.kernels.values():
            gpu["by_category"][info["category"]] = gpu["by_category"].get(info["category"], 0) + per_step(info["calls"])
    return {
        "stage": stage.name,
        "description": stage.description,
        "status": "ok",
        "gpu": gpu,
        "cpu_ops": {name: per_step(count) for name, count in sorted(trace.cpu_ops.items())},
        "cpu_launch_calls": per_step(trace.launch_calls) if device.type == "cuda" else None,
        "bias": _bias_verdict(stage, trace.cpu_ops, trace.addmm_copies, trace.kernels),
    }


def _not_run(stage: Stage, status: str, reason: str) -> dict:
    return {"stage": stage.name, "description": stage.description, "status": status, "reason": reason}


def profile_stages(
    stages: tuple[Stage, ...], model: MLPModel, tokens: int, kernel, device: torch.device, training: bool
) -> list[dict]:
    """Each stage's record, in ``stages``' order, from two passes: the stages in that order, then in reverse.

    Each stage runs first in one pass and last in the other (or in the middle in both), so the GPU's
    drift over the run (its clocks, its temperature) does not favour the stages listed first. A stage
    that cannot run in the first pass (skipped: Liger not installed; or failed) is not run again.
    """
    traces = {stage.name: _Trace() for stage in stages}
    outcomes: dict[str, dict] = {}
    for stage in (*stages, *reversed(stages)):
        if stage.name in outcomes:
            continue
        print(f"profile: {stage.name} ...", flush=True)
        try:
            _profile_pass(stage, model, tokens, kernel, device, training, traces[stage.name])
        except ImportError as err:
            outcomes[stage.name] = _not_run(stage, "skipped", str(err))
        except Exception as err:
            outcomes[stage.name] = _not_run(stage, "failed", failure_text(err))
    return [outcomes.get(stage.name) or _stage_record(stage, traces[stage.name], device) for stage in stages]


def _ops_change(previous: dict | None, current: dict) -> str:
    if previous is None:
        return "–"
    before, after = previous["cpu_ops"], current["cpu_ops"]
    added = [f"+{name} ×{after[name]:g}" for name in after if name not in before]
    removed = [f"−{name}" for name in before if name not in after]
    changed = [
        f"{name} {before[name]:g}→{after[name]:g}" for name in after if name in before and before[name] != after[name]
    ]
    return ", ".join(added + removed + changed) or "same ops"


def summary_markdown(report: dict) -> str:
    gpu = report["device"] == "cuda"
    lines = [
        f"# GeGLU MLP stages under torch.profiler on {report['device_name']}",
        "",
        f"{report['model']} MLP (hidden {report['hidden']}, intermediate {report['intermediate']}), "
        f"{report['tokens']} tokens, {report['dtype']}, {report['pass']}, figures per {report['unit']} "
        f"(mean of {PROFILED_CALLS} in each of two passes: the stages in the order listed, then in reverse; GPU µs "
        f"as the mean, then each pass's). Ours runs {report['ours_runs']}. {report['date_utc']}.",
        "",
    ]
    if report["note"]:
        lines += [f"**{report['note']}.**", ""]
    lines += [
        f"| stage | GPU kernels / {report['unit']} | Δ vs previous | GPU µs / {report['unit']} | kernels by category "
        "| CPU ops vs previous stage | bias |",
        "| --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    previous = None
    for record in report["stages"]:
        if record["status"] != "ok":
            lines.append(f"| {record['stage']} | {record['status']}: {md_cell(record['reason'])} | | | | | |")
            continue
        if gpu:
            launches = record["gpu"]["launches"]
            delta = f"{launches - previous['gpu']['launches']:+g}" if previous else "–"
            by_pass = " / ".join(f"{us:.1f}" for us in record["gpu"]["us_by_pass"])
            figures = f"{launches:g} | {delta} | {record['gpu']['us']:.1f} ({by_pass}) | " + ", ".join(
                f"{c} {n:g}" for c, n in record["gpu"]["by_category"].items()
            )
        else:
            figures = "n/a (needs a GPU) | | |"
        lines.append(f"| {record['stage']} | {figures} | {_ops_change(previous, record)} | {record['bias']} |")
        previous = record
    lines += ["", "## Each stage", ""]
    for record in report["stages"]:
        lines += [f"### {record['stage']}: {record['description']}", ""]
        if record["status"] != "ok":
            lines += [f"{record['status']}: {record['reason']}", ""]
            continue
        if gpu:
            lines += ["| GPU kernel | category | calls | µs |", "| --- | --- | ---: | ---: |"]
            lines += [
                f"| `{k['name'][:120]}` | {k['category']} | {k['calls']:g} | {k['us']:.1f} |"
                for k in record["gpu"]["kernels"]
            ]
            lines.append("")
        lines.append(
            f"CPU ops per {report['unit']}: "
            + ", ".join(f"`{name}` ×{count:g}" for name, count in record["cpu_ops"].items())
        )
        lines += ["", f"Bias: {record['bias']}.", ""]
    return "\n".join(lines) + "\n"


def _note(device: torch.device, stages: list[dict]) -> str | None:
    if device.type != "cuda":
        return NO_GPU_NOTE
    if not any(stage.get("gpu") and stage["gpu"]["launches"] for stage in stages):
        return "The profiler recorded no GPU activity at all: CUPTI is probably unavailable on this machine"
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=directory_to_write, help="output directory (default: ./<date>-<device>/ in the current directory)"
    )
    parser.add_argument(
        "--kernel-dir", type=directory_to_read, help="an existing build (default: build this checkout into a temp dir)"
    )
    parser.add_argument(
        "--training",
        action="store_true",
        help="forward and backward of the bias-free MLP stages, at the model-level training shape (Gemma3 1B's MLP)",
    )
    parser.add_argument(
        "--mlp",
        choices=sorted(MLP_CHOICES),
        help="this Gemma size's MLP instead (default: Gemma 2B's; with --training, Gemma3 1B's; "
        "without a GPU, a tiny one)",
    )
    parser.add_argument(
        "--tokens",
        type=positive_int,
        metavar="N",
        help="tokens per forward instead (default: 1024; with --training, 8 x 1024; without a GPU, 5)",
    )


def run(args: argparse.Namespace) -> int:
    device = environment.benchmark_device()
    training = args.training
    model, tokens = (TRAINING_SIZES if training else SIZES)[device.type]
    model = MLP_CHOICES[args.mlp] if args.mlp else model
    tokens = args.tokens or tokens
    loaded = environment.load_kernel(args.kernel_dir)
    out_dir = environment.output_directory(args.out, args.kernel_dir, device)
    try:
        stages = profile_stages(TRAINING_STAGES if training else STAGES, model, tokens, loaded.module, device, training)
    finally:
        loaded.close()
    report = {
        "date_utc": environment.utc_now().isoformat(timespec="seconds"),
        "device": device.type,
        "device_name": environment.device_name(device),
        "versions": environment.versions(),
        "model": model.name,
        "hidden": model.hidden,
        "intermediate": model.intermediate,
        "tokens": tokens,
        "dtype": dtype_name(DTYPE),
        "pass": "forward and backward" if training else "forward only",
        "unit": "step" if training else "forward",
        "profiled_calls": PROFILED_CALLS,
        "compile_backend": implementations.compile_backend(device),
        "ours_runs": environment.kernel_path(loaded.module, device),
        "note": _note(device, stages),
        "stages": stages,
    }
    (out_dir / "profile.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    markdown = summary_markdown(report)
    (out_dir / "profile.md").write_text(markdown, encoding="utf-8")
    print(markdown.split("\n## Each stage")[0], flush=True)
    print(f"wrote profile.json and profile.md in {out_dir}", flush=True)
    failed = [stage for stage in stages if stage["status"] == "failed"]
    if failed and len(failed) == len(stages):
        raise UserError(f"every stage failed at {tokens} tokens, the first with: {failed[0]['reason']}")
    return 0
