"""Every kernel, compiled for GPUs we do not have with the configurations the tables pick for them, fits them.

tests/offline_compile.py compiles, in a child process without
TRITON_INTERPRET, each kernel for sm_80, sm_86, sm_89, sm_90, sm_100, sm_120,
gfx90a and gfx942 with every configuration ``device_tables`` can pick for
that target, and reports shared memory and registers. Here each result is
held to the target's published limits, and the set compiled to the tables'
own configurations. The default run compiles each configuration once per
target (dtypes, GELU forms and offset widths in turn; see offline_compile.py);
FUSED_GEGLU_COMPILE_EVERY_COMBINATION=1 compiles the whole product.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import offline_compile
from offline_compile import FULL_ELEMENTWISE_TARGET, TARGETS

EVERY_COMBINATION = os.environ.get("FUSED_GEGLU_COMPILE_EVERY_COMBINATION") == "1"
#: NVIDIA allocates registers per thread in units of 8 (per warp, 256).
REGISTER_ALLOCATION_UNIT = 8


@pytest.fixture(scope="module")
def compiled(build_dir) -> dict:
    """{target name: [one result per compilation]} or {target name: "why it was skipped"}."""
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, without its warning
    command = [sys.executable, offline_compile.__file__, str(build_dir)]
    run = subprocess.run(
        command + (["--every-combination"] if EVERY_COMBINATION else []),
        env=env,
        capture_output=True,
        text=True,
        timeout=None if EVERY_COMBINATION else 900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results: dict = {target.name: [] for target in TARGETS}
    for line in run.stdout.splitlines():
        result = json.loads(line)
        if "skipped" in result:
            results[result["target"]] = result["skipped"]
        else:
            results[result["target"]].append(result)
    return results


def _results_for(compiled, target):
    results = compiled[target.name]
    if isinstance(results, str):
        pytest.skip(results)
    return results


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_every_table_configuration_is_compiled(kernel, compiled, target):
    """The configurations compiled are the tables' own, all of them: nothing the tables can pick goes unchecked."""
    tables = kernel.device_tables
    results = _results_for(compiled, target)
    traits = offline_compile.traits(kernel, target)
    for gated, table in ((True, tables.gemm_table(traits)), (False, tables.down_proj_table(traits))):
        assert table is not None, f"no {'fused' if gated else 'down projection'} GEMM table for {target.name}"
        gemm = {r["config"] for r in results if r["kernel"] == "mlp_gemm_kernel" and r["gated"] == gated}
        assert gemm == {repr(token_class.config) for token_class in table}
    if EVERY_COMBINATION or FULL_ELEMENTWISE_TARGET[target.warp_size] == target.name:
        backward = {r["config"] for r in results if r["kernel"] == "geglu_backward_kernel"}
        expected = set()
        for element_size in (2, 4):
            expected |= {repr(c) for c in tables.elementwise_configs(element_size, target.warp_size)}
        assert backward == expected
    for kernel_name in ("geglu_forward_kernel", "geglu_backward_kernel"):
        contiguous = {r["config"] for r in results if r["kernel"] == kernel_name}
        for element_size in (2, 4):
            assert repr(tables.elementwise_config(1, 2**30, element_size, target.warp_size)) in contiguous


def limit_violations(result: dict, target) -> list[str]:
    """How one compilation exceeds the target's limits (none: it fits)."""
    where = f"{result['kernel']} {result['config']} {result['dtype']} {result['gelu']} on {target.name}"
    violations = []
    if result["shared_bytes"] > target.shared_memory:
        violations.append(f"{where}: {result['shared_bytes']} B of shared memory, {target.shared_memory} available")
    if result["registers"] > target.registers_per_thread:
        violations.append(f"{where}: {result['registers']} registers per thread, {target.registers_per_thread} allowed")
    if target.backend == "cuda":
        per_thread = -(-result["registers"] // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
        block = per_thread * result["num_warps"] * target.warp_size
        if block > target.register_file:
            violations.append(f"{where}: {block} registers per block, {target.register_file} per SM")
    # Every configuration a table holds runs on GPUs: none may spill registers to local memory.
    if result["stack_bytes"]:
        violations.append(f"{where}: spills {result['stack_bytes']} bytes")
    return violations


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_compiled_kernels_fit_the_target(kernel, compiled, target):
    """Shared memory within the opt-in maximum; registers within a thread's and the register file's limits."""
    results = _results_for(compiled, target)
    assert [v for result in results for v in limit_violations(result, target)] == []


def test_the_limits_catch_what_broke_decode_on_99_kb_gpus():
    """The H200's decode configuration as Triton compiles it for sm_86 (issue 12), and a block over the register file."""
    sm_86 = next(t for t in TARGETS if t.name == "sm_86")
    h200_decode = {
        "kernel": "mlp_gemm_kernel", "config": "16x64x128, 5 stages", "dtype": "bf16", "gelu": "tanh",
        "most_tokens": 16, "num_warps": 4, "shared_bytes": 147_456, "registers": 103, "stack_bytes": 0,
    }
    assert len(limit_violations(h200_decode, sm_86)) == 1
    too_many_registers = {**h200_decode, "shared_bytes": 49_152, "registers": 255, "num_warps": 16}
    assert len(limit_violations(too_many_registers, sm_86)) == 1
    spilling_decode = {**h200_decode, "shared_bytes": 73_728, "stack_bytes": 136}
    assert len(limit_violations(spilling_decode, sm_86)) == 1
    assert limit_violations({**spilling_decode, "stack_bytes": 0}, sm_86) == []
