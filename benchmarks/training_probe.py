"""Where a Gemma3 training step's wall time goes beyond its GPU time, phase by phase, for eager, ours and Liger.

``bench --models`` times a whole step: GPU time (the sum of its kernels) and
wall time. On the H200's host the two differ by a quarter (the step waits
for the host), and ours can be ahead in GPU time and behind in wall time.
This script splits the step into its forward (to the loss) and its backward
and, for each implementation in rounds taken in turns, measures each phase's
wall time (synchronized before and after) and GPU time (its kernels' sum).
The phase whose wall time exceeds its GPU time is the one the host paces.
The backward is also timed on the calling thread (autograd's multithreading
off), where a Python backward does not hand the GIL to a worker thread.
Then it profiles one step per implementation and counts, per phase, what
the host did there: kernel launches, calls that wait for the GPU
(synchronizations, copies to the host), allocations from the driver, the
CPU ops with the most self time, and the GPU's idle gaps between kernels,
each charged to the host op and the autograd node running meanwhile.
It also lists the process's Python threads (any of them can take the GIL
when a backward releases it), and times one ATen call made from a Python
backward (each releases the GIL while it dispatches) on either thread.

    python benchmarks/training_probe.py --out probe.json [--size 1b] [--layers N] [--tokens B S] [--kernel-dir build]

Without a GPU, use the tiny size: a smoke test (the figures are perf_counter's).
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import torch

from geglu_triton.benchmarking import model_grid
from geglu_triton.benchmarking.environment import benchmark_device, device_name, load_kernel, utc_now, versions
from geglu_triton.benchmarking.implementations import EAGER, LIGER, OURS
from geglu_triton.benchmarking.model_implementations import ModelForwards
from geglu_triton.benchmarking.timing import Timer, garbage_collector_paused, synchronize

DEFAULT_ROUNDS = 5
PHASES = ("forward", "backward")
#: CUDA runtime and driver calls, by what they mean for the host's pace.
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC")
#: cudaMemcpyAsync waits only for a copy to pageable host memory: the copies are counted by direction from
#: the GPU's side (its "Memcpy DtoH (Device -> Pageable)" events and the like), under "gpu_copies".
WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
ALLOCATIONS = ("cudaMalloc", "cudaFree")
TOP_OPS = 12
#: GPU idle stretches shorter than this are launch gaps, not waits for the host.
GAP_US = 50
#: The profiler's name for the host time of one autograd node in the backward.
NODE_PREFIX = "autograd::engine::evaluate_function: "


class _ViewsInBackward(torch.autograd.Function):
    """Identity whose backward calls ``views`` cheap ATen ops from Python (each a dispatch that releases the GIL)."""

    @staticmethod
    def forward(ctx, x, views):
        ctx.views = views
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        for _ in range(ctx.views):
            grad = grad.view_as(grad)
        return grad, None


def python_backward_op_us(device: torch.device, views: int = 50, reps: int = 20) -> dict[str, float]:
    """Host microseconds one ATen call costs inside a Python backward, on autograd's worker thread and on the
    calling thread: the fastest of ``reps`` backwards with ``views`` calls, less one with none, per call."""
    x = torch.zeros(16, device=device, requires_grad=True)

    def fastest_backward_s(n: int) -> float:
        best = float("inf")
        for _ in range(reps):
            y = _ViewsInBackward.apply(x, n)
            synchronize(device)
            start = time.perf_counter()
            y.backward(torch.ones_like(y))
            synchronize(device)
            best = min(best, time.perf_counter() - start)
        return best

    costs = {}
    for thread, multithreading in (("worker_thread", True), ("calling_thread", False)):
        with torch.autograd.set_multithreading_enabled(multithreading):
            costs[thread] = (fastest_backward_s(views) - fastest_backward_s(0)) / views * 1e6
    return costs


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--size", default="1b", choices=list(model_grid.GEMMA3_SIZES))
    parser.add_argument("--layers", type=int, help="layers to build (default: all of the size's)")
    parser.add_argument("--tokens", type=int, nargs=2, metavar=("BATCH", "SEQUENCE"), default=(8, 1024))
    parser.add_argument("--kernel-dir", type=Path, help="an existing build (default: build this checkout)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds taken in turns")
    return parser.parse_args(argv)


def host_calls_by_phase(events, forward_end_us: float) -> dict[str, dict]:
    """The profiler's ``events`` (``prof.events()``), per phase: launches, waits for the GPU, driver allocations,
    the GPU's copies by direction, the CPU ops with the most self time, and the GPU's idle gaps of more than
    GAP_US between kernels.

    An event belongs to the forward if it starts before the forward's end,
    else to the backward (whose ops run on autograd's worker thread).
    """
    from torch.autograd import DeviceType

    counts = {phase: Counter() for phase in PHASES}
    copies = {phase: Counter() for phase in PHASES}
    self_us = {phase: Counter() for phase in PHASES}
    kernels: dict[str, list] = {phase: [] for phase in PHASES}
    host_ops: dict[str, list] = {phase: [] for phase in PHASES}
    for event in events:
        if event.name in PHASES:
            continue
        phase = PHASES[0] if event.time_range.start < forward_end_us else PHASES[1]
        if event.device_type == DeviceType.CUDA:
            kernels[phase].append((event.time_range.start, event.time_range.end))
            if event.name.startswith("Memcpy"):
                copies[phase][event.name] += 1
            continue
        if event.device_type != DeviceType.CPU:
            continue
        self_us[phase][event.name] += event.self_cpu_time_total
        host_ops[phase].append((event.name, event.time_range.start, event.time_range.end))
        for kind, names in (("launches", LAUNCHES), ("waits", WAITS), ("driver allocations", ALLOCATIONS)):
            if event.name in names:
                counts[phase][kind] += 1
                if kind != "launches":
                    counts[phase][event.name] += 1
    record = {}
    for phase in PHASES:
        gaps = idle_gaps(sorted(kernels[phase]))
        by_op, by_node = idle_time_by_host_op(gaps, host_ops[phase])
        record[phase] = {
            **dict(counts[phase]),
            f"gpu_gaps_over_{GAP_US}_us": len(gaps),
            "gpu_gap_ms": sum(end - start for start, end in gaps) / 1e3,
            "gpu_copies": dict(copies[phase]),
            "gpu_idle_us_by_host_op": dict(by_op.most_common(TOP_OPS)),
            "gpu_idle_us_by_autograd_node": dict(by_node.most_common(TOP_OPS)),
            "top_ops_self_us": dict(self_us[phase].most_common(TOP_OPS)),
        }
    return record


def idle_gaps(kernel_ranges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The GPU's idle stretches longer than GAP_US between kernels (start-sorted (start, end) ranges, us)."""
    gaps, busy_until = [], None
    for start, end in kernel_ranges:
        if busy_until is not None and start - busy_until > GAP_US:
            gaps.append((busy_until, start))
        busy_until = end if busy_until is None else max(busy_until, end)
    return gaps


def idle_time_by_host_op(gaps: list[tuple[float, float]], host_ops: list[tuple[str, float, float]]):
    """The GPU's idle time, charged to what the host was doing then: (by op, by autograd node), in us.

    Each gap goes to the innermost host op running at its midpoint (the
    shortest (name, start, end) covering it: what the GPU was waiting on) and
    to the innermost autograd node covering it (``NODE_PREFIX`` events, the
    backward's nodes on autograd's thread).
    """
    midpoints = [(start + end) / 2 for start, end in gaps]
    innermost: list = [None] * len(gaps)
    node: list = [None] * len(gaps)
    for name, start, end in host_ops:
        for i in range(bisect.bisect_left(midpoints, start), bisect.bisect_right(midpoints, end)):
            if innermost[i] is None or end - start < innermost[i][1]:
                innermost[i] = (name, end - start)
            if name.startswith(NODE_PREFIX) and (node[i] is None or end - start < node[i][1]):
                node[i] = (name.removeprefix(NODE_PREFIX), end - start)
    by_op, by_node = Counter(), Counter()
    for (start, end), op, enclosing in zip(gaps, innermost, node):
        by_op[op[0] if op else "(no host op)"] += end - start
        by_node[enclosing[0] if enclosing else "(no autograd node)"] += end - start
    return by_op, by_node


def _measure(
    size, layers: int, batch: int, sequence: int, vocab: int, rounds: int, device: torch.device, kernel_dir
) -> dict:
    """Each implementation's phases (medians of ``rounds`` rounds in turns) and one profiled step's host calls."""
    model = model_grid.build_model(size, layers, device, vocab=vocab).train()
    forwards = ModelForwards(
        model, (EAGER, OURS, LIGER), kernel_dir=kernel_dir, approximate=model_grid.APPROXIMATE, device=device,
        training=True,
    )
    ids = torch.randint(vocab, (batch, sequence), device=device)
    timer = Timer(device, warmup_ms=1, rep_ms=1)
    state: dict = {}

    def forward() -> None:
        state["loss"] = model(input_ids=ids, labels=ids, use_cache=False).loss

    def backward() -> None:
        state.pop("loss").backward()

    def refresh() -> None:
        model.zero_grad(set_to_none=True)
        ids.random_(0, vocab)

    keys = [f"{p}_{k}" for p in PHASES for k in ("wall_ms", "gpu_ms")] + ["backward_calling_thread_wall_ms"]
    samples = {name: {key: [] for key in keys} for name in forwards.available}
    for name in forwards.available:  # warm-up: compiles, autotuning, the allocator's cache
        forwards.use(name)
        for _ in range(2):
            refresh()
            forward()
            backward()
    with garbage_collector_paused():
        for _ in range(rounds):
            for name in forwards.available:
                forwards.use(name)
                for measure, key in ((timer.wall_s, "wall_ms"), (timer.kernel_s, "gpu_ms")):
                    refresh()
                    for phase, fn in zip(PHASES, (forward, backward)):
                        samples[name][f"{phase}_{key}"].append(measure(fn) * 1e3)
                refresh()
                forward()
                with torch.autograd.set_multithreading_enabled(False):  # the backward on this thread
                    samples[name]["backward_calling_thread_wall_ms"].append(timer.wall_s(backward) * 1e3)
    record: dict = {}
    for name in forwards.available:
        forwards.use(name)
        refresh()
        synchronize(device)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            with torch.profiler.record_function("forward"):
                forward()
            with torch.profiler.record_function("backward"):
                backward()
            synchronize(device)
        forward_end_us = next(e.time_range.end for e in prof.events() if e.name == PHASES[0])
        medians = {key: statistics.median(values) for key, values in samples[name].items()}
        record[name] = {
            **medians,
            "host_paced_ms": {p: medians[f"{p}_wall_ms"] - medians[f"{p}_gpu_ms"] for p in PHASES},
            "host_calls": host_calls_by_phase(prof.events(), forward_end_us),
        }
        print(
            f"{name}: " + ", ".join(
                f"{p} wall {medians[f'{p}_wall_ms']:.1f} / GPU {medians[f'{p}_gpu_ms']:.1f} ms" for p in PHASES
            ) + f"; backward on the calling thread: wall {medians['backward_calling_thread_wall_ms']:.1f} ms"
        )
        for phase in PHASES:
            calls = record[name]["host_calls"][phase]
            print(f"  {phase}: " + str({k: v for k, v in calls.items() if not isinstance(v, dict)}))
            for key in ("gpu_copies", "gpu_idle_us_by_autograd_node", "gpu_idle_us_by_host_op", "top_ops_self_us"):
                print(f"    {key}: " + "; ".join(f"{op} {us:.0f}" for op, us in calls[key].items()))
    return record


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    device = benchmark_device()
    size = model_grid.GEMMA3_SIZES[args.size]
    layers = min(args.layers or size.layers, size.layers)
    batch, sequence = args.tokens
    vocab = model_grid.GPU_PLAN.training_vocab if device.type == "cuda" else model_grid.CPU_PLAN.training_vocab
    op_us = python_backward_op_us(device)
    print("one ATen call in a Python backward: " + ", ".join(f"{k} {v:.1f} us" for k, v in op_us.items()))
    kernel = load_kernel(args.kernel_dir)
    try:
        record = _measure(size, layers, batch, sequence, vocab, args.rounds, device, kernel.build_dir)
    finally:
        kernel.close()  # the temporary build, where it made one
    result = {
        "what": __doc__.splitlines()[0],
        "size": args.size,
        "layers": layers,
        "tokens": [batch, sequence],
        "vocab": vocab,
        "rounds": args.rounds,
        "python_backward_aten_call_us": op_us,
        "python_threads": [thread.name for thread in threading.enumerate()],
        "switch_interval_s": sys.getswitchinterval(),
        "device": device_name(device),
        "date": utc_now().isoformat(timespec="seconds"),
        "versions": versions(),
        "method": (
            "per phase (forward to the loss; backward): wall_ms synchronized before and after, gpu_ms the sum of its "
            "kernels (torch.profiler), medians of rounds taken in turns; backward_calling_thread_wall_ms: the backward "
            "with autograd's multithreading off (on the calling thread, not a worker); host_paced_ms = wall - GPU; "
            "host_calls: one profiled step, events by the phase they start in, self CPU time in microseconds, the "
            "GPU's idle gaps between kernels"
        ),
        "results": record,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
