"""Smoke tests of the benchmark tooling: ``bench``, ``profile`` and ``benchmarks/benchmark.py``.

They run the real code path at tiny sizes: on a CPU (under Triton's
interpreter, as scripts/test.sh sets it) ``--quick`` falls back to the tiny
grid; on a GPU they ask for it (``--grid tiny``). The numbers are not the
point; that every figure is produced, positive and checked is.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import time
from pathlib import Path

import pytest
import torch

from geglu_triton import REPO_ROOT, bench, profile
from geglu_triton.errors import UserError
from geglu_triton.benchmarking import accuracy, environment, grid, implementations, timing, workloads
from geglu_triton.benchmarking.timing import (
    MAX_INPUT_SETS,
    CopyCeiling,
    Deadline,
    MatmulCeiling,
    Timer,
    input_set_count,
)

MEASURED = ("median_us", "host_us_per_rep", "tb_per_s", "pct_copy_bandwidth", "pct_of_floor", "first_call_s")


def _parse(module, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture(scope="module")
def bench_run(build_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    size = ["--grid", "tiny"] if torch.cuda.is_available() else ["--quick"]
    assert bench.run(_parse(bench, [*size, "--out", str(out), "--kernel-dir", str(build_dir)])) == 0
    return out


@pytest.fixture(scope="module")
def results(bench_run) -> dict:
    return json.loads((bench_run / "results.json").read_text())


def test_bench_writes_json_markdown_and_plots(bench_run, results):
    assert set(results) >= {
        "schema_version", "meta", "ceilings", "byte_model", "tolerances", "grid", "workloads", "cells", "host",
        "failures", "notes",
    }  # fmt: skip
    assert results["meta"]["complete"] and results["meta"]["device"] in ("cpu", "cuda")
    assert results["grid"]["name"] == "tiny"
    assert results["ceilings"]["copy"]["tb_per_s"] > 0 and results["ceilings"]["matmul"]["tflop_per_s"] > 0
    markdown = (bench_run / "results.md").read_text()
    assert "| workload |" in markdown and "## Every cell" in markdown
    assert list(bench_run.glob("*.png")), "no plot written"
    assert results["notes"] == [], results["notes"]


def test_bench_covers_every_workload_and_implementation(results):
    workloads = {cell["workload"] for cell in results["cells"]}
    assert workloads == {
        grid.ACTIVATION_FORWARD,
        grid.ACTIVATION_FORWARD_BACKWARD,
        grid.MLP_FORWARD,
        grid.MLP_FORWARD_BACKWARD,
    }
    for cell in results["cells"]:
        expected = (
            implementations.MLP_IMPLEMENTATIONS
            if cell["workload"].startswith("mlp")
            else implementations.ACTIVATION_IMPLEMENTATIONS
        )
        assert set(cell["results"]) == set(expected), cell["title"]
        assert cell["bytes"] > 0 and cell["floor_us"] > 0


def test_bench_figures_are_positive_and_checked(results):
    for cell in results["cells"]:
        for name, measurement in cell["results"].items():
            if name == implementations.LIGER and measurement["status"] != "ok":
                assert measurement["reason"], "Liger's skip or failure must say why"
                continue
            assert measurement["status"] == "ok", (cell["title"], name, measurement["reason"])
            for key in MEASURED:
                assert measurement[key] > 0, (cell["title"], name, key)
            errors, tolerances = (
                measurement["rel_errors"],
                (
                    accuracy.activation_tolerances(grid.DTYPES[cell["dtype"]])
                    if not cell["workload"].startswith("mlp")
                    else dict.fromkeys(measurement["rel_errors"], accuracy.MLP_REL_TOL[grid.DTYPES[cell["dtype"]]])
                ),
            )
            expected_outputs = {"out"} | (
                {"grad_gate", "grad_up"} if cell["workload"] == grid.ACTIVATION_FORWARD_BACKWARD else set()
            )
            if cell["workload"] == grid.MLP_FORWARD_BACKWARD:
                expected_outputs |= {"grad_x", "grad_gate_proj", "grad_up_proj", "grad_down_proj"}
            assert set(errors) == expected_outputs, (cell["title"], name)
            assert measurement["within_tolerance"], (cell["title"], name, errors)
            assert all(errors[k] <= tolerances[k] for k in errors)
        assert set(cell["speedups"]) == set(implementations.OUR_IMPLEMENTATIONS) & set(cell["results"])
        assert all(ratio > 0 for versus in cell["speedups"].values() for ratio in versus.values())


def test_bench_host_side(results):
    overhead = results["host"]["call_overhead"]["results"]
    for name in (implementations.EAGER, implementations.OURS, implementations.OURS_CONCAT):
        assert overhead[name]["status"] == "ok" and overhead[name]["host_loop_us"] > 0
    recompiles = results["host"]["recompilations"]["results"]
    counts = len(results["host"]["recompilations"]["token_counts"])
    assert recompiles["compile_static"]["graphs_compiled"] == counts
    assert recompiles["ours_direct"]["graphs_compiled"] == 0
    cold = results["host"]["cold_start"]
    assert cold["status"] == "ok", cold.get("reason")
    assert cold["ours_first_forward_s"] > 0 and cold["compile_first_forward_s"] > 0


def test_bench_failures_list_only_real_failures(results):
    for failure in results["failures"]:
        assert failure["kind"] == "failed" and failure["implementation"] == implementations.LIGER, failure


def test_a_figure_without_data_this_run_does_not_stay_from_an_earlier_one(tmp_path):
    """The default results directory is the same for every run of a day: a second run's results sat beside the
    first run's figures of what it did not measure."""
    from geglu_triton.benchmarking import plots

    (tmp_path / "stale.png").write_bytes(b"an earlier run's figure")

    def a_figure(plt, results):
        return plt.figure()

    results = {"notes": []}
    written = plots._write_figures(results, tmp_path, {"stale.png": lambda plt, results: None, "made.png": a_figure})
    assert written == [tmp_path / "made.png"] and sorted(p.name for p in tmp_path.iterdir()) == ["made.png"]
    assert results["notes"] == []


