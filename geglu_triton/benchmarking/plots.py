"""The figures: what a reader would rather look at than read.

- ``activation_bandwidth.png``: effective TB/s against bytes moved, one line per
  implementation, one panel per workload and dtype, the measured copy bandwidth
  as the ceiling;
- ``speedup_heatmap.png``: tokens x intermediate, our speedup over the fastest
  other implementation in each cell (headline dtype);
- ``mlp.png``: the whole MLP's time against tokens per model, with its floor;
- ``host.png``: per-call overhead, cold first-call latency, recompilations;
- ``models.png`` (``bench --models``): per Gemma3 size, the MLP's GPU and host
  time against tokens per implementation; below, each implementation's speed
  relative to eager's in prefill, decode and the training step.

matplotlib is optional (the ``bench`` extra): without it no figures are written.
"""

from __future__ import annotations

import math
from pathlib import Path

from .grid import ACTIVATION_FORWARD, ACTIVATION_FORWARD_BACKWARD, MLP_FORWARD, MLP_FORWARD_BACKWARD
from .implementations import ACTIVATION_IMPLEMENTATIONS, BASELINES, LABELS, MLP_IMPLEMENTATIONS, OURS
from .model_grid import in_size_order

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


def _activation_bandwidth(plt, results: dict):
    approximate = results["grid"]["approximations"][0]
    workloads = [w for w in ACTIVATION_WORKLOADS if _cells(results, w, approximate=approximate)]
    dtypes = [d for d in results["grid"]["dtypes"] if any(_cells(results, w, d, approximate) for w in workloads)]
    if not workloads or not dtypes:
        return None
    fig, axes = plt.subplots(
        len(workloads),
        len(dtypes),
        figsize=(5.2 * len(dtypes), 4.2 * len(workloads)),
        squeeze=False,
        constrained_layout=True,
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
            ax.axhline(
                copy_tbps, color="black", linestyle="--", linewidth=1, label=f"copy bandwidth ({copy_tbps:.2f} TB/s)"
            )
            ax.set_xscale("log")
            ax.set_xlabel("bytes moved per call (byte model)")
            ax.set_ylabel("effective bandwidth (TB/s)")
            ax.set_title(f"{workload}, {dtype}, GELU {approximate}")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(loc="lower right", fontsize=8)
    fig.suptitle(f"GeGLU activation: effective bandwidth on {results['meta']['device_name']}")
    return fig


def _heatmap_values(results: dict, workload: str, dtype: str, approximate: str) -> tuple[list, list]:
    """Per (tokens, intermediate): our speedup over the fastest baseline, and its annotation."""
    tokens, intermediates = results["grid"]["tokens"], results["grid"]["intermediates"]
    values = [[math.nan] * len(intermediates) for _ in tokens]
    notes = [["–"] * len(intermediates) for _ in tokens]
    for cell in _cells(results, workload, dtype, approximate):
        versus = cell["speedups"].get(OURS, {})
        if versus:
            base, ratio = min(versus.items(), key=lambda kv: kv[1])
            i, j = tokens.index(cell["tokens"]), intermediates.index(cell["intermediate"])
            values[i][j], notes[i][j] = ratio, f"{ratio:.2f}×\nvs {SHORT[base]}"
    return values, notes


def _speedup_heatmap(plt, results: dict):
    from matplotlib.colors import TwoSlopeNorm

    dtype, approximate = results["grid"]["dtypes"][0], results["grid"]["approximations"][0]
    tables = {
        w: _heatmap_values(results, w, dtype, approximate)
        for w in ACTIVATION_WORKLOADS
        if _cells(results, w, dtype, approximate)
    }
    finite = [v for values, _ in tables.values() for row in values for v in row if not math.isnan(v)]
    if not finite:
        return None
    tokens, intermediates = results["grid"]["tokens"], results["grid"]["intermediates"]
    # One colour scale for every panel, centred on 1 (as fast as the best other).
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(min(finite), 0.9), vmax=max(max(finite), 1.1))
    fig, axes = plt.subplots(
        1,
        len(tables),
        figsize=(max(1.3 * len(intermediates), 5) * len(tables) + 2, max(0.7 * len(tokens), 3) + 2),
        squeeze=False,
        constrained_layout=True,
    )
    for ax, (workload, (values, notes)) in zip(axes[0], tables.items()):
        image = ax.imshow(values, cmap="RdYlGn", norm=norm, aspect="auto")
        for i, row in enumerate(notes):
            for j, note in enumerate(row):
                ax.text(j, i, note, ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(intermediates)), [str(n) for n in intermediates])
        ax.set_yticks(range(len(tokens)), [str(t) for t in tokens])
        ax.set_xlabel("intermediate size")
        ax.set_ylabel("tokens")
        ax.set_title(f"{workload}, {dtype}, GELU {approximate}")
    fig.colorbar(image, ax=list(axes[0]), label="speedup of ours (×, >1: ours faster)")
    fig.suptitle(
        f"GeGLU activation on {results['meta']['device_name']}: ours (gate, up) against the fastest of "
        f"{', '.join(SHORT[b] for b in BASELINES)} in each cell"
    )
    return fig


