"""The model-level results as a reader wants them: the README table, every table, the differences.

``readme_table.md`` is the table README's model-level section shows: per
Gemma3 size and implementation, the MLP's GPU time at decode and prefill
token counts and its host time, prefill, decode tokens/s, the training step
and its memory, and whether every result matched eager's. Speed figures of
the other implementations carry their ratio to eager's (>1: faster).
``models.md`` has that table, then every figure of every part, then where a
result differs from eager's.
"""

from __future__ import annotations

from pathlib import Path

from .implementations import EAGER
from .model_grid import DECODE, PREFILL, TRAINING, in_size_order
from .report import cpu_kernel_path, md_cell, versions_text

#: The MLP token counts the README table shows (GPU time): decode, and a long prefill.
README_MLP_TOKENS = (1, 16, 4096)
GIB = 2**30
#: What runs must share to go in one table (the plan's sizes, layers and time budget may differ).
MEASURED_PLAN_KEYS = (
    "mlp_tokens",
    "prefill_tokens",
    "prompt_tokens",
    "new_tokens",
    "training_batch",
    "training_sequence",
    "training_vocab",
)


def _number(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _figure(measured: dict, name: str, key: str, larger_is_faster: bool, digits: int = 1) -> str:
    """One implementation's figure in a part's results, and for all but eager its speed relative to eager's."""
    value = measured.get(name, {}).get(key)
    if value is None:
        return "–"
    text = _number(value, digits)
    eager = measured.get(EAGER, {}).get(key)
    if name != EAGER and eager and value:
        ratio = value / eager if larger_is_faster else eager / value
        text += f" ({ratio:.2f}×)"
    return text


def _peak_text(training: dict, name: str) -> str:
    """Peak training memory above the weights in GiB, and for all but eager its share of eager's."""
    peak = training.get(name, {}).get("peak_bytes_above_weights")
    if peak is None:
        return "–"
    eager = training.get(EAGER, {}).get("peak_bytes_above_weights")
    return f"{peak / GIB:.2f}" + (f" ({peak / eager:.2f}× eager's)" if eager and name != EAGER else "")


def _results(record: dict, part: str) -> dict:
    return (record.get(part) or {}).get("results", {})


def _mlp_cell(record: dict, tokens: int) -> dict:
    for cell in (record.get("mlp") or {}).get("cells", []):
        if cell["tokens"] == tokens:
            return cell.get("results", {})
    return {}


def _status_text(result: dict) -> str | None:
    if result.get("status") in ("skipped", "failed"):
        return f"{result['status']}: {md_cell(result.get('reason', ''))}"
    return None


def _matches(results: dict, size: str, name: str) -> str:
    if name == EAGER:
        return "(reference)"
    differing = [d for d in results["differences"] if d["where"].split()[0] == size and d["implementation"] == name]
    if not differing:
        return "yes"
    return "no: " + "; ".join(f"{d['where'].split(' ', 1)[1]} {d['check']}" for d in differing)


def readme_table_markdown(results: dict) -> str:
    """The model-level table for README: one row per Gemma3 size and implementation."""
    mlp_headers = " / ".join(str(t) for t in README_MLP_TOKENS)
    plan = results["plan"]
    lines = [
        f"Gemma3 text models ({results['dtype']}, random weights) on {results['meta']['device_name']}, "
        f"{results['meta']['date_utc'][:10]}. MLP: µs per call, GPU time (CUDA-graph replay) at {mlp_headers} tokens "
        f"and host time at 1 token; prefill: {plan['prefill_tokens']} tokens, GPU ms (the sum of its kernels) "
        "and wall ms; decode: batch 1, "
        f"{plan['new_tokens']} new tokens, tokens/s of HF generate and of a static-cache loop; training: "
        f"{plan['training_batch']} x {plan['training_sequence']} tokens, forward and backward, GPU ms (the sum of its "
        "kernels), wall ms and peak GiB above the weights. (×): speed relative to eager, >1 faster.",
        "",
        f"| Gemma3 | layers | implementation | MLP GPU µs ({mlp_headers} tok) | MLP host µs | "
        "prefill ms (GPU / wall) | decode tok/s (generate / static) | training ms (GPU / wall) | training peak GiB | "
        "matches eager |",
        "| --- | ---: | --- | --- | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for record in in_size_order(results["models"]):
        size = record["size"]
        if "config" not in record:  # skipped or failed before its model was built
            reason = record.get("skipped") or record.get("failed")
            lines.append(f"| {size} | | | {md_cell(reason)} | | | | | | |")
            continue
        layers = record["config"]["layers_built"]
        layer_text = f"{layers} of {record['config']['layers']}" if layers < record["config"]["layers"] else str(layers)
        prefill, decode, training = (_results(record, part) for part in (PREFILL, DECODE, TRAINING))
        for name, label in results["implementations"].items():
            status = record.get("implementations", {}).get(name, {})
            skipped = _status_text(status)
            if skipped:
                lines.append(f"| {size} | {layer_text} | {md_cell(label)} | {skipped} | | | | | | |")
                continue
            mlp = " / ".join(_figure(_mlp_cell(record, t), name, "device_us", False) for t in README_MLP_TOKENS)
            generate = _figure(decode, name, "generate_tokens_per_s", True)
            loop = _figure(decode, name, "static_loop_tokens_per_s", True)
            host = _figure(_mlp_cell(record, 1), name, "host_us", False)
            prefill_ms = " / ".join(_figure(prefill, name, key, False, 2) for key in ("device_ms", "wall_ms"))
            training_ms = " / ".join(_figure(training, name, key, False) for key in ("device_ms", "wall_ms"))
            lines.append(
                f"| {size} | {layer_text} | {md_cell(label)} | {mlp} | {host} | "
                f"{prefill_ms} | {generate} / {loop} | {training_ms} | {_peak_text(training, name)} | "
                f"{md_cell(_matches(results, size, name))} |"
            )
    notes = [f"{r['size']}: {r['per_layer_note']}" for r in results["models"] if r.get("per_layer_note")]
    training_notes = {(r.get(TRAINING) or {}).get("note") for r in results["models"]} - {None}
    lines += ["", *(f"- {note}" for note in [*notes, *sorted(training_notes)])]
    return "\n".join(lines).rstrip() + "\n"


def merged(runs: list[dict]) -> dict:
    """Several ``models.json`` as one, for one README table: a later run's size replaces an earlier one's.

    The first run gives the header (device, date, plan); the others must be
    of the same device, and measure the same things (the plan's sizes, layers
    and budget may differ), or the table would mix what it states.
    """
    base = {**runs[0], "models": [], "differences": []}
    by_size: dict[str, tuple[dict, list[dict]]] = {}
    for run in runs:
        for key in ("dtype", "implementations"):
            if run[key] != base[key]:
                raise ValueError(f"runs differ in {key}: one table would mix them")
        for key in MEASURED_PLAN_KEYS:
            if run["plan"][key] != base["plan"][key]:
                raise ValueError(f"runs differ in the plan's {key}: one table would mix them")
        if run["meta"]["device_name"] != base["meta"]["device_name"]:
            raise ValueError(f"runs on {run['meta']['device_name']} and {base['meta']['device_name']}: not one table")
        for record in run["models"]:
            if "config" in record or record["size"] not in by_size:  # a measured record wins over a skipped one
                mine = [d for d in run["differences"] if d["where"].split()[0] == record["size"]]
                by_size[record["size"]] = (record, mine)
    for record, differing in by_size.values():
        base["models"].append(record)
        base["differences"].extend(differing)
    return base


def differences_markdown(results: dict) -> str:
    differing = results["differences"]
    lines = [f"## Where results differ from eager's ({len(differing)})", ""]
    tolerances = results["tolerances"]
    lines.append(
        f"Tolerances ({tolerances['metric']}): logits {tolerances['logits']}, gradients {tolerances['gradients']}; "
        f"greedy tokens: {tolerances['greedy_tokens']}."
    )
    lines.append("")
    for d in differing:
        details = ", ".join(
            f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in d.items()
            if k not in ("where", "implementation", "check", "ok")
        )
        lines.append(
            f"- {d['where']} / {d['implementation']}: {d['check']} differ" + (f" ({details})" if details else "")
        )
    if not differing:
        lines.append("Every implementation matched eager's logits, tokens and gradients within the tolerances.")
    return "\n".join(lines) + "\n"


#: Each measured part's section in models.md: (part, title, columns as (key, title, digits)).
PART_TABLES = (
    (
        PREFILL,
        "Prefill",
        (
            ("device_ms", "GPU ms", 2),
            ("wall_ms", "wall ms", 2),
            ("device_ms_per_layer", "GPU ms per layer", 3),
            ("first_call_s", "first call s", 2),
        ),
    ),
    (
        DECODE,
        "Decode",
        (
            ("generate_tokens_per_s", "generate tok/s", 1),
            ("static_loop_tokens_per_s", "static loop tok/s", 1),
            ("static_step_wall_ms", "static step wall ms", 2),
            ("static_step_device_ms", "static step GPU ms", 2),
            ("static_step_device_ms_per_layer", "GPU ms per layer", 3),
        ),
    ),
    (
        TRAINING,
        "Training step",
        (
            ("device_ms", "GPU ms", 1),
            ("wall_ms", "wall ms", 1),
            ("peak_bytes_above_weights", "peak GiB above weights", 2),
        ),
    ),
)


def _part_table(results: dict, record: dict, part: str, columns: tuple[tuple[str, str, int], ...]) -> list[str]:
    """One row per implementation; ``columns``: (key, title, digits); a key's figure in bytes is shown in GiB."""
    measured = _results(record, part)
    if not measured:
        entry = record.get(part) or {}
        return [f"{part}: {md_cell(entry.get('skipped', 'not measured'))}", ""]
    header = "| implementation | " + " | ".join(title for _, title, _ in columns) + " |"
    rows = [header, "| --- |" + " ---: |" * len(columns)]
    for name, r in measured.items():
        status = _status_text(r)
        if status:
            rows.append(
                f"| {md_cell(results['implementations'].get(name, name))} | {status} |" + " |" * (len(columns) - 1)
            )
            continue
        cells = [
            _number(
                r[key] / GIB if key.endswith("_bytes_above_weights") and r.get(key) is not None else r.get(key), digits
            )
            for key, _, digits in columns
        ]
        rows.append(f"| {md_cell(results['implementations'].get(name, name))} | " + " | ".join(cells) + " |")
    return [*rows, ""]


def _mlp_table(results: dict, record: dict) -> list[str]:
    cells = (record.get("mlp") or {}).get("cells", [])
    if not cells:
        return [f"mlp: {md_cell((record.get('mlp') or {}).get('skipped', 'not measured'))}", ""]
    names = list(results["implementations"])
    rows = [
        "| tokens | "
        + " | ".join(f"{md_cell(results['implementations'][n])} GPU / host / wall µs" for n in names)
        + " |",
        "| ---: |" + " --- |" * len(names),
    ]
    for cell in cells:
        if "skipped" in cell:
            rows.append(f"| {cell['tokens']} | skipped: {md_cell(cell['skipped'])} |" + " |" * (len(names) - 1))
            continue
        texts = []
        for name in names:
            r = cell["results"].get(name, {})
            texts.append(_status_text(r) or " / ".join(_number(r.get(k)) for k in ("device_us", "host_us", "wall_us")))
        rows.append(f"| {cell['tokens']} | " + " | ".join(texts) + " |")
    return [*rows, ""]


def full_markdown(results: dict) -> str:
    meta = results["meta"]
    versions = versions_text(meta["versions"])
    lines = [
        f"# fused-geglu on whole Gemma3 models, {meta['device_name']}",
        "",
        f"{meta['date_utc']} · {versions} · torch.compile backend {meta['compile_backend']}",
        "",
    ]
    if meta["device"] == "cpu":
        lines += [
            f"**A CPU run**: a smoke test of the code path on a tiny config. Ours runs {cpu_kernel_path(meta)}. "
            "These times say nothing about performance.",
            "",
        ]
    if not meta["complete"]:
        lines += ["**The run did not complete: these are partial results.**", ""]
    lines += ["## Model-level table", "", readme_table_markdown(results), differences_markdown(results)]
    for record in in_size_order(results["models"]):
        lines += [f"## Gemma3 {record['size']}", ""]
        if "config" not in record:
            lines += [md_cell(record.get("skipped") or record.get("failed")), ""]
            continue
        lines += ["Config: " + ", ".join(f"{key} {value}" for key, value in record["config"].items()) + ".", ""]
        if record.get("per_layer_note"):
            lines += [record["per_layer_note"] + ".", ""]
        mlp = record.get("mlp") or {}
        lines += ["### MLP alone", "", mlp.get("method", ""), "", *_mlp_table(results, record)]
        for part, title, columns in PART_TABLES:
            entry = record.get(part)
            if part == TRAINING and not entry:  # only the sizes the plan trains
                continue
            lines += [f"### {title}", "", (entry or {}).get("method", ""), ""]
            if part == TRAINING:
                lines += [f"Note: {entry.get('note', '')}.", ""]
            lines += _part_table(results, record, part, columns)
    lines += [f"Timer: {meta['timer']}.", ""]
    lines += [f"Note: {note}" for note in results["notes"]]
    lines += [f"## Failures ({len(results['failures'])})", ""]
    lines += [f"- {f['where']} / {f['implementation']}: {md_cell(f['reason'])}" for f in results["failures"]]
    return "\n".join(lines) + "\n"


def write_all(results: dict, out_dir: Path) -> list[Path]:
    """models.md, readme_table.md and the figure; returns the paths written."""
    from . import plots

    written = []
    for name, text in (("models.md", full_markdown(results)), ("readme_table.md", readme_table_markdown(results))):
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return [*written, *plots.write_model_plots(results, out_dir)]