def test_profile_reports_every_stage(build_dir, tmp_path, monkeypatch):
    # Without --out, the report goes to ./<date>-<device>/ of the current directory, not the package's tree.
    monkeypatch.chdir(tmp_path)
    assert profile.run(_parse(profile, ["--kernel-dir", str(build_dir)])) == 0
    (out,) = tmp_path.iterdir()
    assert out.name.endswith(f"-{environment.device_slug(environment.benchmark_device())}")
    report = json.loads((out / "profile.json").read_text())
    assert [s["stage"] for s in report["stages"]] == [s.name for s in profile.STAGES]
    for stage in report["stages"]:
        if stage["stage"] == "mlp-liger" and stage["status"] != "ok":
            continue
        assert stage["status"] == "ok", stage
        assert stage["cpu_ops"], stage["stage"]
    by_name = {s["stage"]: s for s in report["stages"]}
    for op in ("aten::gelu", "aten::mul"):
        assert op in by_name["mlp-eager"]["cpu_ops"] and op not in by_name["mlp-ours"]["cpu_ops"]
    if report["device"] == "cuda":
        assert by_name["mlp-ours"]["gpu"]["by_category"].get("ours") == 1, by_name["mlp-ours"]["gpu"]
    assert "aten::addmm" in by_name["linear-eager"]["cpu_ops"]
    if report["device"] == "cpu":
        assert "need a GPU" in report["note"] and all(s.get("gpu") is None for s in report["stages"])
    markdown = (out / "profile.md").read_text()
    assert "| stage |" in markdown and "mlp-ours" in markdown


def test_profile_where_every_stage_fails_is_an_error(build_dir, tmp_path):
    """Too many tokens to allocate: the report is written, and the run fails (it exited 0 with nothing measured)."""
    argv = ["--kernel-dir", str(build_dir), "--out", str(tmp_path), "--tokens", str(10**12)]
    with pytest.raises(UserError, match=f"every stage failed at {10**12} tokens, the first with: "):
        profile.run(_parse(profile, argv))
    assert {stage["status"] for stage in json.loads((tmp_path / "profile.json").read_text())["stages"]} == {"failed"}