def _plain_log_ticks(axis) -> None:
    """Log-scale tick labels as plain numbers (1, 16, 1024), not powers."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _mlp(plt, results: dict):
    workloads = [w for w in MLP_WORKLOADS if _cells(results, w)]
    if not workloads:
        return None
    models = list(dict.fromkeys(c["model"] for w in workloads for c in _cells(results, w)))
    fig, axes = plt.subplots(
        len(workloads),
        len(models),
        figsize=(5 * len(models), 4 * len(workloads)),
        squeeze=False,
        constrained_layout=True,
    )
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
                tokens = [c["tokens"] for c in cells]
                ax.plot(tokens, [c["floor_us"] for c in cells], "k--", linewidth=1, label="floor (bytes or FLOPs)")
                ax.set_xscale("log", base=2)
                ax.set_xticks(tokens)
                ax.set_title(f"{model} MLP, {workload.removeprefix('mlp-')}, {cells[0]['dtype']}")
            ax.set_yscale("log")
            _plain_log_ticks(ax.xaxis)
            _plain_log_ticks(ax.yaxis)
            ax.set_xlabel("tokens")
            ax.set_ylabel("median time per call (µs)")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"Gemma-style GeGLU MLP on {results['meta']['device_name']}")
    return fig


def _label_bars(ax, bars, texts) -> None:
    for bar, text in zip(bars, texts):
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)


def _overhead_panel(ax, overhead: dict) -> None:
    ran = {n: r for n, r in overhead.get("results", {}).items() if r["status"] == "ok"}
    if not ran:
        ax.set_axis_off()
        return
    names = list(ran)
    host = [ran[n]["host_loop_us"] for n in names]
    bars = ax.bar([i - 0.2 for i in range(len(names))], host, 0.4, label="host loop (one sync at the end)")
    _label_bars(ax, bars, [f"{v:.1f}" for v in host])
    replay = [ran[n].get("graph_replay_us") for n in names]
    if any(v is not None for v in replay):
        replay = [math.nan if v is None else v for v in replay]
        bars = ax.bar([i + 0.2 for i in range(len(names))], replay, 0.4, label="CUDA graph replay (no host work)")
        _label_bars(ax, bars, ["" if math.isnan(v) else f"{v:.1f}" for v in replay])
    ax.set_xticks(range(len(names)), [LABELS[n] for n in names], rotation=20, ha="right")
    ax.set_ylabel("µs per call")
    ax.set_title(f"per-call cost, {overhead['tokens']} × {overhead['intermediate']} {overhead['dtype']}")
    ax.legend(fontsize=8)


def _cold_start_panel(ax, cold: dict) -> None:
    if cold.get("status") != "ok":
        ax.set_axis_off()
        return
    seconds = {
        "ours\nforward": cold["ours_first_forward_s"],
        "ours\nforward+backward": cold["ours_first_backward_s"],
        "torch.compile\nforward": cold["compile_first_forward_s"],
    }
    colors = [STYLE["ours"]["color"]] * 2 + [STYLE["compile"]["color"]]
    bars = ax.bar(list(seconds), list(seconds.values()), color=colors)
    _label_bars(ax, bars, [f"{v:.2f} s" for v in seconds.values()])
    ax.set_ylabel("first call, to a synchronized result (s)")
    ax.set_title(f"empty caches, fresh process, {cold['tokens']} × {cold['intermediate']} {cold['dtype']}")


def _recompile_panel(ax, recompiles: dict) -> None:
    ran = {scenario: r for scenario, r in recompiles.get("results", {}).items() if r["status"] == "ok"}
    if not ran:
        ax.set_axis_off()
        return
    bars = ax.bar(range(len(ran)), [r["graphs_compiled"] for r in ran.values()])
    _label_bars(ax, bars, [f"{r['graphs_compiled']} ({r['total_s']:.1f} s)" for r in ran.values()])
    ax.set_xticks(range(len(ran)), [RECOMPILE_SHORT[scenario] for scenario in ran], fontsize=8)
    ax.set_ylabel("graphs compiled (total seconds of those calls)")
    ax.set_title(f"one function, {len(recompiles['token_counts'])} different token counts")


def _host(plt, results: dict):
    host = results["host"]
    if not host:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), constrained_layout=True)
    _overhead_panel(axes[0], host.get("call_overhead", {}))
    _cold_start_panel(axes[1], host.get("cold_start", {}))
    _recompile_panel(axes[2], host.get("recompilations", {}))
    fig.suptitle(f"Host side on {results['meta']['device_name']}")
    return fig


#: The model-level figures of speed against eager: (part, figure, its label, whether larger is faster).
MODEL_SPEED_FIGURES = (
    ("prefill", "device_ms", "prefill\nGPU", False),
    ("decode", "generate_tokens_per_s", "decode\ngenerate", True),
    ("decode", "static_loop_tokens_per_s", "decode\nstatic loop", True),
    ("decode", "static_step_device_ms", "decode step\nGPU", False),
    ("training", "device_ms", "training\nGPU", False),
)


def _model_mlp_panel(ax, record: dict) -> None:
    cells = [c for c in record["mlp"].get("cells", []) if "results" in c]
    for name in STYLE:
        for key, line, label in (("device_us", "-", "GPU"), ("host_us", ":", "host")):
            points = [(c["tokens"], c["results"][name][key]) for c in cells if key in c["results"].get(name, {})]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, line, label=f"{name} {label}", linewidth=1, markersize=4, **STYLE[name])
    if cells:
        tokens = [c["tokens"] for c in cells]
        ax.set_xscale("log", base=2)
        ax.set_xticks(tokens)
    ax.set_yscale("log")
    _plain_log_ticks(ax.xaxis)
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel("tokens")
    ax.set_ylabel("µs per MLP call")
    ax.set_title(f"Gemma3 {record['size']} MLP ({record['config']['hidden']} x {record['config']['intermediate']})")
    ax.grid(True, which="both", alpha=0.3)


def _model_speed_panel(ax, results: dict) -> None:
    """Each implementation's speed relative to eager's, per size and figure (>1: faster than eager)."""
    groups, ratios = [], {}
    for record in in_size_order(results["models"]):
        for part, key, label, larger_is_faster in MODEL_SPEED_FIGURES:
            measured = (record.get(part) or {}).get("results", {})
            eager = measured.get("eager", {}).get(key)
            if not eager:
                continue
            groups.append(f"{record['size']}\n{label}")
            for name, r in measured.items():
                if key in r:
                    ratio = r[key] / eager if larger_is_faster else eager / r[key]
                    ratios.setdefault(name, {})[len(groups) - 1] = ratio
    if not groups:
        ax.set_axis_off()
        return
    width = 0.8 / max(len(ratios), 1)
    for offset, (name, values) in enumerate(ratios.items()):
        xs = [i - 0.4 + width * (offset + 0.5) for i in values]
        ax.bar(xs, list(values.values()), width, label=name, color=STYLE.get(name, {}).get("color"))
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xticks(range(len(groups)), groups, fontsize=7)
    ax.set_ylabel("speed relative to eager (>1: faster)")
    ax.set_title("whole model: prefill, decode, training step")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def _models(plt, results: dict):
    with_mlp = [r for r in in_size_order(results["models"]) if "cells" in (r.get("mlp") or {})]
    if not results["models"]:
        return None
    columns = max(len(with_mlp), 1)
    fig = plt.figure(figsize=(5 * columns, 9), constrained_layout=True)
    grid = fig.add_gridspec(2, columns)
    for col, record in enumerate(with_mlp):
        _model_mlp_panel(fig.add_subplot(grid[0, col]), record)
    if with_mlp:
        fig.axes[0].legend(loc="upper left", fontsize=7)
    _model_speed_panel(fig.add_subplot(grid[1, :]), results)
    fig.suptitle(f"Gemma3 models ({results['dtype']}, random weights) on {results['meta']['device_name']}")
    return fig


def _write_figures(results: dict, out_dir: Path, makers: dict) -> list[Path]:
    """Every figure of ``makers`` (file name -> maker of the figure, or None without data for it) the results
    have data for; none (and a note in the results) without matplotlib. A figure not made this time is removed
    from ``out_dir``, so that one from an earlier run into the same directory never sits beside these results.
    """
    written = []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        results["notes"].append(f"no plots: matplotlib is not installed ({err})")
        plt = None
    for name, make in makers.items():
        path = out_dir / name
        path.unlink(missing_ok=True)
        if plt is None:
            continue
        try:
            fig = make(plt, results)
            if fig is not None:
                fig.savefig(path, dpi=130, bbox_inches="tight")
                written.append(path)
        except Exception as err:  # a figure is not worth the results: note it and go on
            results["notes"].append(f"plot {make.__name__.lstrip('_')} failed: {type(err).__name__}: {err}")
        finally:
            plt.close("all")
    return written


def write_plots(results: dict, out_dir: Path) -> list[Path]:
    """The kernel grid's figures (``bench``)."""
    figures = {
        "activation_bandwidth.png": _activation_bandwidth,
        "speedup_heatmap.png": _speedup_heatmap,
        "mlp.png": _mlp,
        "host.png": _host,
    }
    return _write_figures(results, out_dir, figures)


def write_model_plots(results: dict, out_dir: Path) -> list[Path]:
    """The model-level figure (``bench --models``)."""
    return _write_figures(results, out_dir, {"models.png": _models})
