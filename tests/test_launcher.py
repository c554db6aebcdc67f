"""The direct launcher: Triton's dispatch once per specialization, the compiled kernel's runner after.

A fake JIT function and driver stand in for Triton's (no GPU needed); on the
H200 the same code path runs for real under every kernel test and the bench.
"""

from __future__ import annotations

import types

import pytest
import torch


class FakeCompiledKernel:
    """What ``kernel[grid](...)`` returns: ``run`` records each direct launch as Triton's dispatch makes it."""

    function = "cu-function"
    packed_metadata = "packed-metadata"

    def __init__(self, launches: list) -> None:
        self.launches = launches

    def launch_metadata(self, grid, stream, *args):
        return ("metadata", grid)

    def run(self, grid_x, grid_y, grid_z, stream, function, packed_metadata, metadata, enter_hook, exit_hook, *args):
        assert (function, packed_metadata) == (self.function, self.packed_metadata)
        self.launches.append(((grid_x, grid_y, grid_z), args, stream, metadata, enter_hook))


class FakeJITFunction:
    """A ``@triton.jit`` kernel(ptr, n, BLOCK: constexpr, FLAG: constexpr) that records Triton-dispatched calls."""

    def __init__(self) -> None:
        self.dispatches: list = []
        self.direct_launches: list = []

    def __getitem__(self, grid):
        def dispatch(*args, **constexprs_and_options):
            self.dispatches.append((grid, args, constexprs_and_options))
            return FakeCompiledKernel(self.direct_launches)

        return dispatch


STREAM = 0xC0FFEE


@pytest.fixture
def launcher_module(kernel, monkeypatch):
    module = kernel.triton_launcher
    device = types.SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda index: STREAM)
    monkeypatch.setattr(module, "driver", types.SimpleNamespace(active=device))
    monkeypatch.setattr(module, "knobs", _knobs(enter_hook=None))
    return module


def _knobs(enter_hook):
    return types.SimpleNamespace(runtime=types.SimpleNamespace(launch_enter_hook=enter_hook, launch_exit_hook=None))


def _direct_launcher(module):
    jit = FakeJITFunction()
    launcher = module.Launcher(jit)
    launcher.direct = True  # as on a GPU with a supported Triton
    return jit, launcher


def _options(module, block=16, flag=True, num_warps=4):
    return module.LaunchOptions(constexprs=(("BLOCK", block), ("FLAG", flag)), num_warps=num_warps)


def test_second_call_launches_the_compiled_kernel_directly(launcher_module):
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    launch((4,), (buffer,), (32,), _options(launcher_module))
    launch((8,), (buffer,), (48,), _options(launcher_module))
    assert jit.dispatches == [((4,), (buffer, 32), {"BLOCK": 16, "FLAG": True, "num_warps": 4})]
    # Every bound argument, constexprs included, in signature order; the grid as three axes.
    # Without a launch hook there is no launch metadata (Triton's launch_metadata would return None).
    assert jit.direct_launches == [((8, 1, 1), (buffer, 48, 16, True), STREAM, None, None)]


class FakeCudaTensor:
    """What the launcher reads of a CUDA (or ROCm) tensor: its device, dtype and address."""

    is_cuda = True
    dtype = torch.float16

    def __init__(self, address: int) -> None:
        self.address = address

    def get_device(self) -> int:
        return 0

    def data_ptr(self) -> int:
        return self.address


def test_cuda_pointers_travel_as_addresses(launcher_module):
    """CUDA and ROCm launchers take integers as they are (a tensor costs them a driver query per pointer)."""
    jit, launch = _direct_launcher(launcher_module)
    first, second = FakeCudaTensor(0x7F0000000000), FakeCudaTensor(0x7F0000001000)
    launch((4,), (first,), (32,), _options(launcher_module))
    launch((4,), (second,), (32,), _options(launcher_module))
    assert jit.dispatches[0][1] == (first, 32)  # Triton's own dispatch still sees the tensor
    assert jit.direct_launches[0][1] == (0x7F0000001000, 32, 16, True)


def test_launch_hooks_get_their_metadata(launcher_module, monkeypatch):
    """With a launch-enter hook set (a profiler), the direct launch passes it, as Triton's dispatch does."""
    hook = object()
    monkeypatch.setattr(launcher_module, "knobs", _knobs(enter_hook=hook))
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    for _ in range(2):
        launch((2,), (buffer,), (32,), _options(launcher_module))
    assert jit.direct_launches == [((2, 1, 1), (buffer, 32, 16, True), STREAM, ("metadata", (2, 1, 1)), hook)]


@pytest.mark.parametrize(
    "changed_tensors, changed_scalars, changed_options",
    [
        (lambda b: (b[1:],), (32,), {}),  # address no longer 16-byte aligned
        (lambda b: (b.half(),), (32,), {}),  # another dtype
        (lambda b: (b,), (33,), {}),  # not divisible by 16
        (lambda b: (b,), (1,), {}),  # equal to 1
        (lambda b: (b,), (2**31 + 16,), {}),  # past int32
        (lambda b: (b,), (32,), {"block": 32}),  # another constexpr
        (lambda b: (b,), (32,), {"num_warps": 8}),  # another launch option
    ],
    ids=["alignment", "dtype", "divisibility", "one", "int64", "constexpr", "num_warps"],
)
def test_a_new_specialization_goes_through_triton(launcher_module, changed_tensors, changed_scalars, changed_options):
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    launch((4,), (buffer,), (32,), _options(launcher_module))
    launch((4,), changed_tensors(buffer), changed_scalars, _options(launcher_module, **changed_options))
    assert len(jit.dispatches) == 2 and jit.direct_launches == []


def test_without_direct_launch_every_call_goes_through_triton(launcher_module):
    jit = FakeJITFunction()
    launch = launcher_module.Launcher(jit)
    launch.direct = False
    buffer = torch.empty(8)
    for _ in range(3):
        launch((1,), (buffer,), (8,), _options(launcher_module))
    assert len(jit.dispatches) == 3 and jit.direct_launches == []


def test_interpreted_kernels_never_launch_directly(launcher_module, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not launcher_module.direct_launch_supported()
