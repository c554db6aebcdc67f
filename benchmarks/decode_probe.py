"""Whole-model decode: is eager's lead in tokens/s the MLP's forward, the way it is installed, or Triton's launches?

Over the committed ``bench --models`` runs (v11-v37, 24 size runs) eager's
MLP led HF ``generate``'s tokens/s over ours in 19, over Liger's in 19 and
over torch.compile's in 20, although ours costs less host time per MLP call
and a decode step's kernels less GPU time. Decode at batch 1 is bound by the
host. Eager is the one implementation that (a) runs the class's own forward,
with no ``forward`` set on the instance (kernelize sets one, and so does the
bench for Liger and torch.compile), and (b) launches no Triton kernel. The
probe times, on one model and in turns (each round starts one arm later):

    eager               the class's forward
    eager on instance   the same function, set on each MLP instance as kernelize sets ours
    ours                the kernelized forward (Triton: our GEMM and activation kernels)
    liger               Liger's forward (Triton: Liger's activation kernel, through Triton's dispatch)
    compile             torch.compile of the MLP's function (Triton: Inductor's fused kernel), as the bench has it

both HF ``generate`` and the static-cache loop of ``bench --models`` (32 new
tokens), with the main thread's CPU time per token beside each (decode is
host-bound: that is what a token costs). The Python threads alive at the end
are recorded too (torch.compile's worker pool among them): a Triton launch
releases the GIL, which another runnable thread may then take.

v37's run answered the first two questions: eager's forward set on the
instance decodes as eager does, and the static loop, with as many Triton
launches a step, puts ours ahead; in ``generate`` alone every Triton-launching
MLP cost 8.6-10.7 ms more a token. ``generate`` waits for each step's result
on the host (its stop check). So the probe then profiles one ``generate`` per
arm and reports, per token, the time the host spent in that wait
(``aten::_local_scalar_dense``) and the GPU time of the kernels (the most
costly by name), and for each kernel the time from its launch
call on the host to its start on the GPU, apart for launches through CUDA's
runtime API (PyTorch's) and its driver API (Triton's). Host work that grows
shows as launches that start at once and a short wait; GPU work that starts
late, as a long wait and a long launch-to-start time.

    python benchmarks/decode_probe.py --kernel-dir build --out decode_probe.json
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

from geglu_triton.benchmarking.environment import utc_now, versions
from geglu_triton.benchmarking.implementations import COMPILE, EAGER, LIGER, OURS
from geglu_triton.benchmarking.model_implementations import BUILDERS
from geglu_triton.benchmarking.model_probes import probe_model, probe_parser
from geglu_triton.benchmarking.model_workloads import greedy_generate, static_decode
from geglu_triton.benchmarking.timing import garbage_collector_paused, round_order, synchronize

ROUNDS = 8
NEW_TOKENS = 32
EAGER_ON_INSTANCE = "eager on instance"
BUILDERS[EAGER_ON_INSTANCE] = lambda forwards: [types.MethodType(type(m).forward, m) for m in forwards.mlps]
ARMS = (EAGER, EAGER_ON_INSTANCE, OURS, LIGER, COMPILE)
#: The op in which the host waits for a step's result (``bool(tensor)`` in generate's stop check).
HOST_WAIT_OP = "aten::_local_scalar_dense"
#: Chrome-trace categories of launch calls, by the CUDA API they go through.
LAUNCH_APIS = {"cuda_runtime": "runtime API (PyTorch)", "cuda_driver": "driver API (Triton)"}


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
        "kernel_ms_per_token": sum(kernel_us.values()) / 1e3 / NEW_TOKENS,
        "top_kernels_ms_per_token": {
            name: us / 1e3 / NEW_TOKENS for name, us in sorted(kernel_us.items(), key=lambda kv: -kv[1])[:8]
        },
    }


def main() -> None:
    args = probe_parser(__doc__.splitlines()[0]).parse_args()
    model, forwards, device = probe_model(args, ARMS)
    prompt = torch.randint(model.config.vocab_size, (1, 32), device=device)
    loops = {
        "generate": lambda: greedy_generate(model, prompt, NEW_TOKENS),
        "static loop": lambda: static_decode(model, prompt, NEW_TOKENS, device),
    }
    arms = forwards.available
    tokens_per_s = {loop: {arm: [] for arm in arms} for loop in loops}
    cpu_ms_per_token = {loop: {arm: [] for arm in arms} for loop in loops}
    with torch.no_grad(), garbage_collector_paused():
        for arm in arms:  # first calls (kernel compiles, Liger's autotuning) before any timing
            forwards.use(arm)
            for run in loops.values():
                run()
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
        profiled = {}
        for arm in arms:
            forwards.use(arm)
            profiled[arm] = profiled_generate(loops["generate"], device)
    medians = {
        loop: {
            arm: {
                "tokens_per_s": statistics.median(tokens_per_s[loop][arm]),
                "thread_cpu_ms_per_token": statistics.median(cpu_ms_per_token[loop][arm]),
            }
            for arm in arms
        }
        for loop in loops
    }
    result = {
        "what": __doc__.splitlines()[0],
        "size": args.size,
        "new_tokens": NEW_TOKENS,
        "rounds": ROUNDS,
        "method": (
            "wall time of each loop to a synchronized result (generate: prefill of the 32-token prompt included; "
            "the static loop: prefill included here too), the arms in turns, each round one arm later; garbage "
            "collector paused; thread CPU time of the main thread over the same span"
        ),
        "date": utc_now().isoformat(timespec="seconds"),
        "versions": versions(),
        "python": sys.version.split()[0],
        "switch_interval_s": sys.getswitchinterval(),
        "threads": [thread.name for thread in threading.enumerate()],
        "status": forwards.status,
        "median": medians,
        "profiled_generate": profiled,
        "tokens_per_s": tokens_per_s,
        "thread_cpu_ms_per_token": cpu_ms_per_token,
    }
    print(f"threads alive: {result['threads']}")
    for loop in loops:
        for arm in arms:
            m = medians[loop][arm]
            print(
                f"{loop:12s} {arm:18s} tokens/s median {m['tokens_per_s']:6.1f} "
                f"(x{m['tokens_per_s'] / medians[loop][EAGER]['tokens_per_s']:.3f} eager's)  thread CPU ms/token "
                f"{m['thread_cpu_ms_per_token']:6.2f}  rounds {[round(v, 1) for v in tokens_per_s[loop][arm]]}"
            )
    for arm, figures in profiled.items():
        spreads = ", ".join(
            f"{api} median {v['median']:.1f} p90 {v['p90']:.1f} us ({v['count']})"
            for api, v in figures["launch_to_start_us"].items()
            if v["count"]
        )
        print(f"profiled generate, {arm:18s} host wait {figures['host_wait_ms_per_token']:6.2f} ms/token, kernels "
              f"{figures['kernel_ms_per_token']:6.2f} ms/token; launch to start: {spreads or 'no CUDA trace'}")
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