def test_profile_training_runs_forward_and_backward(build_dir, tmp_path):
    argv = ["--kernel-dir", str(build_dir), "--out", str(tmp_path), "--training", "--tokens", "3"]
    assert profile.run(_parse(profile, argv)) == 0
    report = json.loads((tmp_path / "profile.json").read_text())
    assert report["pass"] == "forward and backward" and report["tokens"] == 3
    assert [s["stage"] for s in report["stages"]] == [s.name for s in profile.TRAINING_STAGES]
    assert all(not s.bias and s.name.startswith("mlp-") for s in profile.TRAINING_STAGES)
    by_name = {s["stage"]: s for s in report["stages"]}
    assert "aten::gelu_backward" in by_name["mlp-eager"]["cpu_ops"]
    ours = by_name["mlp-ours"]
    assert ours["status"] == "ok", ours
    assert not {"aten::gelu", "aten::gelu_backward", "aten::mul"} & set(ours["cpu_ops"]), ours["cpu_ops"]
    assert "autograd::engine::evaluate_function: GeGLUMLPFunctionBackward" in ours["cpu_ops"]
    # x's gradient: summed inside the projections' GEMMs, where eager adds the two products after them.
    assert "aten::add_" in by_name["mlp-eager"]["cpu_ops"] and "aten::add_" not in ours["cpu_ops"]
    if report["device"] == "cuda":  # the forward kernel and the backward kernel, once each per step
        assert ours["gpu"]["by_category"].get("ours") == 2, ours["gpu"]
    assert "per step" in (tmp_path / "profile.md").read_text()


def test_profile_runs_the_stages_in_order_then_in_reverse(monkeypatch):
    """Each stage is profiled once in each pass and averaged over both; one that fails is not run again."""
    ran = []

    def fake_pass(stage, model, tokens, kernel, device, training, trace):
        ran.append(stage.name)
        if stage.name == "mlp-liger":
            raise ImportError("liger_kernel is not installed")
        if stage.name == "mlp-compiled" and len(ran) > 2:
            raise RuntimeError("compile broke in the second pass")
        trace.cpu_ops["aten::mm"] += 3 * profile.PROFILED_CALLS
        trace.gpu_us_by_pass.append(float(len(ran)))

    monkeypatch.setattr(profile, "_profile_pass", fake_pass)
    stages = profile.TRAINING_STAGES
    records = profile.profile_stages(stages, grid.TINY_MLP, 5, None, torch.device("cpu"), True)
    names = [stage.name for stage in stages]
    assert ran == names + [name for name in reversed(names) if name != "mlp-liger"]
    assert [record["stage"] for record in records] == names
    by_name = {record["stage"]: record for record in records}
    assert by_name["mlp-liger"]["status"] == "skipped"
    assert by_name["mlp-compiled"]["status"] == "failed" and "second pass" in by_name["mlp-compiled"]["reason"]
    assert by_name["mlp-ours"]["status"] == "ok" and by_name["mlp-ours"]["cpu_ops"] == {"aten::mm": 3}


def test_profile_gpu_figures_are_means_over_both_passes_with_each_pass_kept():
    steps = profile.PROFILED_CALLS
    trace = profile._Trace(
        kernels={"geglu_forward_kernel": {"category": "ours", "calls": 2 * steps, "us": (100.0 + 110.0) * steps}},
        gpu_us_by_pass=[100.0, 110.0],
    )
    record = profile._stage_record(profile.TRAINING_STAGES[-1], trace, torch.device("cuda"))
    assert record["gpu"]["us"] == pytest.approx(105.0) and record["gpu"]["us_by_pass"] == [100.0, 110.0]
    assert record["gpu"]["kernels"][0]["calls"] == 1 and record["gpu"]["launches"] == 1


