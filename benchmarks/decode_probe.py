"""Whole-model decode: what does a kernelized MLP cost the host in HF ``generate``, inside the MLP and around it?

Over the committed ``bench --models`` runs (v11-v37, 24 size runs) eager's
MLP led HF ``generate``'s tokens/s over ours in 19, over Liger's in 19 and
over torch.compile's in 20, although ours costs less host time per MLP call
in a loop of MLP calls (``host_time.py``) and a decode step's kernels less GPU
time. Decode at batch 1 is bound by the host. The probe times these arms on
one model, in turns (each round starts one arm later):

    eager                  the class's forward
    eager on instance      the same function, set on each MLP instance as kernelize sets ours
    ours                   the kernelized forward (our fused GEMM and the down projection's, on Triton)
    ours, down on cuBLAS   the same with the down projection on F.linear (cuBLAS), as at more than one token
    eager + ATen launch    eager's forward set on the instance, then one ATen kernel (a one-element zero_)
    eager + Triton launch  the same, then one one-store Triton kernel through the kernel package's launcher
    eager + ours' host     the same, then ours' forward with its two GEMM launches skipped (its result dropped):
                           ours' Python path and allocations without a Triton launch
    liger                  Liger's forward (Liger's activation kernel, through Triton's dispatch)
    compile                torch.compile of the MLP's function (Inductor's fused kernel)
    ours, baseline build   with --baseline-kernel-dir: another build's kernelized forward (before and after a
                           change, in one process)

in four stages (``--stages``, all by default):

    rounds   tokens/s of generate and of the static-cache loop of ``bench --models`` (32 new tokens), with
             the main thread's CPU time per token, and each arm's ratio to eager's within the round
    split    generate with every MLP call timed on the host (a forward pre-hook and hook, the same for
             every arm): a token's host time inside the MLPs and outside them, ratios within the round
    profile  one generate per arm under torch.profiler (the host's wait for each step's result, the
             kernels' GPU time, each kernel's start on the GPU against its launch call) and cProfile
    cold     pieces of one decode MLP call (eager's whole, ours' whole and without launches, ours' checks,
             an allocation, the down projection on ours' GEMM and on F.linear; the baseline build's whole,
             with and without launches, where one is given), and an empty call for the timing's own cost,
             timed warm, in a loop of the piece alone, and cold, each call right after a forward of the
             whole model

v38 (PERFORMANCE.md): the host never waits for the GPU in generate (0.05 ms a
token), every kernel starts 8-10 us after its launch call whichever CUDA API
launched it, and the host's speed moves by up to 30% between rounds. Inside
generate ours' MLP call costs the host 1.06x eager's, and the rest of the
model 1.045x its time with eager's MLP. The three control arms take that
apart: one Triton launch per layer, ours' host path without its launches,
and, for scale, one more ATen kernel. v39 (H100): the rest slows by 1.9-3.1%
with ours' host path, by 0-1.5% with a Triton launch; cold, every piece of
ours' path costs 4-9x its warm time, eager's MLP 1.5x. v40 (H100): with the common inference call decided in
one pass, ours' call in generate costs 0.89-0.90x the previous build's in the same rounds
(--baseline-kernel-dir, benchmarks/device/decode_before_after.sh).

    python benchmarks/decode_probe.py --kernel-dir build --out decode_probe.json [--stages split] [--arms ...]
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from geglu_triton.benchmarking.environment import device_name, load_kernel, utc_now, versions
from geglu_triton.benchmarking.implementations import COMPILE, EAGER, LIGER, OURS
from geglu_triton.benchmarking.model_implementations import BUILDERS
from geglu_triton.benchmarking.model_probes import probe_model, probe_parser
from geglu_triton.benchmarking.model_workloads import greedy_generate, in_turns, static_decode
from geglu_triton.benchmarking.timing import garbage_collector_paused, median_host_us, round_order, synchronize

ROUNDS = 8
SPLIT_ROUNDS = 10
COLD_SAMPLES = 200
NEW_TOKENS = 32
EAGER_ON_INSTANCE = "eager on instance"
EAGER_AND_ATEN_LAUNCH = "eager + ATen launch"
EAGER_AND_TRITON_LAUNCH = "eager + Triton launch"
EAGER_AND_OURS_HOST_PATH = "eager + ours' host"
OURS_DOWN_PROJ_ON_CUBLAS = "ours, down on cuBLAS"
OURS_BASELINE_BUILD = "ours, baseline build"


@triton.jit
def _store_zero_kernel(out_ptr):
    """The least a Triton kernel can do: one store. Its launch is what the probe adds to eager's MLP."""
    tl.store(out_ptr, 0.0)


