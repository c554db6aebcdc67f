"""The figures: what a reader would rather look at than read.

- ``activation_bandwidth.png``: effective TB/s against bytes moved, one line per
  implementation, one panel per workload and dtype, the measured copy bandwidth
  as the ceiling;
- ``speedup_heatmap.png``: tokens x intermediate, our speedup over the fastest
  other implementation in each cell (headline dtype);
- ``mlp.png``: the whole MLP's time against tokens per model, with its floor;
- ``host.png``: per-call overhead, cold first-call latency, recompilations.

matplotlib is optional (the ``bench`` extra): without it no figures are written.
"""

from __future__ import annotations

import math
from pathlib import Path

from .grid import ACTIVATION_FORWARD, ACTIVATION_FORWARD_BACKWARD, MLP_FORWARD, MLP_FORWARD_BACKWARD
from .implementations import ACTIVATION_IMPLEMENTATIONS, BASELINES, LABELS, MLP_IMPLEMENTATIONS, OURS

ACTIVATION_WORKLOADS = (ACTIVATION_FORWARD, ACTIVATION_FORWARD_BACKWARD)
MLP_WORKLOADS = (MLP_FORWARD, MLP_FORWARD_BACKWARD)
STYLE = {
    "eager": {"color": "#7f7f7f", "marker": "o"},
    "compile": {"color": "#1f77b4", "marker": "s"},
    "liger": {"color": "#ff7f0e", "marker": "^"},
    "ours": {"color": "#2ca02c", "marker": "D"},
    "ours_concat": {"color": "#98df8a", "marker": "v"},
}
SHORT = {"eager": "eager", "compile": "compile", "liger": "Liger"}
RECOMPILE_SHORT = {
    "compile_static": "compile\ndynamic=False",
    "compile_default": "compile\n(default)",
    "ours_compiled_dynamic": "ours in compile\ndynamic=True",
    "ours_direct": "ours\ndirect",
}


def _ok(cell: dict, name: str) -> bool:
    return cell["results"].get(name, {}).get("status") == "ok"


def _cells(results: dict, workload: str, dtype: str | None = None, approximate: str | None = None) -> list[dict]:
    return [
        c
        for c in results["cells"]
        if c["workload"] == workload
        and "skipped" not in c
        and (dtype is None or c["dtype"] == dtype)
        and (approximate is None or c["approximate"] == approximate)
    ]


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=130, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _activation_bandwidth(plt, results: dict, out_dir: Path) -> Path | None:
    approximate = results["grid"]["approximations"][0]
    workloads = [w for w in ACTIVATION_WORKLOADS if _cells(results, w, approximate=approximate)]
    dtypes = [d for d in results["grid"]["dtypes"] if any(_cells(results, w, d, approximate) for w in workloads)]
    if not workloads or not dtypes:
        return None
    fig, axes = plt.subplots(
        len(workloads), len(dtypes), figsize=(5.2 * len(dtypes), 4.2 * len(workloads)), squeeze=False
    )
    copy_tbps = results["ceilings"]["copy"]["tb_per_s"]
    for row, workload in enumerate(workloads):
        for col, dtype in enumerate(dtypes):
            ax = axes[row][col]
            cells = sorted(_cells(results, workload, dtype, approximate), key=lambda c: c["bytes"])
            for name in ACTIVATION_IMPLEMENTATIONS:
                points = [(c["bytes"], c["results"][name]["tb_per_s"]) for c in cells if _ok(c, name)]
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, label=LABELS[name], linewidth=1, markersize=4, **STYLE[name])
            ax.axhline(copy_tbps, color="black", linestyle="--", linewidth=1, label="copy bandwidth (measured)")
            ax.set_xscale("log")
            ax.set_xlabel("bytes moved per call (byte model)")
            ax.set_ylabel("effective bandwidth (TB/s)")
            ax.set_title(f"{workload}, {dtype}, GELU {approximate}")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"GeGLU activation: effective bandwidth on {results['meta']['device_name']}")
    return _save(fig, out_dir / "activation_bandwidth.png")


def _speedup_heatmap(plt, results: dict, out_dir: Path) -> Path | None:
    from matplotlib.colors import TwoSlopeNorm

    dtype, approximate = results["grid"]["dtypes"][0], results["grid"]["approximations"][0]
    workloads = [w for w in ACTIVATION_WORKLOADS if _cells(results, w, dtype, approximate)]
    if not workloads:
        return None
    tokens, intermediates = results["grid"]["tokens"], results["grid"]["intermediates"]
    width = max(1.3 * len(intermediates), 5) * len(workloads) + 2
    fig, axes = plt.subplots(1, len(workloads), figsize=(width, max(0.7 * len(tokens), 3) + 2), squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        values = [[math.nan] * len(intermediates) for _ in tokens]
        notes = [[""] * len(intermediates) for _ in tokens]
        for cell in _cells(results, workload, dtype, approximate):
            versus = cell["speedups"].get(OURS, {})
            if not versus:
                continue
            base, ratio = min(versus.items(), key=lambda kv: kv[1])
            i, j = tokens.index(cell["tokens"]), intermediates.index(cell["intermediate"])
            values[i][j], notes[i][j] = ratio, f"{ratio:.2f}×\nvs {SHORT[base]}"
        finite = [v for row in values for v in row if not math.isnan(v)]
        if not finite:
            ax.set_axis_off()
            continue
        norm = TwoSlopeNorm(vcenter=1.0, vmin=min(min(finite), 0.9), vmax=max(max(finite), 1.1))
        image = ax.imshow(values, cmap="RdYlGn", norm=norm, aspect="auto")
        for i in range(len(tokens)):
            for j in range(len(intermediates)):
                ax.text(j, i, notes[i][j] or "–", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(intermediates)), [str(n) for n in intermediates])
        ax.set_yticks(range(len(tokens)), [str(t) for t in tokens])
        ax.set_xlabel("intermediate size")
        ax.set_ylabel("tokens")
        ax.set_title(f"{workload}, {dtype}")
        fig.colorbar(image, ax=ax, label="speedup (×)")
    fig.suptitle(
        f"GeGLU activation on {results['meta']['device_name']}: speedup of ours (gate, up) over the fastest of "
        f"{', '.join(SHORT[b] for b in BASELINES)} in each cell (>1: ours faster)",
        y=1.02,
    )
    return _save(fig, out_dir / "speedup_heatmap.png")