def test_saved_activations_counts_each_mlp_tensor_once(build_dir, tmp_path):
    """benchmarks/saved_activations.py on the tiny Gemma3: the MLP part is exactly what each implementation keeps."""
    import runpy

    script = runpy.run_path(str(REPO_ROOT / "benchmarks" / "saved_activations.py"))
    out = tmp_path / "saved.json"
    script["main"](
        ["--sizes", "tiny", "--layers", "2", "--tokens", "1", "8", "--kernel-dir", str(build_dir), "--out", str(out)]
    )
    record = json.loads(out.read_text())["tiny"]
    from geglu_triton.benchmarking.model_grid import GEMMA3_SIZES

    hidden, intermediate = GEMMA3_SIZES["tiny"].hidden, GEMMA3_SIZES["tiny"].intermediate
    bf16 = 2
    mlp = {name: record[name]["saved_bytes_per_layer_and_token"]["mlp"] for name in ("eager", "ours")}
    assert mlp["eager"] == (hidden + 4 * intermediate) * bf16  # x, gate, gelu(gate), up, h
    assert mlp["ours"] == (hidden + 2 * intermediate) * bf16  # x, gate, up
    for part in ("norms", "attention"):  # the rest of the layer is the model's own, whatever the MLP
        ours, eager = (record[name]["saved_bytes_per_layer_and_token"][part] for name in ("ours", "eager"))
        assert ours == eager > 0, part
    assert record["ours"]["saved_bytes"]["outside the layers"] == record["eager"]["saved_bytes"]["outside the layers"] > 0


def test_training_probe_times_each_phase_of_the_step(build_dir, tmp_path):
    """benchmarks/training_probe.py on the tiny Gemma3: both phases timed, and ours' step is the whole-MLP step."""
    import runpy

    script = runpy.run_path(str(REPO_ROOT / "benchmarks" / "training_probe.py"))
    out = tmp_path / "probe.json"
    script["main"](["--size", "tiny", "--layers", "1", "--tokens", "1", "8", "--kernel-dir", str(build_dir),
                    "--out", str(out)])
    probe = json.loads(out.read_text())
    assert all(us > 0 for us in probe["python_backward_aten_call_us"].values())
    results = probe["results"]
    assert {"eager", "ours"} <= set(results)
    for record in results.values():
        for phase in ("forward", "backward"):
            assert record[f"{phase}_wall_ms"] > 0 and record[f"{phase}_gpu_ms"] > 0
            assert record["host_calls"][phase]["top_ops_self_us"]
            assert {"gpu_idle_us_by_host_op", "gpu_copies"} <= set(record["host_calls"][phase])  # empty on a CPU
    assert "GeGLUMLPFunction" in results["ours"]["host_calls"]["forward"]["top_ops_self_us"]
    assert "GeGLUMLPFunction" not in results["eager"]["host_calls"]["forward"]["top_ops_self_us"]


def test_training_probe_charges_gpu_idle_time_to_the_host_op_running_then():
    import runpy

    script = runpy.run_path(str(REPO_ROOT / "benchmarks" / "training_probe.py"))
    kernels = [(0, 10), (100, 110), (112, 120), (300, 310)]  # idle 10-100 and 120-300; 110-112 is a launch gap
    gaps = script["idle_gaps"](kernels)
    assert gaps == [(10, 100), (120, 300)]
    node = script["NODE_PREFIX"] + "GeGLUMLPFunctionBackward"
    host_ops = [(node, 0, 150), ("aten::mm", 40, 70), ("aten::empty", 180, 250), ("cudaLaunchKernel", 260, 262)]
    by_op, by_node = script["idle_time_by_host_op"](gaps, host_ops)
    assert by_op == {"aten::mm": 90, "aten::empty": 180}
    assert by_node == {"GeGLUMLPFunctionBackward": 90, "(no autograd node)": 180}