def _eager_and(forwards, then) -> list:
    """Eager's forward set on each instance, then ``then(x, index)`` (index: the MLP's), its result dropped."""

    def bound(module, index: int) -> types.FunctionType:
        forward = type(module).forward

        def eager_and_then(x):
            out = forward(module, x)
            then(x, index)
            return out

        return eager_and_then

    return [bound(module, index) for index, module in enumerate(forwards.mlps)]


def _kernel_package(ours: list) -> str:
    """The name of the kernel package that kernelize loaded for ours (``ours``: its forwards, one per MLP; the
    name carries the build's id)."""
    return sys.modules[ours[0].__func__.__module__].__package__  # GeGLUMLP.forward's module, bound by kernelize


def _kernel_module(ours: list, name: str) -> types.ModuleType:
    """A module of the kernel package that kernelize loaded for ours."""
    return sys.modules[f"{_kernel_package(ours)}.{name}"]


def _aten_launch(forwards):
    """One more ATen kernel: a one-element ``zero_``."""
    scratch = torch.empty(1, device=forwards.device)
    return lambda x, index: scratch.zero_()


def _triton_launch(forwards):
    """A launch of ``_store_zero_kernel`` through the kernel package's own launcher (the direct path ours takes
    on CUDA)."""
    launcher_module = _kernel_module(forwards.forwards[OURS], "triton_launcher")  # OURS is built first
    launcher = launcher_module.Launcher(_store_zero_kernel)
    options = launcher_module.LaunchOptions(constexprs=(), num_warps=1)
    scratch = torch.empty(1, device=forwards.device)
    return lambda x, index: launcher((1, 1, 1), (scratch,), (), options)


def _with_global_replaced(module: types.ModuleType, name: str, replacement, call):
    """``call`` with the module global ``module.<name>`` (read by its callees at call time) replaced while it runs."""
    original = getattr(module, name)

    def replaced(*args):
        setattr(module, name, replacement)
        try:
            return call(*args)
        finally:
            setattr(module, name, original)

    return replaced


def _skip_launch(grid, tensors, scalars, options) -> None:
    return None


def _gemm_launches_skipped(ours: list, call):
    """``call`` with the GEMM kernel's launcher (the module global both GEMMs' launches at decode go through) a
    no-op: everything ``call`` does on the host but those launches."""
    gemm = _kernel_module(ours, "triton_gemm_kernels")
    return _with_global_replaced(gemm, "_launch_mlp_gemm_kernel", _skip_launch, call)


def _ours_host_path(ours: list):
    """Ours' forward (``ours``: one per MLP), its GEMM launches skipped; the result dropped."""
    forwards = [_gemm_launches_skipped(ours, forward) for forward in ours]
    return lambda x, index: forwards[index](x)


def _ours_down_proj_on_cublas(ours: list) -> list:
    """Ours' forwards with no launch of the GEMM kernel's plain form: ``F.linear`` (cuBLAS) runs the down
    projection, the fused GEMM the first half."""
    gemm = _kernel_module(ours, "triton_gemm_kernels")
    table_launch = gemm.table_launch

    def gated_only(x_shape, n_out, strides, dtype, device_index, gated, *rest):
        return table_launch(x_shape, n_out, strides, dtype, device_index, gated, *rest) if gated else None

    return [_with_global_replaced(gemm, "table_launch", gated_only, forward) for forward in ours]


