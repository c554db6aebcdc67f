"""The results as a reader wants them: progress lines, markdown tables, the list of failures.

``results.md`` opens with the headline (per workload, dtype and GELU form:
our bandwidth at the largest cell and its share of the copy bandwidth, and
speedups over eager, torch.compile and Liger as geometric means over the
cells where both ran, with their range), then the host-side figures, then
one table per workload and dtype with every cell, then the failures.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .grid import MLP_FORWARD, MLP_FORWARD_BACKWARD, WORKLOADS
from .implementations import BASELINES, COMPILE, LABELS, OUR_IMPLEMENTATIONS, OURS

MLP_WORKLOADS = (MLP_FORWARD, MLP_FORWARD_BACKWARD)


def md_cell(text) -> str:
    """Text safe inside a markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _us(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.1f}" if value < 1e4 else f"{value:,.0f}"


def _short_status(measurement: dict) -> str:
    if measurement["status"] == "ok":
        flag = "" if measurement["within_tolerance"] else " ✗acc"
        return f"{_us(measurement['median_us'])}{flag}"
    return "skip" if measurement["status"] == "skipped" else "FAIL"


def progress_line(title: str, record: dict) -> str:
    if "skipped" in record:
        return f"{title}: skipped: {record['skipped']}"
    parts = []
    for name, measurement in record["results"].items():
        text = f"{name} {_short_status(measurement)}"
        if name == COMPILE and measurement["status"] == "ok":
            text += f" (compile {measurement['first_call_s']:.1f} s)"
        parts.append(text)
    line = f"{title}: " + " | ".join(parts) + " µs"
    ours = record["results"].get(OURS, {})
    if ours.get("status") == "ok":
        line += f"; ours {ours['tb_per_s']:.2f} TB/s, {ours['pct_copy_bandwidth']:.0f}% of copy, {ours['pct_of_floor']:.0f}% of floor"
    return line


def host_line(name: str, record: dict) -> str:
    if record.get("status") in ("failed", "skipped"):
        return f"{name}: {record['status']}: {record['reason']}"
    if name == "call_overhead":
        parts = [
            f"{impl} {r['host_loop_us']:.1f} µs"
            + (f" (graph {r['graph_replay_us']:.1f})" if "graph_replay_us" in r else "")
            if r["status"] == "ok"
            else f"{impl} {r['status']}"
            for impl, r in record["results"].items()
        ]
        return "call overhead per call: " + ", ".join(parts)
    if name == "recompilations":
        parts = [
            f"{r['description']}: {r['graphs_compiled']} graphs, {r['total_s']:.1f} s"
            if r["status"] == "ok"
            else f"{r['description']}: failed"
            for r in record["results"].values()
        ]
        return f"over {len(record['token_counts'])} token counts: " + "; ".join(parts)
    return (
        f"cold start: ours first forward {record['ours_first_forward_s']:.2f} s, "
        f"torch.compile first forward {record['compile_first_forward_s']:.2f} s"
    )


def failures(results: dict) -> list[dict]:
    """Every failed measurement and every result over its accuracy tolerance."""
    found = []
    for cell in results["cells"]:
        for name, measurement in cell["results"].items():
            if measurement["status"] == "failed":
                found.append(
                    {"kind": "failed", "where": cell["title"], "implementation": name, "reason": measurement["reason"]}
                )
            elif measurement["status"] == "ok" and not measurement["within_tolerance"]:
                found.append(
                    {
                        "kind": "accuracy",
                        "where": cell["title"],
                        "implementation": name,
                        "rel_errors": measurement["rel_errors"],
                    }
                )
    for part, record in results["host"].items():
        if record.get("status") == "failed":
            found.append(
                {"kind": "failed", "where": f"host {part}", "implementation": None, "reason": record["reason"]}
            )
        for name, result in record.get("results", {}).items():
            if result.get("status") == "failed":
                found.append(
                    {"kind": "failed", "where": f"host {part}", "implementation": name, "reason": result["reason"]}
                )
    return found


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _speedup_summary(cells: list[dict], ours: str, base: str) -> str:
    ratios = [c["speedups"][ours][base] for c in cells if base in c["speedups"].get(ours, {})]
    if not ratios:
        return "–"
    if len(ratios) == 1:
        return f"{ratios[0]:.2f}×"
    return f"{_geomean(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})"


