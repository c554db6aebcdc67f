"""Is the model bench's CUDA-graph replay at the 27B's 4096 tokens measuring the implementation or its capture?

In all three v36 runs (H100) the replay put eager and ours at 4627-4723 us per
layer and Liger and torch.compile at 4260-4354, while the wall time of the
same loop (which includes the GPU time) put ours ahead of all three and the
profiler's kernel sums put ours, Liger and torch.compile level (3816-3839 us)
and eager behind (3955). Eager and ours replayed slower than their own wall
time; Liger and torch.compile faster. Eager and ours are also the first two
graphs the bench captures (``MODEL_IMPLEMENTATIONS`` order).

The probe builds the bench's 27B model (10 layers), captures each
implementation's graph of one call per layer twice, in the bench's order and
then in reverse, keeps all eight alive as the bench keeps its four, and times
them by replay in turns with the bench's timer. Beside that, for each graph,
the kernels one replay runs as torch.profiler sees them (name, time), and the
wall time of each implementation's loop in turns. If a graph's time follows
its place in the capture order rather than its implementation, the replay
figure is an artifact of capture.

    python benchmarks/graph_replay_probe.py --kernel-dir build --out graph_replay_probe.json
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path

import torch

from geglu_triton.benchmarking import model_grid
from geglu_triton.benchmarking.environment import device_name, utc_now, versions
from geglu_triton.benchmarking.model_implementations import MODEL_IMPLEMENTATIONS, ModelForwards
from geglu_triton.benchmarking.model_workloads import in_turns
from geglu_triton.benchmarking.timing import Timer, capture_graph, gpu_work

SIZE, LAYERS, TOKENS = "27b", 10, 4096


def _kernels(replay) -> dict[str, float]:
    """µs per kernel name in one replay (the graph's kernels as torch.profiler records them)."""
    totals: dict[str, float] = collections.defaultdict(float)
    for event in gpu_work(replay, torch.device("cuda")):
        totals[event.name[:90]] += event.time_range.elapsed_us()
    return dict(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    device = torch.device("cuda")
    plan = model_grid.GPU_PLAN
    model = model_grid.build_model(model_grid.GEMMA3_SIZES[SIZE], LAYERS, device)
    forwards = ModelForwards(
        model, MODEL_IMPLEMENTATIONS, kernel_dir=args.kernel_dir, approximate=model_grid.APPROXIMATE,
        device=device, training=False,
    )
    names = forwards.available
    x = torch.randn(1, TOKENS, model.config.hidden_size, device=device, dtype=model_grid.DTYPE)

    def every_layer() -> None:
        for module in forwards.mlps:
            module(x)

    def refresh() -> None:
        x.normal_()

    timer = Timer(device, plan.warmup_ms, plan.rep_ms)
    graphs, captured_at = {}, {}
    with torch.no_grad():
        for order_name, order in (("bench order", names), ("reversed", tuple(reversed(names)))):
            for name in order:
                forwards.use(name)
                key = f"{name} ({order_name})"
                captured_at[key] = len(graphs)
                graphs[key] = capture_graph(every_layer)
        replays = {key: (graph.replay, refresh) for key, graph in graphs.items()}
        # Twice the bench's rounds: eight graphs take each place of the order once in eight rounds.
        timings = timer.timings_interleaved(replays, rounds=2 * plan.rounds)
        kernels = {key: _kernels(graph.replay) for key, graph in graphs.items()}
        wall = in_turns(forwards, every_layer, refresh, timer.wall_s, 2 * plan.rounds)
    results = {
        key: {
            "captured_at": captured_at[key],
            "replay_us_per_layer": timings[key].median_s / LAYERS * 1e6,
            "kernel_sum_us_per_layer": sum(kernels[key].values()) / LAYERS,
            "kernels_us_per_layer": {k: v / LAYERS for k, v in sorted(kernels[key].items(), key=lambda kv: -kv[1])},
        }
        for key in graphs
    }
    walls = {name: statistics.median(samples) / LAYERS * 1e6 for name, samples in wall.items()}
    record = {
        "meta": {"device": device_name(device), "date_utc": utc_now().isoformat(), "versions": versions()},
        "cell": {"size": SIZE, "layers": LAYERS, "tokens": TOKENS},
        "method": (
            "each implementation's CUDA graph of one MLP call per layer captured twice (bench order, then reversed), "
            f"all alive; replay median in {2 * plan.rounds} rounds taken in turns (the bench's timer); kernels of one "
            "replay by torch.profiler; wall time of each implementation's loop, median of rounds in turns"
        ),
        "graphs": results,
        "wall_us_per_layer": walls,
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    for key, r in results.items():
        top = next(iter(r["kernels_us_per_layer"]))
        print(
            f"{key:24} captured #{r['captured_at']}: replay {r['replay_us_per_layer']:7.1f} us/layer, "
            f"kernel sum {r['kernel_sum_us_per_layer']:7.1f}; top kernel {top}"
        )
    print("wall us/layer: " + ", ".join(f"{n} {v:.1f}" for n, v in walls.items()))


if __name__ == "__main__":
    main()