BUILDERS[EAGER_ON_INSTANCE] = lambda forwards: [types.MethodType(type(m).forward, m) for m in forwards.mlps]
BUILDERS[EAGER_AND_ATEN_LAUNCH] = lambda forwards: _eager_and(forwards, _aten_launch(forwards))
BUILDERS[EAGER_AND_TRITON_LAUNCH] = lambda forwards: _eager_and(forwards, _triton_launch(forwards))
BUILDERS[EAGER_AND_OURS_HOST_PATH] = lambda forwards: _eager_and(forwards, _ours_host_path(forwards.forwards[OURS]))
BUILDERS[OURS_DOWN_PROJ_ON_CUBLAS] = lambda forwards: _ours_down_proj_on_cublas(forwards.forwards[OURS])
ARMS = (
    EAGER, EAGER_ON_INSTANCE, OURS, OURS_DOWN_PROJ_ON_CUBLAS, EAGER_AND_ATEN_LAUNCH, EAGER_AND_TRITON_LAUNCH,
    EAGER_AND_OURS_HOST_PATH, LIGER, COMPILE, OURS_BASELINE_BUILD,
)


def _baseline_build_forwards(kernel_dir: Path):
    """A BUILDERS entry: the kernelized forward of the build in ``kernel_dir``, bound on each MLP (what kernelize
    binds)."""

    def build(forwards) -> list:
        baseline = load_kernel(kernel_dir).module
        return [types.MethodType(baseline.layers.GeGLUMLP.forward, m) for m in forwards.mlps]

    return build


#: The op in which the host waits for a step's result (``bool(tensor)`` in generate's stop check).
HOST_WAIT_OP = "aten::_local_scalar_dense"
#: Chrome-trace categories of launch calls, by the CUDA API they go through.
LAUNCH_APIS = {"cuda_runtime": "runtime API (PyTorch)", "cuda_driver": "driver API (Triton, cuBLAS)"}


def _spread(values: list[float]) -> dict:
    ordered = sorted(values)
    if not ordered:
        return {"count": 0}
    return {"count": len(ordered), "median": statistics.median(ordered), "p90": ordered[int(0.9 * (len(ordered) - 1))]}


def profiled_generate(run, device: torch.device) -> dict:
    """One ``run()`` under torch.profiler: the host's wait for results per token, and launch-to-start times (us).

    Launch calls and kernels are paired by the correlation id that the trace
    gives both (CUPTI's). Without CUDA (the CPU smoke test) only the wait is there.
    """
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        run()
        synchronize(device)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in LAUNCH_APIS and "correlation" in e.get("args", {})
    }
    latency: dict[str, list[float]] = {api: [] for api in LAUNCH_APIS.values()}
    call_us: dict[str, list[float]] = {api: [] for api in LAUNCH_APIS.values()}
    for launch in launches.values():
        call_us[LAUNCH_APIS[launch["cat"]]].append(launch.get("dur", 0))
    kernel_us: dict[str, float] = collections.defaultdict(float)
    for kernel in (e for e in events if e.get("cat") == "kernel"):
        kernel_us[kernel["name"][:90]] += kernel.get("dur", 0)
        launch = launches.get(kernel.get("args", {}).get("correlation"))
        if launch is not None:
            latency[LAUNCH_APIS[launch["cat"]]].append(kernel["ts"] - launch["ts"])
    wait_us = sum(e.get("dur", 0) for e in events if e.get("cat") == "cpu_op" and e.get("name") == HOST_WAIT_OP)
    return {
        "host_wait_ms_per_token": wait_us / 1e3 / NEW_TOKENS,
        "launch_to_start_us": {api: _spread(values) for api, values in latency.items()},
        "launch_call_us": {api: _spread(values) for api, values in call_us.items()},
        "launch_call_ms_per_token": {api: sum(values) / 1e3 / NEW_TOKENS for api, values in call_us.items()},
        "kernel_ms_per_token": sum(kernel_us.values()) / 1e3 / NEW_TOKENS,
        "top_kernels_ms_per_token": {
            name: us / 1e3 / NEW_TOKENS for name, us in sorted(kernel_us.items(), key=lambda kv: -kv[1])[:8]
        },
    }