def test_training_probe_counts_each_phase_s_calls_and_the_gpu_s_copies():
    """host_calls_by_phase on a synthetic trace: launches, waits and copies land in the phase they start in."""
    import runpy
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    script = runpy.run_path(str(REPO_ROOT / "benchmarks" / "training_probe.py"))

    def event(name, start, end, device=DeviceType.CPU):
        return SimpleNamespace(name=name, device_type=device, time_range=SimpleNamespace(start=start, end=end),
                               self_cpu_time_total=end - start)

    forward_end_us = 1000
    events = [
        event("forward", 0, forward_end_us),  # the phases' own ranges are not counted
        event("cudaLaunchKernel", 10, 12),
        event("gemm", 20, 30, DeviceType.CUDA),
        event("cudaMemcpyAsync", 40, 45),
        event("Memcpy DtoH (Device -> Pinned)", 50, 52, DeviceType.CUDA),
        event("cudaStreamSynchronize", 60, 200),
        event("backward", 1000, 2000),
        event("cudaLaunchKernel", 1010, 1012),
        event("cudaLaunchKernel", 1300, 1302),
        event("Memcpy DtoD (Device -> Device)", 1020, 1030, DeviceType.CUDA),
        event("Memcpy DtoD (Device -> Device)", 1040, 1045, DeviceType.CUDA),
        event("gemm", 1310, 1320, DeviceType.CUDA),  # after 265 us of idle GPU
        event("cudaMalloc", 1400, 1410),
    ]
    calls = script["host_calls_by_phase"](events, forward_end_us)
    forward, backward = calls["forward"], calls["backward"]
    assert (forward["launches"], forward["waits"], forward["cudaStreamSynchronize"]) == (1, 1, 1)
    assert "driver allocations" not in forward  # cudaMemcpyAsync is neither a wait nor an allocation
    assert forward["gpu_copies"] == {"Memcpy DtoH (Device -> Pinned)": 1}
    assert (backward["launches"], backward["driver allocations"], backward["cudaMalloc"]) == (2, 1, 1)
    assert backward["gpu_copies"] == {"Memcpy DtoD (Device -> Device)": 2}
    assert backward[f"gpu_gaps_over_{script['GAP_US']}_us"] == 1 and backward["gpu_gap_ms"] == 0.265
    assert forward["top_ops_self_us"]["cudaStreamSynchronize"] == 140


def test_kernels_benchmark_script_runs_and_verifies(build_dir):
    """benchmarks/benchmark.py through the `kernels benchmark` runner, against our build."""
    runner = pytest.importorskip("kernels.cli.benchmark")
    script = REPO_ROOT / "benchmarks" / "benchmark.py"
    timings, _ = runner.run_benchmark_script(
        script, iterations=2, warmup=1, cwd=REPO_ROOT, repo_id=str(build_dir), is_local=True, revision="local"
    )
    forms, sizes = 2, 3
    assert len(timings) == 3 * forms * sizes
    assert {name.split(".")[0] for name in timings} == {"GegluBenchmark", "GegluConcatBenchmark", "GeluAndMulBenchmark"}
    assert all(t.verified for t in timings.values())


def test_a_temporary_build_lasts_until_closed_not_until_its_loaded_kernel_is_collected():
    """The benchmark scripts keep only ``load_kernel(None).module``; the build it reads must stay behind it."""
    loaded = environment.load_kernel(None)
    module, build_dir = loaded.module, loaded.build_dir
    del loaded
    gc.collect()
    assert build_dir.is_dir()
    gate, up = torch.randn(4, 128), torch.randn(4, 128)
    # The tanh form runs nested Triton functions, whose source the interpreter reads from the build.
    expected = (accuracy.gelu64(gate.double(), "tanh") * up.double()).float()
    torch.testing.assert_close(module.geglu(gate, up, approximate="tanh"), expected)
    environment.LoadedKernel(module, build_dir, temporary=True).close()
    assert not build_dir.exists()


def test_gelu64_derivative_matches_autograd():
    x = torch.linspace(-8, 8, 1001, dtype=torch.float64, requires_grad=True)
    for approximate in grid.APPROXIMATIONS:
        (expected,) = torch.autograd.grad(accuracy.gelu64(x, approximate).sum(), x)
        assert torch.allclose(accuracy.gelu64_derivative(x.detach(), approximate), expected, rtol=1e-12, atol=1e-12)


def test_error_accumulator_flags_nan():
    assert math.isnan(accuracy.rel_error(torch.tensor([1.0, math.nan]), torch.tensor([1.0, 1.0])))
    assert not accuracy.within_tolerance({"out": math.nan}, {"out": 1.0})


def test_input_sets_rotate_past_the_cache():
    device = torch.device("cpu")
    assert input_set_count(device, 1) == MAX_INPUT_SETS
    assert input_set_count(device, 2**40) == 1


