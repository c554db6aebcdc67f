"""Per-device launch tables: the device described from what Triton's driver reports, the table chosen from that."""

from __future__ import annotations

import types

import pytest
import torch

from offline_compile import TARGETS

from geglu_triton.benchmarking.grid import GEMMA_MLPS

#: Published figures (shared/REFERENCE.md) of devices users run: shared memory per block, warp size.
DEVICES = {
    "A100 (sm_80)": (166_912, 32),
    "A10G (sm_86)": (101_376, 32),
    "L4 (sm_89)": (101_376, 32),
    "H200 (sm_90)": (232_448, 32),
    "B200 (sm_100)": (232_448, 32),
    "RTX 5090 (sm_120)": (101_376, 32),
    "MI300X (gfx942)": (65_536, 64),
    "Intel Max (xpu)": (131_072, 32),
}


def _traits(tables, shared_memory, warp_size):
    return tables.DeviceTraits(shared_memory, warp_size)


#: Each GEMM's tables, and the function that picks one of them for a device.
GEMM_TABLE_KINDS = {"fused": ("GEMM_TABLES", "gemm_table"), "down_proj": ("DOWN_PROJ_TABLES", "down_proj_table")}


#: The fused GEMM's shared-memory class each device must get: the largest it reaches (written out, not
#: derived by the rule under test). The down projection's table has one class, 0, for every device.
FUSED_CLASS = {
    "A100 (sm_80)": 166_912,
    "A10G (sm_86)": 101_376,
    "L4 (sm_89)": 101_376,
    "H200 (sm_90)": 232_448,
    "B200 (sm_100)": 232_448,
    "RTX 5090 (sm_120)": 101_376,
    "MI300X (gfx942)": 65_536,
    "Intel Max (xpu)": 101_376,
}


@pytest.mark.parametrize("kind", GEMM_TABLE_KINDS)
@pytest.mark.parametrize("name", DEVICES)
def test_every_device_gets_a_table_that_fits_its_shared_memory_class(kernel, name, kind):
    tables = kernel.device_tables
    by_class, pick = (getattr(tables, attr) for attr in GEMM_TABLE_KINDS[kind])
    shared_memory, warp_size = DEVICES[name]
    expected_class = FUSED_CLASS[name] if kind == "fused" else 0
    assert expected_class <= shared_memory
    assert pick(_traits(tables, shared_memory, warp_size)) is dict(by_class)[expected_class]


def test_the_down_projection_table_has_a_decode_class_only(kernel):
    """Past its decode class cuBLAS runs the down projection: no configuration, on every class's device."""
    tables = kernel.device_tables
    for needs, table in tables.DOWN_PROJ_TABLES:
        device = _traits(tables, needs, 32)
        (decode,) = table
        assert tables.down_proj_gemm_config(1, 0, device) == tables.down_proj_gemm_config(decode.most_tokens, 0, device)
        assert tables.down_proj_gemm_config(1, 0, device) == decode.config
        assert tables.down_proj_gemm_config(decode.most_tokens + 1, 0, device) is None


#: Each Gemma MLP's projection weight, in bytes (bf16 [intermediate, hidden]; the down projection's is its transpose).
GEMMA_WEIGHT_BYTES = {mlp.name: mlp.intermediate * mlp.hidden * 2 for mlp in GEMMA_MLPS}
#: The Gemma MLPs with at most device_tables.SMALL_WEIGHT_BYTES per weight: those the measurements behind the
#: small-weight classes were taken on (device_tables' comments).
SMALL_GEMMA_MLPS = {"Gemma3 1B", "Gemma2 2B", "Gemma3 4B"}


def test_the_h200_keeps_its_tuned_table_and_smaller_devices_get_smaller_stages(kernel):
    tables = kernel.device_tables
    h200 = _traits(tables, *DEVICES["H200 (sm_90)"])
    a10g = _traits(tables, *DEVICES["A10G (sm_86)"])
    mi300 = _traits(tables, *DEVICES["MI300X (gfx942)"])
    assert tables.gemm_config(1, GEMMA_WEIGHT_BYTES["Gemma 7B"], h200) == tables.GemmConfig(16, 64, 128, 1, 4, 5)
    assert tables.gemm_config(1, 0, a10g).num_stages < 5
    assert tables.gemm_config(1, 0, mi300).block_n < 64


@pytest.mark.parametrize("name", ["H200 (sm_90)", "A100 (sm_80)"])
def test_small_weights_decode_with_the_whole_grid_resident(kernel, name):
    """At 1-16 tokens the small Gemma MLPs take 3 stages (two or three programs per SM, a grid of N / 64
    programs resident at once), the larger ones the deeper 5-stage pipeline, one program per SM
    (device_tables' comments)."""
    tables = kernel.device_tables
    device = _traits(tables, *DEVICES[name])
    stages = {
        mlp: {tables.gemm_config(tokens, nbytes, device).num_stages for tokens in (1, 8, 16)}
        for mlp, nbytes in GEMMA_WEIGHT_BYTES.items()
    }
    assert stages == {mlp: {3} if mlp in SMALL_GEMMA_MLPS else {5} for mlp in GEMMA_WEIGHT_BYTES}