def python_profiled_generate(run) -> dict:
    """One ``run()`` under cProfile: the functions with the most own time, in ms per token.

    The torch profiler sees ops and launches; this sees the Python around
    them (generate's own code, the layers' forwards, Triton's dispatch).
    """
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(run)
    stats = pstats.Stats(profiler).stats
    own = {f"{Path(file).name}:{line}({name})": figures[2] for (file, line, name), figures in stats.items()}
    return {
        "total_ms_per_token": sum(own.values()) * 1e3 / NEW_TOKENS,
        "top_own_ms_per_token": {
            name: seconds * 1e3 / NEW_TOKENS for name, seconds in sorted(own.items(), key=lambda kv: -kv[1])[:15]
        },
    }


#: The parts of a token's host time that the split stage pairs with eager's (and the baseline build's).
SPLIT_PARTS = ("total", "mlp", "rest")


def _paired_ratio(values: list[float], reference: list[float]) -> float:
    """The median of the round-by-round ratios: the host's drift between rounds cancels."""
    return statistics.median(value / ref for value, ref in zip(values, reference))


def mlp_host_split(forwards, run, device: torch.device) -> dict:
    """``run()`` (generate) in turns with every MLP's calls timed on the host: what a token costs in the MLPs, and
    in everything else.

    A forward pre-hook and hook on each MLP module (the same two for every
    arm, outside whichever forward is installed) add up the wall time of the
    MLP calls; the host never waits for the GPU inside one. The rest of a
    token is the main thread's CPU time less that. Ratios to eager are taken
    within a round, so that the host's drift between rounds cancels.
    """
    starts: list[int] = []
    inside = [0, 0]  # ns inside MLP calls, calls

    def before(module, args) -> None:
        starts.append(time.perf_counter_ns())

    def after(module, args, output) -> None:
        inside[0] += time.perf_counter_ns() - starts.pop()
        inside[1] += 1

    def prepare() -> None:
        synchronize(device)
        inside[:] = [0, 0]

    def measure(fn) -> dict:
        cpu_start = time.thread_time()
        fn()
        synchronize(device)
        total_ms, mlp_ms = (time.thread_time() - cpu_start) * 1e3, inside[0] / 1e6
        return {
            "total": total_ms / NEW_TOKENS,
            "mlp": mlp_ms / NEW_TOKENS,
            "rest": (total_ms - mlp_ms) / NEW_TOKENS,
            "mlp_call_us": inside[0] / 1e3 / max(inside[1], 1),
        }

    handles = [m.register_forward_pre_hook(before) for m in forwards.mlps]
    handles += [m.register_forward_hook(after) for m in forwards.mlps]
    try:
        rounds = in_turns(forwards, run, prepare, measure, SPLIT_ROUNDS)
    finally:
        for handle in handles:
            handle.remove()
    samples = {arm: {part: [r[part] for r in results] for part in results[0]} for arm, results in rounds.items()}
    split = {
        arm: {
            **{f"{part}_median": statistics.median(values) for part, values in figures.items()},
            **{f"{part}_ratio_to_eager": _paired_ratio(figures[part], samples[EAGER][part]) for part in SPLIT_PARTS},
            "samples": figures,
        }
        for arm, figures in samples.items()
    }
    for arm, figures in split.items():
        print(
            f"generate host split, {arm:22s} ms/token: total {figures['total_median']:6.2f} "
            f"(x{figures['total_ratio_to_eager']:.3f}), in MLPs {figures['mlp_median']:6.2f} "
            f"(x{figures['mlp_ratio_to_eager']:.3f}, {figures['mlp_call_us_median']:.1f} us a call), rest "
            f"{figures['rest_median']:6.2f} (x{figures['rest_ratio_to_eager']:.3f})"
        )
    if OURS in samples and OURS_BASELINE_BUILD in samples:  # before and after, in the same rounds
        ours, baseline = samples[OURS], samples[OURS_BASELINE_BUILD]
        parts = (*SPLIT_PARTS, "mlp_call_us")
        split[OURS]["ratio_to_baseline_build"] = {part: _paired_ratio(ours[part], baseline[part]) for part in parts}
        print("generate host split, ours against the baseline build, paired: " + ", ".join(
            f"{part} x{ratio:.3f}" for part, ratio in split[OURS]["ratio_to_baseline_build"].items()
        ))
    return split