def test_compile_subgrid():
    full = grid.FULL
    assert full.compiles(torch.bfloat16, 4096, 9216)
    assert full.compiles(torch.float32, 1024, 16384) and not full.compiles(torch.float32, 4096, 9216)


class _GradientsIntoInputs(torch.autograd.Function):
    """GeGLU whose backward stores the gradients into its inputs' memory, as Liger's does."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return torch.nn.functional.gelu(gate, approximate="tanh") * up

    @staticmethod
    def backward(ctx, grad_out):
        gate, up = ctx.saved_tensors
        grad_up = grad_out * torch.nn.functional.gelu(gate, approximate="tanh")
        grad_gate = torch.ops.aten.gelu_backward(grad_out * up, gate, approximate="tanh")
        gate.data.copy_(grad_gate)
        up.data.copy_(grad_up)
        return gate, up


def _cpu_context(kernel) -> workloads.Context:
    device = torch.device("cpu")
    return workloads.Context(
        device=device,
        timer=Timer(device, warmup_ms=1, rep_ms=1),
        kernel=kernel,
        grid=grid.TINY,
        copy=CopyCeiling(bytes_copied=2**20, seconds=1e-3),
        matmul=MatmulCeiling(n=64, dtype="fp32", seconds=1e-3),
        memory_budget_bytes=2**30,
        deadline=Deadline(600),
    )


def test_inputs_a_backward_overwrites_are_checked_as_given(kernel, monkeypatch):
    """Liger's in-place backward: the check compares with the inputs the call was given, not what it left."""
    monkeypatch.setattr(implementations, "_liger_gelu_mul", lambda: _GradientsIntoInputs.apply)
    cell = workloads.ActivationBench(_cpu_context(kernel), 5, 33, torch.float32, "tanh", backward=True)
    cell.implementations = (implementations.LIGER,)
    liger = workloads.measure_cell(cell)["results"][implementations.LIGER]
    assert liger["status"] == "ok", liger["reason"]
    assert liger["within_tolerance"], liger["rel_errors"]


def test_a_wrong_implementation_is_flagged(kernel, monkeypatch):
    """The accuracy check can fail: a GeGLU with gate and up swapped is measured, and out of tolerance."""
    def swapped(gate, up):
        return torch.nn.functional.gelu(up, approximate="tanh") * gate

    monkeypatch.setattr(implementations, "_liger_gelu_mul", lambda: swapped)
    cell = workloads.ActivationBench(_cpu_context(kernel), 5, 33, torch.float32, "tanh", backward=False)
    cell.implementations = (implementations.LIGER, implementations.OURS)
    results = workloads.measure_cell(cell)["results"]
    assert results[implementations.OURS]["within_tolerance"]
    wrong = results[implementations.LIGER]
    assert wrong["status"] == "ok" and not wrong["within_tolerance"] and wrong["rel_errors"]["out"] > 0.1


def test_implementations_are_timed_in_alternating_rounds():
    timer = Timer(torch.device("cpu"), warmup_ms=0.01, rep_ms=0.01)
    order = []
    timings = timer.timings_interleaved(
        {name: ((lambda name=name: order.append(name)), None) for name in "abc"}, rounds=3
    )
    assert set(timings) == {"a", "b", "c"}
    assert all(t.median_s >= 0 and t.host_s_per_rep > 0 for t in timings.values())
    # Warm-up of a, b and c, then three rounds in which each takes its turn, each round starting one
    # implementation later, so that none always goes first or last.
    turns = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    assert turns == list("abc") + list("abc") + list("bca") + list("cab")


def test_each_batch_waits_behind_a_spin_covering_its_host_time(monkeypatch):
    """On a GPU the spin queued before a batch lasts HOST_LEAD_MARGIN x the batch's host time."""
    spins = []
    monkeypatch.setattr(torch.cuda, "_sleep", spins.append)
    timer = Timer(torch.device("cpu"), warmup_ms=0.01, rep_ms=0.01)
    timer._let_host_get_ahead(reps=10, host_s_per_rep=50e-6)
    assert spins == []  # a CPU timer has no GPU to keep busy
    timer._spin_cycles_per_s = 2e9
    timer._let_host_get_ahead(reps=10, host_s_per_rep=50e-6)
    assert spins == [int(timing.HOST_LEAD_MARGIN * 10 * 50e-6 * 2e9)]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="kernel times need a GPU")
