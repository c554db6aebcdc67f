"""Smoke test of the model-level benchmark, ``python -m geglu_triton bench --models``.

It runs the real code path on the tiny config (on a CPU under Triton's
interpreter, as scripts/test.sh sets it; on a GPU with ``--models tiny``),
with one more implementation beside eager, ours, Liger and torch.compile: a
deliberately wrong MLP (gate and up swapped), which the comparison with
eager must report as differing everywhere it looks.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from geglu_triton import bench, bench_models
from geglu_triton.benchmarking import model_grid, model_implementations, model_report
from geglu_triton.benchmarking.implementations import COMPILE, EAGER, LIGER, OURS
from geglu_triton.benchmarking.timing import round_order

pytest.importorskip("transformers")

BROKEN = "broken"
PARTS = ("mlp", "prefill", "decode", "training")


def _swapped_gate_and_up(forwards: model_implementations.ModelForwards) -> list:
    """A plausible kernel bug: gelu applied to up instead of gate."""

    def bound(module):
        return lambda x: module.down_proj(F.gelu(module.up_proj(x), approximate="tanh") * module.gate_proj(x))

    return [bound(module) for module in forwards.mlps]


@pytest.fixture(scope="module")
def run_dir(build_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models")
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--models", "tiny", "--out", str(out), "--kernel-dir", str(build_dir)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(model_implementations.BUILDERS, BROKEN, _swapped_gate_and_up)
        patch.setattr(bench_models, "MODEL_IMPLEMENTATIONS", (*model_implementations.MODEL_IMPLEMENTATIONS, BROKEN))
        assert bench.run(args) == 0
    return out


@pytest.fixture(scope="module")
def results(run_dir) -> dict:
    return json.loads((run_dir / "models.json").read_text())


def _entries(record: dict, part: str) -> list[dict]:
    entry = record[part]
    return entry["cells"] if part == "mlp" else [entry]


def test_writes_json_markdown_readme_table_and_plot(run_dir, results):
    assert set(results) >= {
        "schema_version", "meta", "dtype", "plan", "parts", "implementations", "tolerances", "models",
        "differences", "failures", "notes",
    }  # fmt: skip
    meta = results["meta"]
    assert meta["complete"] and meta["device_name"] and meta["date_utc"]
    assert meta["versions"]["torch"] and meta["versions"]["transformers"]
    assert results["notes"] == [], results["notes"]
    readme = (run_dir / "readme_table.md").read_text()
    for label in results["implementations"].values():
        assert f"| {label} |" in readme, label
    assert "## Where results differ from eager's" in (run_dir / "models.md").read_text()
    assert (run_dir / "models.png").stat().st_size > 0


def test_every_part_measured_for_every_implementation(results):
    [record] = results["models"]
    assert record["size"] == "tiny" and set(record) >= set(PARTS)
    for part in PARTS:
        for entry in _entries(record, part):
            assert set(entry["results"]) == {EAGER, OURS, LIGER, COMPILE, BROKEN}, (part, entry)
            for name, result in entry["results"].items():
                if name == LIGER and result["status"] != "ok":
                    assert result["reason"], "Liger's skip must say why"
                    continue
                assert result["status"] == "ok", (part, name, result)
                figures = {
                    "mlp": ("device_us", "host_us", "wall_us"),
                    "prefill": ("device_ms", "wall_ms"),
                    "decode": ("generate_tokens_per_s", "static_loop_tokens_per_s", "static_step_device_ms"),
                    "training": ("device_ms", "wall_ms"),
                }[part]
                assert all(result[key] > 0 for key in figures), (part, name, result)
    assert [cell["tokens"] for cell in record["mlp"]["cells"]] == list(results["plan"]["mlp_tokens"])


def test_whole_model_figures_keep_each_rounds_sample(results):
    """The whole-model parts report medians, and keep every round's figure beside them (the spread)."""
    [record] = results["models"]
    plan = results["plan"]
    # (figures, the plan's count of their rounds): generate and the static loop take the MLP cells' rounds.
    samples = {
        "prefill": ({"device_ms": "device_ms_rounds", "wall_ms": "wall_ms_rounds"}, plan["model_rounds"]),
        "training": ({"device_ms": "device_ms_rounds", "wall_ms": "wall_ms_rounds"}, plan["model_rounds"]),
        "decode": ({"generate_wall_ms": "generate_wall_ms_rounds"}, plan["rounds"]),
    }
    for part, (pairs, rounds) in samples.items():
        for name, result in record[part]["results"].items():
            if result["status"] != "ok":
                continue
            for median_key, rounds_key in pairs.items():
                assert len(result[rounds_key]) == rounds, (part, name, rounds_key)
                assert statistics.median(result[rounds_key]) == pytest.approx(result[median_key]), (part, name)
    loop = record["decode"]["results"][EAGER]
    per_step = [ms / results["plan"]["new_tokens"] for ms in loop["static_loop_wall_ms_rounds"]]
    assert statistics.median(per_step) == pytest.approx(loop["static_step_wall_ms"])