def timed_rounds(forwards, loops: dict, device: torch.device) -> dict:
    """Tokens/s and the main thread's CPU ms per token of each loop and arm, ``ROUNDS`` rounds in turns."""
    arms = forwards.available
    tokens_per_s = {loop: {arm: [] for arm in arms} for loop in loops}
    cpu_ms_per_token = {loop: {arm: [] for arm in arms} for loop in loops}
    for round_index in range(ROUNDS):
        for loop, run in loops.items():
            for arm in round_order(list(arms), round_index):
                forwards.use(arm)
                synchronize(device)
                cpu_start, wall_start = time.thread_time(), time.perf_counter()
                run()
                synchronize(device)
                wall = time.perf_counter() - wall_start
                tokens_per_s[loop][arm].append(NEW_TOKENS / wall)
                cpu_ms_per_token[loop][arm].append((time.thread_time() - cpu_start) / NEW_TOKENS * 1e3)
    medians = {
        loop: {
            arm: {
                "tokens_per_s": statistics.median(tokens_per_s[loop][arm]),
                "thread_cpu_ms_per_token": statistics.median(cpu_ms_per_token[loop][arm]),
                "tokens_per_s_ratio_to_eager": _paired_ratio(tokens_per_s[loop][arm], tokens_per_s[loop][EAGER]),
            }
            for arm in arms
        }
        for loop in loops
    }
    for loop in loops:
        for arm in arms:
            m = medians[loop][arm]
            print(
                f"{loop:12s} {arm:22s} tokens/s median {m['tokens_per_s']:6.1f} "
                f"(x{m['tokens_per_s_ratio_to_eager']:.3f} eager's, paired)  thread CPU ms/token "
                f"{m['thread_cpu_ms_per_token']:6.2f}  rounds {[round(v, 1) for v in tokens_per_s[loop][arm]]}"
            )
    return {
        "rounds": ROUNDS,
        "method": (
            "wall time of each loop to a synchronized result (generate: prefill of the 32-token prompt included; "
            "the static loop: prefill included here too), the arms in turns, each round one arm later; garbage "
            "collector paused; thread CPU time of the main thread over the same span"
        ),
        "median": medians,
        "tokens_per_s": tokens_per_s,
        "thread_cpu_ms_per_token": cpu_ms_per_token,
    }


def profiled_arms(forwards, run, device: torch.device) -> dict:
    """One ``run()`` (generate) per arm under torch.profiler, and one under cProfile."""
    profiled, python_profiled = {}, {}
    for arm in forwards.available:
        forwards.use(arm)
        profiled[arm] = profiled_generate(run, device)
        python_profiled[arm] = python_profiled_generate(run)
    for arm, figures in profiled.items():
        spreads = ", ".join(
            f"{api} median {v['median']:.1f} p90 {v['p90']:.1f} us ({v['count']})"
            for api, v in figures["launch_to_start_us"].items()
            if v["count"]
        )
        calls = ", ".join(
            f"{api} {v['median']:.1f} us ({figures['launch_call_ms_per_token'][api]:.2f} ms/token)"
            for api, v in figures["launch_call_us"].items()
            if v["count"]
        )
        print(f"profiled generate, {arm:22s} host wait {figures['host_wait_ms_per_token']:6.2f} ms/token, kernels "
              f"{figures['kernel_ms_per_token']:6.2f} ms/token; launch to start: {spreads or 'no CUDA trace'}; "
              f"launch calls: {calls or 'no CUDA trace'}")
    for arm, figures in python_profiled.items():
        top = ", ".join(f"{name} {ms:.2f}" for name, ms in list(figures["top_own_ms_per_token"].items())[:8])
        print(f"cProfile generate, {arm:22s} {figures['total_ms_per_token']:6.2f} ms/token; most own time: {top}")
    return {"profiled_generate": profiled, "python_profiled_generate": python_profiled}


