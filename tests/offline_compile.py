"""Compile the kernels for GPUs we do not have, as the launch tables configure them for each, and report resources.

Run by tests/test_offline_compile.py in a child process without
TRITON_INTERPRET (the interpreter replaces ``@triton.jit`` kernels, and
only real JIT functions compile):

    python tests/offline_compile.py BUILD_DIR [--every-combination]

For each target below, it describes the device as ``device_tables`` would
(its published shared memory, SM count and warp size), asks the tables
which configurations they can pick for it, compiles each kernel with each
through ``triton.compile(ASTSource(...), target=GPUTarget(...))``, and
prints one JSON line per compilation: the shared memory Triton reports
(``metadata.shared``), and the registers from the binary (``cuobjdump
-res-usage`` on CUDA, the code object's metadata on AMD).

Arguments are specialized as Triton's dispatch specializes typical ones
(16-byte aligned pointers, sizes and strides divisible by 16, ROCm tensors
within 2 GiB): the heaviest case, where every load is vectorized and the
GEMM's loads pipelined through shared memory.

By default every configuration a table can pick is compiled for its target
once, the dtype, GELU form and offset width of each compilation taken in
turn so that all of them occur. Every elementwise configuration is compiled
(backward kernel, the heavier) on one target per warp size (sm_80 for 32
lanes, gfx942 for 64), and both kernels with the configuration of
contiguous tensors on every target. ``--every-combination`` compiles the
whole product (several thousand compilations: about an hour on two cores).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import multiprocessing
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend


@dataclass(frozen=True)
class Target:
    """A compile target and the published limits its kernels must fit (/work/shared/REFERENCE.md)."""

    name: str
    backend: str
    arch: object
    warp_size: int
    shared_memory: int  # bytes per block, opt-in maximum (LDS on AMD)
    registers_per_thread: int  # NVIDIA: 255; AMD: VGPRs + AGPRs one lane of a wave may hold
    register_file: int  # NVIDIA: 32-bit registers per SM (one block must fit); AMD: unused (per-wave budget)


TARGETS = (
    Target("sm_80", "cuda", 80, 32, 166_912, 255, 65_536),
    Target("sm_86", "cuda", 86, 32, 101_376, 255, 65_536),
    Target("sm_89", "cuda", 89, 32, 101_376, 255, 65_536),
    Target("sm_90", "cuda", 90, 32, 232_448, 255, 65_536),
    Target("sm_100", "cuda", 100, 32, 232_448, 255, 65_536),
    Target("sm_120", "cuda", 120, 32, 101_376, 255, 65_536),
    Target("gfx90a", "hip", "gfx90a", 64, 65_536, 512, 0),
    Target("gfx942", "hip", "gfx942", 64, 65_536, 512, 0),
)
#: Where every elementwise configuration of a warp size is compiled by default.
FULL_ELEMENTWISE_TARGET = {32: "sm_80", 64: "gfx942"}

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
GELU_FORMS = ("tanh", "none")
#: Sizes and strides of the typical problem: divisible by 16, within int32.
TYPICAL_INT = 4096


def traits(kernel, target: Target):
    """The target as device_tables.describe_device would describe it."""
    return kernel.device_tables.DeviceTraits(target.shared_memory, target.warp_size)


def gemm_jobs(kernel, target: Target, every: bool):
    """The GEMM kernel in both its forms: gated with the fused table's configurations, plain with the down projection's."""
    tables = kernel.device_tables
    device = traits(kernel, target)
    combos = list(itertools.product(("bf16", "fp16"), GELU_FORMS, (False, True)))
    position = [t.name for t in TARGETS].index(target.name)
    classes = [(True, entry) for entry in tables.gemm_table(device) or ()]
    classes += [(False, entry) for entry in tables.down_proj_table(device) or ()]
    for j, (gated, token_class) in enumerate(classes):
        config = token_class.config
        chosen = combos if every else [combos[(position + 3 * j) % len(combos)]]
        for dtype, gelu, int64 in chosen:
            constexprs = dict(
                GATED=gated,
                APPROXIMATE_TANH=gelu == "tanh",
                HAS_BIAS=True,
                HAS_UP_BIAS=gated,
                BLOCK_M=config.block_m,
                BLOCK_N=config.block_n,
                BLOCK_K=config.block_k,
                GROUP_M=config.group_m,
                INT64_OFFSETS=int64,
                INTERPRETED=False,
            )
            options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
            yield ("mlp_gemm_kernel", target.name, dtype, constexprs, options, repr(config), token_class.most_tokens)


#: Per (kernel, element size): whose turn it is among the (dtype, GELU form, offsets) combinations.
_turns = collections.defaultdict(itertools.count)


def elementwise_jobs(kernel, target: Target, every: bool):
    tables = kernel.device_tables
    full = every or FULL_ELEMENTWISE_TARGET[target.warp_size] == target.name
    for element_size, dtypes in ((2, ("bf16", "fp16")), (4, ("fp32",))):
        # What contiguous tensors (one row of numel elements) of any size above a tile run with.
        one_row = tables.elementwise_config(1, 2**30, element_size, target.warp_size)
        for config in sorted(tables.elementwise_configs(element_size, target.warp_size), key=repr):
            names = [
                name
                for name in ("geglu_forward_kernel", "geglu_backward_kernel")
                if every or config == one_row or (full and name == "geglu_backward_kernel")
            ]
            combos = list(itertools.product(dtypes, GELU_FORMS, (False, True)))
            for name in names:
                for dtype, gelu, int64 in combos if every else [combos[next(_turns[name, element_size]) % len(combos)]]:
                    constexprs = dict(
                        APPROXIMATE_TANH=gelu == "tanh",
                        BLOCK_M=config.block_m,
                        BLOCK_N=config.block_n,
                        INT64_OFFSETS=int64,
                        INTERPRETED=False,
                    )
                    yield (name, target.name, dtype, constexprs, {"num_warps": config.num_warps}, repr(config), None)


_kernel = None
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def _registers(compiled, backend: str) -> dict:
    if backend == "cuda":
        with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
            cubin.write(compiled.asm["cubin"])
            cubin.flush()
            usage = subprocess.run([str(CUOBJDUMP), "-res-usage", cubin.name], capture_output=True, text=True).stdout
        fields = dict(re.findall(r"(REG|STACK):(\d+)", usage))
        return {"registers": int(fields["REG"]), "stack_bytes": int(fields["STACK"])}
    amdgcn = compiled.asm["amdgcn"]

    def field(name: str) -> int:
        return int(re.search(rf"\.{name}:\s+(\d+)", amdgcn).group(1))

    # LDS is allocated at launch (metadata.shared), not in the code object's group segment.
    return {"registers": field("vgpr_count") + field("agpr_count"), "stack_bytes": 4 * field("vgpr_spill_count")}


def compile_job(job) -> dict:
    name, target_name, dtype, constexprs, options, config, most_tokens = job
    target = next(t for t in TARGETS if t.name == target_name)
    fn = getattr(_kernel.triton_gemm_kernels if name == "mlp_gemm_kernel" else _kernel.triton_kernels, name)
    gpu_target = GPUTarget(target.backend, target.arch, target.warp_size)
    backend = make_backend(gpu_target)
    tensor = torch.empty(64, dtype=DTYPES[dtype])
    signature, attrs = {}, {}
    for index, param in enumerate(fn.params):
        if param.is_constexpr:
            signature[param.name] = "constexpr"
            continue
        arg = tensor if param.name.endswith("_ptr") else TYPICAL_INT
        kind, attr = native_specialize_impl(
            backend, arg, param.is_const, not param.do_not_specialize, not param.do_not_specialize_on_alignment
        )
        signature[param.name] = kind
        if isinstance(attr, str):
            attrs[(index,)] = backend.parse_attr(attr)
    compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=gpu_target, options=options)
    return {
        "kernel": name,
        "target": target_name,
        "dtype": dtype,
        "gelu": "tanh" if constexprs["APPROXIMATE_TANH"] else "none",
        "gated": constexprs.get("GATED"),  # the GEMM's form (None: an elementwise kernel)
        "int64_offsets": constexprs["INT64_OFFSETS"],
        "config": config,
        "most_tokens": most_tokens,  # GEMM: the most tokens of the class the configuration serves
        "num_warps": options["num_warps"],
        "shared_bytes": compiled.metadata.shared,
        **_registers(compiled, target.backend),
    }


def cannot_compile_for(target: Target) -> str:
    """Why the installed Triton cannot compile for this target without its device ("" when it can)."""
    tables = _kernel.device_tables
    config = tables.elementwise_config(1, 2**30, 2, target.warp_size)
    constexprs = dict(APPROXIMATE_TANH=True, BLOCK_M=config.block_m, BLOCK_N=config.block_n)
    job = ("geglu_forward_kernel", target.name, "bf16", {**constexprs, "INT64_OFFSETS": False, "INTERPRETED": False},
           {"num_warps": config.num_warps}, repr(config), None)
    try:
        compile_job(job)
    except Exception as error:  # a backend without its toolchain (no bundled linker, say)
        return f"Triton {triton.__version__} cannot compile for {target.name} here: {type(error).__name__}: {error}"
    return ""


def _load(build_dir: str) -> None:
    global _kernel
    from kernels import get_local_kernel

    _kernel = get_local_kernel(Path(build_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("--every-combination", action="store_true")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    _load(args.build_dir)
    assert not _kernel.triton_launcher.RUNS_INTERPRETED, "the interpreter compiles nothing: run without TRITON_INTERPRET"
    targets = []
    for target in TARGETS:
        why_not = cannot_compile_for(target)
        if why_not:
            print(json.dumps({"target": target.name, "skipped": why_not}), flush=True)
        else:
            targets.append(target)
    jobs = [
        job
        for target in targets
        for jobs_of in (gemm_jobs, elementwise_jobs)
        for job in jobs_of(_kernel, target, args.every_combination)
    ]
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        for result in pool.imap_unordered(compile_job, jobs):
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