def _groups(results: dict) -> dict[tuple[str, str, str], list[dict]]:
    """Cells by (workload, dtype, GELU form), in the report's order."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for workload in WORKLOADS:
        for cell in results["cells"]:
            if cell["workload"] == workload:
                groups.setdefault((workload, cell["dtype"], cell["approximate"]), []).append(cell)
    return groups


def _size_label(cell: dict) -> str:
    if cell["workload"] in MLP_WORKLOADS:
        return f"{cell['model']} × {cell['tokens']} tokens"
    return f"{cell['tokens']} × {cell['intermediate']}"


def _headline_rows(results: dict) -> list[str]:
    rows = [
        "| workload | dtype | GELU | ours | largest cell | TB/s | % of copy bw | % of floor | vs eager | vs torch.compile | vs Liger |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for (workload, dtype, approximate), cells in _groups(results).items():
        for ours in OUR_IMPLEMENTATIONS:
            ran = [c for c in cells if c["results"].get(ours, {}).get("status") == "ok"]
            if not ran:
                continue
            largest = max(ran, key=lambda c: c["bytes"])
            mine = largest["results"][ours]
            speedups = [_speedup_summary(ran, ours, base) for base in BASELINES]
            rows.append(
                f"| {workload} | {dtype} | {approximate} | {md_cell(LABELS[ours])} | {_size_label(largest)} | "
                f"{mine['tb_per_s']:.2f} | {mine['pct_copy_bandwidth']:.0f}% | {mine['pct_of_floor']:.0f}% | "
                + " | ".join(speedups)
                + " |"
            )
    return rows


def versions_text(versions: dict) -> str:
    """A results file's versions as the reports print them: "torch 2.11.0, triton 3.6.0, ..." (installed ones only)."""
    return ", ".join(f"{name} {version}" for name, version in versions.items() if version)


def headline_markdown(results: dict) -> str:
    meta, ceilings = results["meta"], results["ceilings"]
    versions = versions_text(meta["versions"])
    lines = [
        f"# fused-geglu benchmark on {meta['device_name']}",
        "",
        f"{meta['date_utc']} · {versions}",
        "",
        f"Ceilings measured in this run: copy {ceilings['copy']['tb_per_s']:.3f} TB/s (read + write), "
        f"matmul {ceilings['matmul']['tflop_per_s']:.1f} TFLOP/s ({ceilings['matmul']['n']}³ {ceilings['matmul']['dtype']}). "
        f"Speedups are other time / our time (>1: ours faster): geometric mean over the cells where both ran, "
        f"(range). TB/s, % of copy bandwidth and % of floor are at the largest cell that ran.",
        "",
        *_headline_rows(results),
    ]
    if meta["device"] == "cpu":
        lines += [
            "",
            f"**A CPU run**: a smoke test of the code path at tiny sizes. Ours runs {cpu_kernel_path(meta)}. "
            "torch.compile runs with aot_eager. These times say nothing about performance.",
        ]
    if not meta["complete"]:
        lines += ["", "**The run did not complete: these are partial results.**"]
    lines += _skipped_lines(results)
    lines += ["", *_host_markdown(results["host"])]
    return "\n".join(lines)


def _skipped_lines(results: dict) -> list[str]:
    """What the time or memory budget left out, and how to run the time-skipped part."""
    lines = []
    for cause, budget in (("time", "--time-budget-s"), ("memory", "--memory-budget-gib")):
        skipped = [c for c in results["cells"] if c.get("skip_cause") == cause]
        if not skipped:
            continue
        workloads = sorted({c["workload"] for c in skipped})
        dtypes = sorted({c["dtype"] for c in skipped})
        lines += [
            "",
            f"**{len(skipped)} cells were skipped for the {cause} budget ({budget})**: "
            f"{', '.join(workloads)} in {', '.join(dtypes)}."
            + (
                f" Run them on their own: `--dtypes {' '.join(dtypes)} --workloads {' '.join(workloads)}`."
                if cause == "time"
                else ""
            ),
        ]
    return lines