def cold_host_path(model, forwards, ours: list, device: torch.device, baseline: list | None = None) -> dict:
    """Pieces of a decode MLP call timed on the host warm and cold: what a piece costs inside a model.

    Warm: the piece called over and over, as ``host_time.py`` times it. Cold:
    each call right after a forward of the whole model at one token (eager's
    MLPs in place), as the piece runs in ``generate``, where the rest of the
    model's code and data pass through the CPU's caches between two calls of
    one MLP. Each figure is the median of ``COLD_SAMPLES`` calls, timed one
    by one (perf_counter_ns around the call, the same for both). ``ours``: the
    kernelized forwards, one per MLP; ``baseline``: a baseline build's, whose
    whole MLP, with and without its launches, is timed beside ours'.
    """
    forwards.use(EAGER)
    mlp = forwards.mlps[0]
    projections = [mlp._modules[name] for name in ("gate_proj", "up_proj", "down_proj")]
    gate, up, down = (projection.weight for projection in projections)
    layers, checks, ops = (_kernel_module(ours, name) for name in ("layers", "checks", "ops"))
    x = torch.randn(1, 1, gate.shape[1], device=device, dtype=gate.dtype)
    h = torch.randn(1, 1, gate.shape[0], device=device, dtype=gate.dtype)
    ours_host_path, down_proj_host_path = (_gemm_launches_skipped(ours, call) for call in (ours[0], ops.linear_impl))
    pieces = {
        "an empty call (the timing's own cost)": lambda: None,
        "eager's MLP (the class's forward)": lambda: type(mlp).forward(mlp, x),
        "ours' MLP (the kernelized forward)": lambda: ours[0](x),
        "ours' MLP, its GEMM launches skipped": lambda: ours_host_path(x),
        "ours' module checks (gelu_approximation, is_plain_linear x3)": lambda: (
            layers.gelu_approximation(mlp), *[layers.is_plain_linear(projection) for projection in projections]
        ),
        "checks.check_mlp": lambda: checks.check_mlp(x, gate, up, down, None, None, None, "tanh"),
        "an output allocation (new_empty)": lambda: x.new_empty((1, 1, gate.shape[0])),
        "down projection: ops.linear_impl (ours' plain GEMM)": lambda: ops.linear_impl(h, down, None),
        "down projection: ops.linear_impl, its launch skipped": lambda: down_proj_host_path(h, down, None),
        "down projection: F.linear (cuBLAS on a GPU)": lambda: F.linear(h, down),
    }
    if baseline is not None:
        baseline_host_path = _gemm_launches_skipped(baseline, baseline[0])
        pieces["the baseline build's MLP"] = lambda: baseline[0](x)
        pieces["the baseline build's MLP, its GEMM launches skipped"] = lambda: baseline_host_path(x)
    if device.type == "cpu":  # where ours' kernels are interpreted (or replaced by PyTorch): their host paths only
        del pieces["ours' MLP (the kernelized forward)"], pieces["down projection: ops.linear_impl (ours' plain GEMM)"]
        pieces.pop("the baseline build's MLP", None)
    token = torch.zeros(1, 1, dtype=torch.long, device=device)

    def median_us(piece, before) -> float:
        median = median_host_us(piece, before, COLD_SAMPLES)
        synchronize(device)
        return median

    figures = {}
    for name, piece in pieces.items():
        warm = median_us(piece, lambda: None)
        cold = median_us(piece, lambda: model(token, use_cache=False))
        figures[name] = {"warm_us": warm, "cold_us": cold, "cold_over_warm": cold / warm}
        print(f"cold host path, {name:62s} warm {warm:7.2f} us, cold {cold:7.2f} us (x{cold / warm:.2f})")
    return {"samples": COLD_SAMPLES, "pieces": figures}