def test_ours_and_compile_match_eager(results):
    [record] = results["models"]
    assert record["implementations"][OURS]["status"] == "ok"
    numeric = {"output", "logits", "gradients"}
    assert [d for d in results["differences"] if d["implementation"] != BROKEN and d["check"] in numeric] == []
    assert record["prefill"]["results"][OURS]["logits_vs_eager"]["rel_error"] < results["tolerances"]["logits"]
    assert results["failures"] == []
    if results["meta"]["device"] == "cpu":
        # Here every implementation rounds as eager does, so greedy tokens agree exactly. On a GPU a
        # near-tie may flip a token (other kernels, other rounding): the benchmark reports it, as it should.
        assert [d for d in results["differences"] if d["implementation"] != BROKEN] == []
        ours = record["decode"]["results"][OURS]["tokens_vs_eager"]
        assert ours == {"identical": True, "first_difference": None, "differing_tokens": 0}


def test_a_wrong_mlp_is_reported_as_differing(results):
    checks = {d["check"] for d in results["differences"] if d["implementation"] == BROKEN}
    assert {"output", "logits", "gradients"} <= checks, results["differences"]
    [record] = results["models"]
    logits = record["prefill"]["results"][BROKEN]["logits_vs_eager"]
    assert not logits["within_tolerance"] and logits["rel_error"] > logits["tolerance"]
    assert "tokens_vs_eager" in record["decode"]["results"][BROKEN]


def test_runs_merge_into_one_table(results):
    """A later run's measured size replaces the earlier run's, in the earlier run's order."""
    again = json.loads(json.dumps(results))
    for record in again["models"]:
        record["run"] = "later"
    merged = model_report.merged([results, again])["models"]
    assert [r["size"] for r in merged] == [r["size"] for r in results["models"]]
    assert any("config" in r for r in merged)
    assert all(r.get("run") == "later" for r in merged if "config" in r)
    again["plan"]["new_tokens"] += 1
    with pytest.raises(ValueError, match="new_tokens"):
        model_report.merged([results, again])


def test_the_gpu_plan_gives_every_implementation_every_place_in_the_order():
    """Rounds that are not a multiple of the implementations' count leave some of them never first (or last)
    in a round, where a GPU's clocks and a host's caches differ most (timing.round_order)."""
    implementations = len(model_implementations.MODEL_IMPLEMENTATIONS)
    for rounds in (model_grid.GPU_PLAN.rounds, model_grid.GPU_PLAN.model_rounds):
        places = Counter(
            (name, place)
            for index in range(rounds)
            for place, name in enumerate(round_order(list(model_implementations.MODEL_IMPLEMENTATIONS), index))
        )
        assert len(places) == implementations**2 and len(set(places.values())) == 1, rounds


def test_sizes_are_gemma3s_text_decoders():
    """The table's dimensions give the published parameter counts of Gemma3's text decoders (in billions)."""
    published = {"1b": 1.00, "4b": 3.88, "12b": 11.77, "27b": 27.01}
    for name, billions in published.items():
        size = model_grid.GEMMA3_SIZES[name]
        model = model_grid.build_model(size, size.layers, torch.device("meta"))
        assert round(sum(p.numel() for p in model.parameters()) / 1e9, 2) == billions, name