def test_the_crossover_to_cublas_follows_the_h200_measurements(kernel):
    """Which Gemma MLPs run fused past 64 tokens on the H200's table, as measured (device_tables' comments):
    65-128 tokens up to Gemma3 4B's weights, not from Gemma 2B's 64 MiB; 129-256 only the 1B's."""
    tables = kernel.device_tables
    h200 = _traits(tables, *DEVICES["H200 (sm_90)"])
    fused_to = {}
    for name, weight_bytes in GEMMA_WEIGHT_BYTES.items():
        served = [n for n in (1, 16, 64, 65, 128, 129, 256, 257, 4096) if tables.gemm_config(n, weight_bytes, h200)]
        assert served == [n for n in served if n <= served[-1]]  # a prefix: fused up to a point, then cuBLAS
        fused_to[name] = served[-1]
    expected = {name: 128 if name in SMALL_GEMMA_MLPS else 64 for name in GEMMA_WEIGHT_BYTES}
    assert fused_to == {**expected, "Gemma3 1B": 256}
    # Devices whose crossover was not measured stop at 64 tokens whatever the weight.
    for name in ("A100 (sm_80)", "A10G (sm_86)", "MI300X (gfx942)"):
        device = _traits(tables, *DEVICES[name])
        assert tables.gemm_config(64, 1, device) is not None and tables.gemm_config(65, 1, device) is None
    assert tables.FUSED_MAX_TOKENS == 256


def test_the_down_projection_runs_our_gemm_on_small_weights_only(kernel):
    """Our GEMV won on Gemma3 1B, Gemma2 2B and Gemma3 4B; from Gemma 2B's 64 MiB cuBLAS's is as fast."""
    tables = kernel.device_tables
    h200 = _traits(tables, *DEVICES["H200 (sm_90)"])
    runs = {name for name, nbytes in GEMMA_WEIGHT_BYTES.items() if tables.down_proj_gemm_config(1, nbytes, h200)}
    assert runs == SMALL_GEMMA_MLPS


def test_a_device_below_every_class_runs_projections_unfused(kernel, monkeypatch):
    """Below the fused GEMM's smallest class: two GEMMs and the activation kernel. The down projection's
    one-token form needs no shared memory to speak of, so it runs on every device."""
    tables, gemm = kernel.device_tables, kernel.triton_gemm_kernels
    smallest = min(needs for needs, _ in tables.GEMM_TABLES)
    tiny = _traits(tables, smallest - 1, 32)
    assert tables.gemm_table(tiny) is None and tables.gemm_config(1, 0, tiny) is None
    assert tables.down_proj_gemm_config(1, 0, tiny) is not None
    monkeypatch.setattr(gemm, "describe_device", lambda index: tiny)
    assert gemm.fused_config(1, 0, torch.empty(1, 64).get_device()) is None


@pytest.mark.parametrize("kind", GEMM_TABLE_KINDS)
def test_the_offline_check_covers_every_class(kernel, kind):
    """Each table is picked for at least one target tests/test_offline_compile.py compiles for."""
    tables = kernel.device_tables
    by_class, pick = (getattr(tables, attr) for attr in GEMM_TABLE_KINDS[kind])
    picked = {id(pick(_traits(tables, t.shared_memory, t.warp_size))) for t in TARGETS}
    assert picked == {id(table) for _, table in by_class}


@pytest.mark.parametrize("element_size", [2, 4])
def test_elementwise_tiles_give_each_lane_one_16_byte_vector(kernel, element_size):
    """32-lane warps and 64-lane wavefronts alike: a full tile has one vector per thread per tensor."""
    tables = kernel.device_tables
    for warp_size in (32, 64):
        config = tables.elementwise_config(1, 2**30, element_size, warp_size)
        tile_bytes = config.block_m * config.block_n * element_size
        assert tile_bytes == config.num_warps * warp_size * tables.VECTOR_BYTES
        for small in tables.elementwise_configs(element_size, warp_size):
            assert small.block_m * small.block_n * element_size <= config.num_warps * warp_size * tables.VECTOR_BYTES


def test_the_device_is_read_once_from_triton_s_driver(kernel, monkeypatch):
    tables = kernel.device_tables
    reads = []

    def get_device_properties(index):
        reads.append(index)
        return {"max_shared_mem": 101_376, "multiprocessor_count": 80, "warpSize": 32}

    driver = types.SimpleNamespace(
        active=types.SimpleNamespace(
            utils=types.SimpleNamespace(get_device_properties=get_device_properties),
            get_current_target=lambda: types.SimpleNamespace(backend="cuda", warp_size=32),
        )
    )
    monkeypatch.setattr("triton.runtime.driver", driver)
    tables.describe_device.cache_clear()
    try:
        for _ in range(3):
            assert tables.describe_device(1) == tables.DeviceTraits(101_376, 32)
        assert tables.describe_device(-1) == tables.INTERPRETER
        assert reads == [1]
    finally:
        tables.describe_device.cache_clear()