STAGES = ("rounds", "split", "profile", "cold")


def main() -> None:
    parser = probe_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--stages", nargs="+", choices=STAGES, default=list(STAGES),
        help="rounds: tokens/s of generate and the static loop; split: generate's host time in and outside the "
        "MLPs; profile: one generate per arm under torch.profiler and cProfile; cold: pieces of a decode MLP call "
        "timed warm and right after a model forward",
    )
    parser.add_argument(
        "--arms", nargs="+", choices=ARMS, default=None,
        help="the arms to time (eager's among them: the ratios are to it; default: all, the baseline build's where "
        "one is given); ours is built for the control arms "
        "whether timed or not. On the CPU, where Triton kernels are interpreted, leave out the arms that launch "
        "them (ours, ours with the down projection on cuBLAS, eager + Triton launch, Liger)",
    )
    parser.add_argument(
        "--baseline-kernel-dir", type=Path, default=None,
        help=f"another build: the arm {OURS_BASELINE_BUILD!r} (timed by default, or where --arms names it), and "
        "beside ours in the cold stage",
    )
    args = parser.parse_args()
    arms = ARMS if args.baseline_kernel_dir else tuple(arm for arm in ARMS if arm != OURS_BASELINE_BUILD)
    args.arms = args.arms or list(arms)
    if EAGER not in args.arms:
        parser.error(f"--arms must include {EAGER!r}: every ratio is to it")
    if OURS_BASELINE_BUILD in args.arms and not args.baseline_kernel_dir:
        parser.error(f"the arm {OURS_BASELINE_BUILD!r} needs --baseline-kernel-dir")
    if args.baseline_kernel_dir:
        BUILDERS[OURS_BASELINE_BUILD] = _baseline_build_forwards(args.baseline_kernel_dir.resolve())
    model, forwards, device = probe_model(args, arms)
    ours = forwards.forwards.get(OURS)  # for the cold stage, whether ours is a timed arm or not
    baseline = forwards.forwards.get(OURS_BASELINE_BUILD)
    for arm in set(forwards.available) - set(args.arms):
        del forwards.forwards[arm]
    prompt = torch.randint(model.config.vocab_size, (1, 32), device=device)
    loops = {
        "generate": lambda: greedy_generate(model, prompt, NEW_TOKENS),
        "static loop": lambda: static_decode(model, prompt, NEW_TOKENS, device),
    }
    result = {
        "what": __doc__.splitlines()[0],
        "size": args.size,
        "new_tokens": NEW_TOKENS,
        "device": device_name(device),
        "date": utc_now().isoformat(timespec="seconds"),
        "versions": versions(),
        "python": sys.version.split()[0],
        "switch_interval_s": sys.getswitchinterval(),
        "status": forwards.status,
        "arms": list(forwards.available),
        "kernel_packages": {
            arm: _kernel_package(built) for arm, built in ((OURS, ours), (OURS_BASELINE_BUILD, baseline)) if built
        },
    }
    with torch.no_grad(), garbage_collector_paused():
        for arm in forwards.available:  # first calls (kernel compiles, Liger's autotuning) before any timing
            forwards.use(arm)
            for run in loops.values():
                run()
        if "rounds" in args.stages:
            result.update(timed_rounds(forwards, loops, device))
        if "split" in args.stages:
            result["generate_host_split_ms_per_token"] = mlp_host_split(forwards, loops["generate"], device)
        if "profile" in args.stages:
            result.update(profiled_arms(forwards, loops["generate"], device))
        if "cold" in args.stages and ours is None:
            print(f"cold host path: skipped, ours did not build ({forwards.status[OURS]['reason']})")
        elif "cold" in args.stages:
            result["cold_host_path"] = cold_host_path(model, forwards, ours, device, baseline)
    result["threads"] = [thread.name for thread in threading.enumerate()]
    print(f"threads alive: {result['threads']}")
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