def _mlp(plt, results: dict, out_dir: Path) -> Path | None:
    workloads = [w for w in MLP_WORKLOADS if _cells(results, w)]
    if not workloads:
        return None
    models = list(dict.fromkeys(c["model"] for w in workloads for c in _cells(results, w)))
    fig, axes = plt.subplots(len(workloads), len(models), figsize=(5 * len(models), 4 * len(workloads)), squeeze=False)
    for row, workload in enumerate(workloads):
        for col, model in enumerate(models):
            ax = axes[row][col]
            cells = sorted((c for c in _cells(results, workload) if c["model"] == model), key=lambda c: c["tokens"])
            for name in MLP_IMPLEMENTATIONS:
                points = [(c["tokens"], c["results"][name]["median_us"]) for c in cells if _ok(c, name)]
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, label=LABELS[name], linewidth=1, markersize=4, **STYLE[name])
            if cells:
                ax.plot(
                    [c["tokens"] for c in cells],
                    [c["floor_us"] for c in cells],
                    "k--",
                    linewidth=1,
                    label="floor (bytes or FLOPs)",
                )
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("tokens")
            ax.set_ylabel("median time per call (µs)")
            dtype = cells[0]["dtype"] if cells else ""
            ax.set_title(f"{model} MLP, {workload.removeprefix('mlp-')}, {dtype}")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"Gemma-style GeGLU MLP on {results['meta']['device_name']}")
    return _save(fig, out_dir / "mlp.png")


def _host(plt, results: dict, out_dir: Path) -> Path | None:
    host = results["host"]
    overhead, cold, recompiles = (
        host.get("call_overhead", {}),
        host.get("cold_start", {}),
        host.get("recompilations", {}),
    )
    panels = [
        p
        for p in (overhead.get("results"), cold if cold.get("status") == "ok" else None, recompiles.get("results"))
        if p
    ]
    if not panels:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    ax = axes[0]
    ran = {n: r for n, r in overhead.get("results", {}).items() if r["status"] == "ok"}
    if ran:
        names = list(ran)
        ax.bar(
            [i - 0.2 for i in range(len(names))],
            [ran[n]["host_loop_us"] for n in names],
            0.4,
            label="host loop (sync at end)",
        )
        replay = [ran[n].get("graph_replay_us", math.nan) for n in names]
        if not all(math.isnan(v) for v in replay):
            ax.bar([i + 0.2 for i in range(len(names))], replay, 0.4, label="CUDA graph replay (no host)")
        ax.set_xticks(range(len(names)), [LABELS[n] for n in names], rotation=20, ha="right")
        ax.set_ylabel("µs per call")
        ax.set_title(f"per-call cost at {overhead['tokens']} × {overhead['intermediate']} {overhead['dtype']}")
        ax.legend(fontsize=8)
    else:
        ax.set_axis_off()
    ax = axes[1]
    if cold.get("status") == "ok":
        bars = {
            "ours\nforward": cold["ours_first_forward_s"],
            "ours\nbackward": cold["ours_first_backward_s"],
            "torch.compile\nforward": cold["compile_first_forward_s"],
        }
        ax.bar(list(bars), list(bars.values()), color=[STYLE["ours"]["color"]] * 2 + [STYLE["compile"]["color"]])
        ax.set_ylabel("first call, to a synchronized result (s)")
        ax.set_title(f"cold caches, fresh process ({cold['tokens']} × {cold['intermediate']} {cold['dtype']})")
    else:
        ax.set_axis_off()
    ax = axes[2]
    ran = {label: r for label, r in recompiles.get("results", {}).items() if r["status"] == "ok"}
    if ran:
        labels = list(ran)
        bars = ax.bar(range(len(labels)), [ran[label]["graphs_compiled"] for label in labels])
        for bar, label in zip(bars, labels):
            ax.annotate(
                f"{ran[label]['total_s']:.1f} s",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        ax.set_xticks(range(len(labels)), [RECOMPILE_SHORT[label] for label in labels], fontsize=8)
        ax.set_ylabel("graphs compiled (label: total seconds)")
        ax.set_title(f"{len(recompiles['token_counts'])} different token counts")
    else:
        ax.set_axis_off()
    fig.suptitle(f"Host side on {results['meta']['device_name']}")
    return _save(fig, out_dir / "host.png")


def write_plots(results: dict, out_dir: Path) -> list[Path]:
    """Every figure the results have data for; none (and a note in the results) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        results.setdefault("notes", []).append(f"no plots: matplotlib is not installed ({err})")
        return []
    written = []
    for make in (_activation_bandwidth, _speedup_heatmap, _mlp, _host):
        path = make(plt, results, out_dir)
        if path is not None:
            written.append(path)
    return written