def _host_markdown(host: dict) -> list[str]:
    lines = []
    overhead = host.get("call_overhead")
    if overhead and "results" in overhead:
        lines += [
            f"## Per-call overhead ({overhead['dtype']}, {overhead['tokens']} × {overhead['intermediate']})",
            "",
            "| implementation | host loop µs/call | CUDA graph replay µs/call | host adds µs/call |",
            "| --- | ---: | ---: | ---: |",
        ]
        for name, r in overhead["results"].items():
            if r["status"] != "ok":
                lines.append(f"| {md_cell(LABELS[name])} | {r['status']}: {md_cell(r['reason'])} | | |")
                continue
            lines.append(
                f"| {md_cell(LABELS[name])} | {r['host_loop_us']:.1f} | {_us(r.get('graph_replay_us'))} | {_us(r.get('host_added_us'))} |"
            )
        captures = [
            f"{LABELS[n]}: {r['graph_replay_error']}"
            for n, r in overhead["results"].items()
            if "graph_replay_error" in r
        ]
        lines += ["", *(f"CUDA graph capture failed for {text}" for text in captures)]
        lines.append("")
    recompiles = host.get("recompilations")
    if recompiles and "results" in recompiles:
        lines += [
            f"## Recompilations over {len(recompiles['token_counts'])} token counts "
            f"({recompiles['dtype']}, intermediate {recompiles['intermediate']}, backend {recompiles['compile_backend']})",
            "",
            "| scenario | graphs compiled | new Triton variants of ours | total s |",
            "| --- | ---: | ---: | ---: |",
        ]
        for r in recompiles["results"].values():
            if r["status"] != "ok":
                lines.append(f"| {r['description']} | {r['status']}: {md_cell(r['reason'])} | | |")
                continue
            variants = r["new_triton_variants_of_ours"]
            lines.append(
                f"| {r['description']} | {r['graphs_compiled']} | {'–' if variants is None else variants} | {r['total_s']:.2f} |"
            )
        lines.append("")
    cold = host.get("cold_start")
    if cold:
        lines += ["## First call with empty Triton and Inductor caches (fresh process)", ""]
        if cold["status"] != "ok":
            lines.append(f"{cold['status']}: {cold['reason']}")
        else:
            lines += [
                f"{cold['dtype']} {cold['tokens']} × {cold['intermediate']}; torch import {cold['torch_import_s']:.1f} s, "
                f"device init {cold['device_init_s']:.2f} s, kernel load {cold['kernel_load_s']:.2f} s (not counted below).",
                "",
                "| implementation | first call s | second call s |",
                "| --- | ---: | ---: |",
                f"| ours forward | {cold['ours_first_forward_s']:.3f} | {cold['ours_second_forward_s']:.4f} |",
                f"| ours first forward+backward (backward kernel's first call) | {cold['ours_first_backward_s']:.3f} | |",
                f"| torch.compile ({cold['compile_backend']}) forward | {cold['compile_first_forward_s']:.3f} | "
                f"{cold['compile_second_forward_s']:.4f} |",
            ]
        lines.append("")
    return lines


def _cell_table(cells: list[dict]) -> list[str]:
    names = list(cells[0]["results"])
    header = (
        "| size | "
        + " | ".join(f"{md_cell(LABELS[n])} µs" for n in names)
        + " | ours TB/s | ours % copy | ours % floor | ours vs best other | max rel err (ours) |"
    )
    rows = [header, "|" + " --- |" * (len(names) + 6)]
    for cell in cells:
        if "skipped" in cell:
            rows.append(f"| {_size_label(cell)} | skipped: {md_cell(cell['skipped'])} |" + " |" * (len(names) + 4))
            continue
        times = []
        for name in names:
            m = cell["results"][name]
            text = _short_status(m)
            if name == COMPILE and m["status"] == "ok":
                text += f" (+{m['first_call_s']:.1f} s compile)"
            times.append(text)
        ours = cell["results"].get(OURS, {})
        if ours.get("status") == "ok":
            best = min(cell["speedups"].get(OURS, {}).items(), key=lambda kv: kv[1], default=None)
            versus = f"{best[1]:.2f}× vs {best[0]}" if best else "–"
            worst_error = max(ours["rel_errors"].values())
            figures = f"{ours['tb_per_s']:.2f} | {ours['pct_copy_bandwidth']:.0f}% | {ours['pct_of_floor']:.0f}% | {versus} | {worst_error:.1e}"
        else:
            figures = "– | – | – | – | –"
        rows.append(f"| {_size_label(cell)} | " + " | ".join(times) + f" | {figures} |")
    return rows


def full_markdown(results: dict) -> str:
    lines = [headline_markdown(results), "## Every cell", ""]
    lines.append(
        "Median µs per call (✗acc: over the accuracy tolerance; skip/FAIL: see results.json). "
        "'vs best other' is our speedup over the fastest baseline that ran."
    )
    for (workload, dtype, approximate), cells in _groups(results).items():
        lines += ["", f"### {workload}, {dtype}, GELU {approximate}", "", *_cell_table(cells)]
    lines += ["", "## Byte model", ""]
    lines += [f"- {workload}: {text}" for workload, text in results["byte_model"].items()]
    lines += ["", f"Timer: {results['meta']['timer']}.", ""]
    lines += [f"Note: {note}" for note in results["notes"]]
    failed = results["failures"]
    lines += [f"## Failures and accuracy flags ({len(failed)})", ""]
    for f in failed:
        detail = f.get("reason") or f"relative errors {f.get('rel_errors')}"
        lines.append(f"- {f['kind']}: {f['where']} / {f['implementation']}: {detail}")
    return "\n".join(lines) + "\n"


def cpu_kernel_path(meta: dict) -> str:
    """What ran ours in a CPU run (``environment.kernel_path``; results from before it was recorded say both)."""
    return meta["kernel"].get("runs", "under Triton's interpreter (TRITON_INTERPRET=1) or the PyTorch fallback")


def write_json(path: Path, results: dict) -> None:
    path.write_text(json.dumps(results, indent=1, allow_nan=True) + "\n", encoding="utf-8")


def write_all(results: dict, out_dir: Path) -> list[Path]:
    """results.md and the plots; returns the paths written."""
    from . import plots

    md_path = out_dir / "results.md"
    md_path.write_text(full_markdown(results), encoding="utf-8")
    return [md_path, *plots.write_plots(results, out_dir)]