def test_kernel_time_leaves_out_the_waits_for_the_host():
    """A call that reads a value on the host and then sleeps there: its kernels' time, not the host's pace."""
    timer = Timer(torch.device("cuda"), warmup_ms=0.01, rep_ms=0.01)
    x = torch.randn(1 << 20, device="cuda")

    def host_paced() -> None:
        for _ in range(10):
            float(x.sum())  # waits for the GPU, as transformers' mask check does
            time.sleep(2e-3)  # the host's own work, with the GPU idle
            x.mul_(1.0)

    kernel_s, wall_s = timer.kernel_s(host_paced), timer.wall_s(host_paced)
    assert wall_s > 20e-3
    assert 0 < kernel_s < 2e-3  # twenty small kernels, no sleeping


def test_kernel_time_on_a_cpu_is_the_wall_time():
    timer = Timer(torch.device("cpu"), warmup_ms=0.01, rep_ms=0.01)
    assert timer.kernel_s(lambda: time.sleep(2e-3)) >= 2e-3


def test_timing_pauses_the_garbage_collector():
    timer = Timer(torch.device("cpu"), warmup_ms=0.01, rep_ms=0.01)
    seen = []
    assert gc.isenabled()
    timer.median_s(lambda: seen.append(gc.isenabled()))
    assert seen and not any(seen)
    assert gc.isenabled()


class _FailsAfterTwoCalls(torch.autograd.Function):
    """GeGLU that works for the first call and the checked call, then fails: a failure while timed."""

    calls = 0

    @staticmethod
    def forward(ctx, gate, up):
        _FailsAfterTwoCalls.calls += 1
        if _FailsAfterTwoCalls.calls > 2:
            raise RuntimeError("launch failed")
        return torch.nn.functional.gelu(gate, approximate="tanh") * up


def test_a_failure_while_timed_is_charged_to_its_implementation(kernel, monkeypatch):
    monkeypatch.setattr(implementations, "_liger_gelu_mul", lambda: _FailsAfterTwoCalls.apply)
    cell = workloads.ActivationBench(_cpu_context(kernel), 5, 33, torch.float32, "tanh", backward=False)
    cell.implementations = (implementations.EAGER, implementations.LIGER)
    results = workloads.measure_cell(cell)["results"]
    assert results[implementations.EAGER]["status"] == "ok"
    assert results[implementations.EAGER]["median_us"] > 0
    assert results[implementations.LIGER]["status"] == "failed"
    assert "while timed" in results[implementations.LIGER]["reason"]
    assert "launch failed" in results[implementations.LIGER]["reason"]


def test_check_targets_reports_every_target(results, tmp_path):
    """benchmarks/check_targets.py on the smoke run: every target gets a section with its verdict count."""
    import runpy

    script = runpy.run_path(str(REPO_ROOT / "benchmarks" / "check_targets.py"))
    results_path = tmp_path / "results.json"
    results_path.write_text(json.dumps(results))
    script["main"]([str(results_path), "--out", str(tmp_path / "targets.md")])
    text = (tmp_path / "targets.md").read_text()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert len(sections) == len(script["TARGETS"])
    assert all(" cells hold" in line for line in sections)
    # The tiny grid's activation cells are all under 64 MiB; it still judges every one against the others.
    forward_rows = script["forward_best_everywhere"](results)
    assert len(forward_rows) == sum(c["workload"] == "activation-forward" for c in results["cells"])
    # A cell whose host time per repetition exceeds its GPU time is called host-bound; one below is not.
    cell = next(c for c in results["cells"] if c["workload"] == "activation-forward")
    ours = cell["results"]["ours"]
    ours["host_us_per_rep"] = 2 * ours["median_us"]
    assert "host-bound" in script["_host_bound_note"](cell)
    ours["host_us_per_rep"] = 0.5 * ours["median_us"]
    assert script["_host_bound_note"](cell) == ""
